"""The wait-for graph (report.wait_graph) drawn by the page's own script as SVG, in a real browser.

The pages are rendered with the production renderer from reports/dev_sample_data.json with a
wait graph added: the request threads of three workers wait for a file lock held by a cache
warmer (the bottleneck), one worker's threads also wait for the GIL, the warmer waits on a pipe a
sidecar serves, and in another process a reader and a writer each hold the lock the other waits
for (a knot: a hang). The third worker's label is hostile markup.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from diagnose.report.model.wait_graph import (EdgeKind, NodeKind, ResourceKind, WaitEdge, WaitGraph,
                                              WaitNode)
from tests.browser.conftest import dev_sample_data, render_page, requires_browser
from tests.browser.typed import report_of, shown, with_report

pytestmark = requires_browser

HOSTILE = "</script><img src=x onerror=alert(1)>"
WORKERS = ["w4341", "w4342", "w4343"]
KNOT = ["reader", "lock-a", "writer", "lock-b"]
SUMMARY = ("11 request threads of 3 workers wait for a file lock (/var/cache/model.lock) held by "
           "cache-warmer 4344 in rebuild_index: 68% of their time")


def _node(id_: str, kind: str, label: str, resource: str | None = None, **more) -> WaitNode:
    return WaitNode(id_, NodeKind(kind), label,
                    resource=ResourceKind(resource) if resource else None, **more)


def _edge(source: str, target: str, kind: str = "waits_for", share: float = 0.0,
          seconds: float = 0.0) -> WaitEdge:
    return WaitEdge(source, target, EdgeKind(kind), share=share, thread_seconds=seconds)


def with_graph(graph: WaitGraph | None) -> dict:
    """The sample's page data with `graph` as its report's wait graph (None: the report has none)."""
    data = dev_sample_data()
    return with_report(data, replace(report_of(data), wait_graph=graph))


def file_lock_graph() -> WaitGraph:
    """report.wait_graph: a file-lock bottleneck and a knot."""
    nodes = [
        _node("w4341", "threads", "worker 4341 \u00b7 handle_request", pid=4341, threads=4,
              running_share=0.06, site="handle_request app/server.py:88"),
        _node("w4342", "threads", "worker 4342 \u00b7 handle_request", pid=4342, threads=4,
              running_share=0.05, site="handle_request app/server.py:88"),
        _node("w4343", "threads", HOSTILE, pid=4343, threads=3, running_share=0.08,
              site="handle_request app/server.py:88"),
        _node("flock", "resource", "/var/cache/model.lock", resource="file_lock",
              detail="flock(7, LOCK_EX) on /var/cache/model.lock, inode 1835 (FLOCK ADVISORY WRITE)"),
        _node("warmer", "process", "cache-warmer 4344", pid=4344, threads=1, running_share=0.92,
              site="rebuild_index warm.py:51"),
        _node("gil4341", "resource", "GIL of 4341", pid=4341, resource="gil",
              detail="futex 0x7f3a5c2e1a40 in _PyRuntime"),
        _node("pipe", "resource", "pipe:[88412]", resource="pipe", detail="read(5) on pipe:[88412]"),
        _node("sidecar", "process", "sidecar 4390", pid=4390, threads=2, running_share=0.4),
        _node("reader", "threads", "4350 \u00b7 reader", pid=4350, threads=1, running_share=0.0,
              site="read_rows db.py:40"),
        _node("lock-a", "resource", "Lock at db.py:33", pid=4350, resource="lock",
              detail="futex 0x55d0c3a1b2c0"),
        _node("writer", "threads", "4350 \u00b7 writer", pid=4350, threads=1, running_share=0.0,
              site="write_rows db.py:61"),
        _node("lock-b", "resource", "Lock at db.py:34", pid=4350, resource="lock",
              detail="futex 0x55d0c3a1b300"),
    ]
    edges = [
        _edge("w4341", "flock", share=0.71, seconds=28.4),
        _edge("w4342", "flock", share=0.66, seconds=26.4),
        _edge("w4343", "flock", share=0.69, seconds=20.7),
        _edge("flock", "warmer", "held_by", share=0.97),
        _edge("w4341", "gil4341", share=0.08, seconds=3.2),
        _edge("warmer", "pipe", share=0.05, seconds=0.5),
        _edge("pipe", "sidecar", "served_by", share=1.0),
        _edge("reader", "lock-a", share=1.0, seconds=10.0),
        _edge("lock-a", "writer", "held_by", share=1.0),
        _edge("writer", "lock-b", share=1.0, seconds=10.0),
        _edge("lock-b", "reader", "held_by", share=1.0),
    ]
    return WaitGraph(nodes=tuple(nodes), edges=tuple(edges), knots=(tuple(KNOT),),
                     bottleneck="flock", summary=SUMMARY, observations=4000)


@pytest.fixture
def graph_page(open_report, tmp_path):
    return open_report(render_page(with_graph(file_lock_graph()), tmp_path / "graph.html"))


_NODES_JS = """els => els.map(g => {
  const r = g.getBoundingClientRect();
  return {
    id: g.dataset.id, kind: g.dataset.kind, bottleneck: g.dataset.bottleneck, knot: g.dataset.knot,
    label: g.querySelector('.wg-label').textContent, aria: g.getAttribute('aria-label'),
    words: g.querySelector('.wg-words').textContent, halo: !!g.querySelector('.wg-halo'),
    neckTag: g.querySelector('.wg-bottleneck-tag') ? g.querySelector('.wg-bottleneck-tag').textContent : null,
    hang: g.querySelector('.wg-hang') ? g.querySelector('.wg-hang').textContent : null,
    stroke: g.querySelector('.wg-shape').getAttribute('stroke'), x: r.left, w: r.width,
  };
})"""

_EDGES_JS = """els => els.map(g => {
  const line = g.querySelector('.wg-line');
  return {
    source: g.dataset.source, target: g.dataset.target, kind: g.dataset.kind, knot: g.dataset.knot,
    width: parseFloat(line.getAttribute('stroke-width')), dash: line.getAttribute('stroke-dasharray'),
    stroke: line.getAttribute('stroke'), arrow: !!g.querySelector('.wg-arrow'),
  };
})"""


def test_the_graph_draws_every_node_and_edge_with_the_bottleneck_and_the_hang(graph_page):
    page = graph_page.page
    graph = file_lock_graph()
    assert page.is_visible("#wait-graph svg.wg-svg")
    assert page.text_content("#wait-graph-summary") == SUMMARY
    drawn_nodes = shown(page.eval_on_selector_all("#wait-graph svg .wg-node", _NODES_JS))
    nodes = {n.id: n for n in drawn_nodes}
    assert set(nodes) == {n.id for n in graph.nodes}
    for n in graph.nodes:
        assert nodes[n.id].kind == n.kind
    assert nodes["w4341"].words == "4 threads \u00b7 running 6.0%"
    assert nodes["flock"].words == "file lock"
    # waiters left of the lock, the lock left of its holder
    assert max(nodes[w].x for w in WORKERS) < nodes["flock"].x < nodes["warmer"].x
    # the bottleneck, and only it, highlighted
    neck = [n for n in nodes.values() if n.bottleneck == "true"]
    assert [n.id for n in neck] == ["flock"]
    assert neck[0].halo and neck[0].neckTag == "bottleneck"
    assert not any(n.halo or n.neckTag for n in nodes.values() if n.id != "flock")
    # the knot's nodes in red, each marked "hang"; nothing else
    hung = sorted(n.id for n in nodes.values() if n.knot == "true")
    assert hung == sorted(KNOT)
    assert all(nodes[i].hang == "hang" and nodes[i].stroke == "#c62f38" for i in KNOT)
    assert not any(n.hang for n in nodes.values() if n.id not in KNOT)
    assert "wait only on each other" in page.text_content("#wait-graph .wg-knot-note")

    edges = shown(page.eval_on_selector_all("#wait-graph svg .wg-edge", _EDGES_JS))
    assert sorted((e.source, e.target, e.kind) for e in edges) == sorted(
        (e.source, e.target, str(e.kind)) for e in graph.edges)
    assert all(e.arrow for e in edges)
    by = {(e.source, e.target): e for e in edges}
    for e in graph.edges:
        drawn = by[(e.source, e.target)]
        assert (drawn.dash is None) == (e.kind == "waits_for")  # held_by / served_by dashed
        assert drawn.knot == ("true" if e.source in KNOT and e.target in KNOT else "false")
    assert by[("w4341", "flock")].width > by[("w4341", "gil4341")].width  # width by share
    assert all(e.stroke == "#c62f38" for e in edges if e.knot == "true")
    labels = page.eval_on_selector_all(
        "#wait-graph .wg-edge-label",
        "els => els.map(e => Array.from(e.querySelectorAll('text')).map(t => t.textContent).join(' / '))")
    assert "71.0% / 28.40 s" in labels and "held by / 97.0%" in labels  # share over time
    graph_page.assert_clean()


def test_a_hostile_label_is_text_and_no_element(graph_page):
    page = graph_page.page
    label = page.eval_on_selector('#wait-graph .wg-node[data-id="w4343"]',
                                  "g => ({text: g.querySelector('.wg-label').textContent,"
                                  " aria: g.getAttribute('aria-label')})")
    shown = label["text"].removesuffix("\u2026")  # cut to the box when too wide
    assert len(shown) >= 10 and HOSTILE.startswith(shown)
    assert label["aria"].startswith(HOSTILE + ":")
    cells = page.eval_on_selector_all("#wait-graph table .wg-cell-label", "els => els.map(e => e.textContent)")
    assert HOSTILE in cells
    assert page.evaluate("document.getElementsByTagName('img').length") == 0
    assert page.evaluate("document.scripts.length") == 2
    page.wait_for_timeout(200)
    assert graph_page.dialogs == []
    graph_page.assert_clean()


def test_hovering_a_node_shows_its_site_and_the_kernel_detail(graph_page):
    page = graph_page.page
    page.hover('#wait-graph .wg-node[data-id="flock"]')
    tip = page.text_content("#tooltip")
    assert page.is_visible("#tooltip")
    assert "inode 1835" in tip and "bottleneck" in tip
    page.hover('#wait-graph .wg-node[data-id="warmer"]')
    assert "rebuild_index warm.py:51" in page.text_content("#tooltip")
    graph_page.assert_clean()


@pytest.mark.parametrize("graph", [None, WaitGraph()])
def test_no_graph_or_no_edges_draws_nothing(graph, open_report, tmp_path):
    opened = open_report(render_page(with_graph(graph), tmp_path / "none.html"))
    page = opened.page
    assert page.locator("#wait-graph").count() == 0
    assert page.locator("svg.wg-svg").count() == 0
    assert "Wait-for graph" not in page.inner_text("body")
    opened.assert_clean()


def test_edges_to_unknown_nodes_hide_the_section(open_report, tmp_path):
    graph = file_lock_graph()
    graph = replace(graph, nodes=graph.nodes[:1])  # every edge now names a node the graph lacks
    opened = open_report(render_page(with_graph(graph), tmp_path / "broken.html"))
    assert opened.page.locator("#wait-graph").count() == 1
    assert not opened.page.is_visible("#wait-graph")
    opened.assert_clean()


def test_a_large_graph_draws_forty_nodes_and_lists_every_edge(open_report, tmp_path):
    nodes = [_node("lock", "resource", "Lock at big.py:1", resource="lock")]
    edges = []
    for k in range(60):
        nodes.append(_node(f"t{k}", "threads", f"group {k}", pid=5000, threads=1, running_share=0.1))
        edges.append(_edge(f"t{k}", "lock", share=0.5, seconds=60 - k))
    graph = WaitGraph(nodes=tuple(nodes), edges=tuple(edges), bottleneck="lock",
                      summary="60 groups wait", observations=100)
    opened = open_report(render_page(with_graph(graph), tmp_path / "big.html"))
    page = opened.page
    assert page.locator("#wait-graph svg .wg-node").count() == 40
    assert page.locator("#wait-graph svg .wg-edge").count() == 39
    drawn = set(page.eval_on_selector_all("#wait-graph svg .wg-node", "els => els.map(e => e.dataset.id)"))
    assert "lock" in drawn and "t0" in drawn and "t59" not in drawn  # the heaviest waiters
    assert "21 more nodes and 21 edges" in page.text_content("#wait-graph-more")
    assert page.locator("#wait-graph tr.wg-edge-row").count() == 60
    opened.assert_clean()


def parent_child_knot() -> WaitGraph:
    """A parent in wait4 for its child, the child writing to a full pipe only the parent reads:
    four columns, as fixtures/recorded/knots/parent_woken_by_an_observer draws them."""
    nodes = [
        _node("child", "threads", "worker 9538: 1 thread", pid=9538, threads=1, running_share=0.0,
              site="child deadlock_subprocess.py:58"),
        _node("pipe", "resource", "pipe 8499545 (other end: python 9537)", resource="pipe",
              detail="write: pipe:8499545"),
        _node("parent", "threads", "process 9537: 1 thread", pid=9537, threads=1, running_share=0.056,
              site="main deadlock_subprocess.py:127"),
        _node("wait4", "resource", "a child process", pid=9537, resource="child", detail="wait4: child:9537"),
    ]
    edges = [_edge("child", "pipe", share=1.0, seconds=3.72), _edge("pipe", "parent", "held_by", share=1.0),
             _edge("parent", "wait4", share=0.944, seconds=3.51), _edge("wait4", "child", "served_by", share=1.0)]
    return WaitGraph(tuple(nodes), tuple(edges), (("child", "pipe", "parent", "wait4"),),
                     bottleneck="pipe", summary="hang", observations=34)


def test_a_childs_node_names_its_parent_and_a_pill_keeps_its_words_whole(open_report, tmp_path):
    # a laptop's width: the card narrows four columns' nodes under their 210 px
    shown_page = open_report(render_page(with_graph(parent_child_knot()), tmp_path / "knot.html"),
                             viewport={"width": 1100, "height": 900})
    nodes = {n.id: n for n in shown(shown_page.page.eval_on_selector_all("#wait-graph svg .wg-node", _NODES_JS))}
    # the child resource's pid is the waiting parent's: said as such, never as the child's own
    assert nodes["wait4"].words == "child process \u00b7 of pid 9537"
    # four columns narrow the nodes; a pill's middle line has the pill's full width at that height
    assert nodes["wait4"].w < 210
    assert "\u2026" not in nodes["wait4"].words and nodes["wait4"].label == "a child process"
    shown_page.assert_clean()
