"""The wait-for graph in the report: kept whole through the JSON, shown by the page's
no-JavaScript view and the ticket summary, absent from both when the report has none."""

from __future__ import annotations

import dataclasses

import pytest

from diagnose.render.html import render_html
from diagnose.render.markdown import render_markdown
from diagnose.report.model import Report
from diagnose.report.model.wait_graph import (EdgeKind, NodeKind, ResourceKind, WaitEdge,
                                              WaitGraph, WaitNode)
from tests.report_data import as_report
from tests.unit.test_markdown_summary import HOSTILE, assert_safe, plain

SCRIPT = "</script><img src=x onerror=alert(1)>"


def file_lock_graph(label: str = "worker 4343", summary: str = "3 workers wait for a file lock "
                    "held by cache-warmer 4344 in rebuild_index") -> WaitGraph:
    workers = tuple(WaitNode(f"w{pid}", NodeKind.THREADS, label if pid == 4343 else f"worker {pid}",
                             pid=pid, threads=4, running_share=0.05, site="handle app.py:88")
                    for pid in (4341, 4342, 4343))
    lock = WaitNode("flock", NodeKind.RESOURCE, "/var/cache/model.lock",
                    resource=ResourceKind.FILE_LOCK, detail="flock(7, LOCK_EX)")
    holder = WaitNode("warmer", NodeKind.PROCESS, "cache-warmer 4344", pid=4344, threads=1,
                      running_share=0.9, site="rebuild_index warm.py:51")
    knot = (WaitNode("a", NodeKind.THREADS, "reader", pid=4350, threads=1),
            WaitNode("l", NodeKind.RESOURCE, "Lock at db.py:33", resource=ResourceKind.LOCK))
    edges = tuple(WaitEdge(w.id, "flock", EdgeKind.WAITS_FOR, 0.7, 20.0 + i)
                  for i, w in enumerate(workers))
    edges += (WaitEdge("flock", "warmer", EdgeKind.HELD_BY, 0.97),
              WaitEdge("a", "l", EdgeKind.WAITS_FOR, 1.0, 10.0),
              WaitEdge("l", "a", EdgeKind.HELD_BY, 1.0))
    return WaitGraph(nodes=workers + (lock, holder) + knot, edges=edges, knots=(("a", "l"),),
                     bottleneck="flock", summary=summary, observations=4000)


def with_graph(graph: WaitGraph | None) -> Report:
    return dataclasses.replace(as_report({"verdict": {"headline": "h"}}), wait_graph=graph)


def page(report: Report) -> str:
    return render_html({"report": report.to_json()}, report)


def noscript(html: str) -> str:
    return html[html.index("<noscript>"):html.index("</noscript>")]


def test_a_report_with_a_wait_graph_round_trips_through_its_json():
    report = with_graph(file_lock_graph())
    data = report.to_json()
    again = Report.from_json(data)
    assert again == report
    assert again.wait_graph is not None and again.wait_graph.bottleneck == "flock"
    assert again.wait_graph.knots == (("a", "l"),)
    assert again.wait_graph.nodes[3].resource == ResourceKind.FILE_LOCK


def test_a_report_without_one_has_no_key_and_no_section():
    report = with_graph(None)
    assert "wait_graph" not in report.to_json()
    assert Report.from_json(report.to_json()).wait_graph is None
    for empty in (None, WaitGraph(summary="nothing waited")):
        html = page(with_graph(empty))
        assert 'id="wait-graph"' not in html and "Wait-for graph" not in html
        assert "Wait-for graph" not in render_markdown(with_graph(empty))


def test_the_no_javascript_view_has_the_summary_the_hang_and_every_edge_escaped():
    report = with_graph(file_lock_graph(label=SCRIPT))
    html = page(report)
    assert 'id="wait-graph"' in html
    view = noscript(html)
    assert "<h2>Wait-for graph</h2>" in view
    assert "3 workers wait for a file lock held by cache-warmer 4344 in rebuild_index" in view
    assert "<strong>Hang:</strong> reader, Lock at db.py:33 wait only on each other" in view
    table = view[view.index('<table id="noscript-wait-edges">'):view.index("</table>")]
    assert table.count("<tr>") == 1 + len(report.wait_graph.edges)
    assert "/var/cache/model.lock (bottleneck)" in table
    assert "held by" in table and "70.0%" in table and "22.00 s" in table
    assert SCRIPT not in html  # only its escaped form, in the data and the view
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in table


@pytest.mark.parametrize("name", HOSTILE)
def test_the_ticket_summary_has_the_graph_in_one_escaped_line(name):
    text = render_markdown(with_graph(file_lock_graph(summary=f"3 workers wait on {name}")))
    assert_safe(text)
    lines = [line for line in text.splitlines() if line.startswith("**Wait-for graph:**")]
    assert len(lines) == 1
    one_line = " ".join(name.split()).replace("\u202e", "[U+202E]")
    assert f"3 workers wait on {one_line}" in plain(text)
    assert "A hang: 1 knot (waiting only on each other, none running)." in lines[0]
