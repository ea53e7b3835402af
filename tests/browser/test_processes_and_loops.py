"""Multi-process targets and event loops in the HTML report, in a real browser.

The pages are rendered with the production renderer from reports/dev_sample_data.json: a master
(4242) with three workers, the asyncio loop of worker 4341 blocked by a requests.get and model
inference, a mostly idle uvloop in worker 4342, and hostile names (a callback called
`<img src=x onerror=alert(1)>`, markup in a worker's command line and in a thread name).
"""

from __future__ import annotations

import re
from dataclasses import replace
from types import SimpleNamespace

import pytest

from diagnose.report.model import EventLoop, Report
from tests.browser.conftest import dev_sample_data, render_page, requires_browser
from tests.browser.typed import report_of, shown, with_report

pytestmark = requires_browser

HOSTILE_CALLBACK = "<img src=x onerror=alert(1)>"
HOSTILE_THREAD = "</script><img src=x onerror=alert(1)>"
CMD_MAX_CHARS = 80  # page/processes.js CMD_MAX_CHARS


@pytest.fixture
def sample():
    return dev_sample_data()


@pytest.fixture
def report(sample) -> Report:
    """The sample's report, decoded once."""
    return report_of(sample)


@pytest.fixture
def sample_page(sample, open_report, tmp_path):
    return open_report(render_page(sample, tmp_path / "dev.html"))


def blocked_loop(report: Report) -> tuple[int, EventLoop]:
    """The loop that ran the app's synchronous code most, and its index in report.event_loops."""
    return max(enumerate(report.event_loops), key=lambda p: p[1].app_share)


def percent(text: str) -> float:
    match = re.search(r"(<)?(\d+(?:\.\d+)?)%", text)
    assert match, text
    return float(match.group(2))


def assert_percent(text: str, share: float):
    """`text` shows the fraction `share` as the page does (one decimal, or "<0.1%")."""
    if "<0.1%" in text:
        assert 0 < 100 * share < 0.1, (text, share)
    else:
        assert abs(percent(text) - 100 * share) <= 0.051, (text, share)


def shell_quote(arg: str) -> str:
    """page/verdict.js shellQuote: display-only quoting that keeps argument boundaries visible."""
    if arg and re.fullmatch(r"[\w@%+=:,./<>\[\]-]+", arg, re.ASCII):
        return arg
    return "'" + arg.replace("'", "'\\''") + "'"


_PROCESS_ROWS_JS = """els => els.map(tr => {
  const cmd = tr.querySelector('code.pcmd');
  const ptree = tr.querySelector('.ptree');
  return {
    pid: Number(tr.dataset.pid), ppid: tr.dataset.ppid === '' ? null : Number(tr.dataset.ppid),
    role: tr.dataset.role, depth: Number(tr.dataset.depth),
    cells: Array.from(tr.cells).map(td => td.textContent),
    roleText: tr.querySelector('.role').textContent,
    cpu: tr.querySelector('.pcpu').textContent, cpuTitle: tr.querySelector('.pcpu').getAttribute('title'),
    busy: tr.querySelector('.share-pct') ? tr.querySelector('.share-pct').textContent : null,
    finding: tr.querySelector('.pfinding') ? {
      id: tr.querySelector('.pf-id').textContent,
      score: tr.querySelector('.pf-score').textContent,
      summary: tr.querySelector('.pf-summary') ? tr.querySelector('.pf-summary').textContent : null,
      link: tr.querySelector('button.pf-id') !== null,
    } : null,
    cmd: cmd ? cmd.textContent : null, cmdTitle: cmd ? cmd.getAttribute('title') : null,
    indent: parseFloat(getComputedStyle(ptree).paddingLeft),
    branch: tr.querySelector('.ptree-branch') !== null
      && getComputedStyle(tr.querySelector('.ptree-branch')).display !== 'none',
  };
})"""


def process_rows(page) -> list:
    """The processes table's rows as the page shows them, read by attribute."""
    return shown(page.eval_on_selector_all("#processes-body tr.process-row", _PROCESS_ROWS_JS))


def test_the_sample_has_a_master_three_workers_and_a_blocked_loop(report):
    roles = sorted(p.role for p in report.processes)
    assert roles == ["master", "worker", "worker", "worker"]
    _, loop = blocked_loop(report)
    shares = [c.share for c in loop.callbacks]
    assert shares != sorted(shares, reverse=True), "callbacks are out of order, so ranking is tested"
    assert HOSTILE_CALLBACK in {c.function for c in loop.callbacks}
    assert len({t.pid for t in report.threads}) > 1
    assert {"event_loop_blocked", "worker_imbalance"} <= {f.id for f in report.findings}


def test_processes_table_lists_the_workers_under_their_master(report, sample_page):
    page = sample_page.page
    procs = {p.pid: p for p in report.processes}
    master = next(p for p in procs.values() if p.role == "master")
    assert page.is_visible("#processes")
    assert page.text_content("#processes-summary").startswith("4 processes: 1 master, 3 workers")
    rows = process_rows(page)
    assert len(rows) == 4
    assert {r.pid: r.role for r in rows} == {pid: p.role for pid, p in procs.items()}
    assert all(r.roleText == r.role for r in rows)
    # a tree: the master first, its workers indented under it in pid order
    assert rows[0].pid == master.pid and rows[0].depth == 0 and not rows[0].branch
    workers = rows[1:]
    assert [r.pid for r in workers] == sorted(p.pid for p in procs.values() if p.role == "worker")
    for row in workers:
        assert row.ppid == master.pid and row.depth == 1 and row.branch
        assert row.indent > rows[0].indent
    for row in rows:
        p = procs[row.pid]
        assert row.cpu == f"{p.cpu_cores:.2f} cores"
        assert row.cpuTitle.startswith(f"{p.cpu_s:g} CPU-seconds")
        assert_percent(row.busy, p.busy_share)
        assert str(p.threads) in row.cells
        lifetime = row.cells[5]
        if p.started_s is None and p.exited_s is None:
            assert lifetime == "whole window"
        else:
            assert lifetime == f"started at {p.started_s:.2f} s"
        top = p.top_finding
        if top is None:
            assert row.finding is None and row.cells[6] == "\u2014"
        else:
            assert row.finding == SimpleNamespace(id=top.id, score=f"score {top.score}",
                                                  summary=top.summary, link=True)
        # the command line, shortened, with all of it in the title
        cmd = p.cmdline  # a report writes the redacted line; a list is shell-quoted
        full = cmd if isinstance(cmd, str) else " ".join(shell_quote(a) for a in cmd)
        assert row.cmdTitle == full
        if len(full) > CMD_MAX_CHARS:
            assert row.cmd == full[:CMD_MAX_CHARS - 1] + "\u2026"
        else:
            assert row.cmd == full
    # the hostile argument is in the title, as text
    hostile = next(r for r in rows if "onerror=alert(3)" in r.cmdTitle)
    assert "</script><img src=x onerror=alert(3)>" in hostile.cmdTitle  # shown as text
    assert page.locator("#processes img, #processes script").count() == 0
    sample_page.assert_clean()


def test_a_process_top_finding_opens_that_finding(report, sample_page):
    page = sample_page.page
    pid = next(p.pid for p in report.processes
               if p.top_finding and p.top_finding.id == "event_loop_blocked")
    selector = 'details.finding[data-finding-id="event_loop_blocked"]'
    page.eval_on_selector(selector, "d => { d.open = false; }")
    page.click(f'#processes-body tr.process-row[data-pid="{pid}"] button.pf-id')
    assert page.eval_on_selector(selector, "d => d.open") is True
    sample_page.assert_clean()


def test_processes_table_sorts_and_the_pid_column_restores_the_tree(report, sample_page):
    page = sample_page.page
    procs = report.processes
    tree = [r.pid for r in process_rows(page)]
    page.locator("#processes-body thead .sort-btn", has_text="CPU").click()
    rows = process_rows(page)
    assert [r.pid for r in rows] == [p.pid for p in sorted(procs, key=lambda p: -p.cpu_cores)]
    assert all(r.indent == 0 and not r.branch for r in rows)  # no tree once sorted otherwise
    page.locator("#processes-body thead .sort-btn", has_text="Busy").click()
    rows = process_rows(page)
    assert [r.pid for r in rows] == [p.pid for p in sorted(procs, key=lambda p: -p.busy_share)]
    page.locator("#processes-body thead .sort-btn", has_text="PID").click()
    rows = process_rows(page)
    assert [r.pid for r in rows] == tree
    assert [r.branch for r in rows] == [False, True, True, True]
    sample_page.assert_clean()


_LOOP_JS = """el => {
  const bar = el.querySelector('.loop-bar').getBoundingClientRect().width;
  const facts = {};
  el.querySelectorAll('.loop-facts [data-fact]').forEach(f => { facts[f.dataset.fact] = f.textContent; });
  return {
    pid: Number(el.dataset.pid), tid: Number(el.dataset.tid), flavor: el.dataset.flavor,
    title: el.querySelector('.loop-title').textContent,
    segments: Array.from(el.querySelectorAll('.loop-seg')).map(s => ({
      part: s.dataset.part, share: Number(s.dataset.share),
      width: s.getBoundingClientRect().width / bar})),
    legend: Object.fromEntries(Array.from(el.querySelectorAll('.loop-part')).map(p =>
      [p.dataset.part, p.querySelector('.loop-pct').textContent])),
    facts,
    estimatedTag: el.querySelector('[data-fact="block-per-request"] .tag.est') !== null,
  };
}"""

# each part of a loop's bar, and the share of the loop it stands for
PARTS = {"idle": lambda loop: loop.idle_share, "framework": lambda loop: loop.framework_share,
         "app": lambda loop: loop.app_share}


def loop_shown(page, index: int) -> SimpleNamespace:
    """Event loop `index` as the page shows it ("cpu-os" fact read as facts.cpu_os)."""
    return shown(page.eval_on_selector(f"#loop-{index}", _LOOP_JS))


def test_event_loop_bars_show_the_shares_of_the_report(report, sample_page):
    page = sample_page.page
    loops = report.event_loops
    assert page.is_visible("#event-loops")
    assert page.locator("#event-loops-body .loop").count() == len(loops)
    for i, loop in enumerate(loops):
        on_page = loop_shown(page, i)
        assert (on_page.pid, on_page.tid, on_page.flavor) == (loop.pid, loop.tid, loop.flavor)
        assert on_page.title == f"{loop.pid} \u00b7 {loop.thread} (tid {loop.tid})"
        # idle in selector / framework / app's synchronous work, in that order
        assert [s.part for s in on_page.segments] == ["idle", "framework", "app"]
        for seg in on_page.segments:
            share = PARTS[seg.part](loop)
            assert seg.share == share
            assert abs(seg.width - share) < 0.005, seg  # the bar is drawn to scale
            assert_percent(getattr(on_page.legend, seg.part), share)
        facts = on_page.facts
        assert_percent(facts.busy, loop.busy_share)
        assert_percent(facts.cpu_os, loop.cpu_share_os)
        assert "of a core" in facts.cpu_os
        est = facts.block_per_request
        assert est.endswith("estimated") and on_page.estimatedTag
        assert f"{round(loop.est_block_per_request_s * 1000):g} ms" in est
        assert facts.block_runs.startswith(f"{loop.block_runs:,} blocking stretch")
    sample_page.assert_clean()


def test_a_loop_without_os_cpu_or_estimate_leaves_them_out(sample, report, open_report, tmp_path):
    first = replace(report.event_loops[0], cpu_share_os=None, est_block_per_request_s=None)
    changed = with_report(sample, replace(report, event_loops=(first, *report.event_loops[1:])))
    opened = open_report(render_page(changed, tmp_path / "no-estimate.html"))
    facts = loop_shown(opened.page, 0).facts
    assert not hasattr(facts, "cpu_os") and not hasattr(facts, "block_per_request")
    assert hasattr(facts, "busy")
    opened.assert_clean()


_CALLBACK_ROWS_JS = """els => els.map(tr => ({
  rank: Number(tr.dataset.rank), share: Number(tr.dataset.share), kind: tr.dataset.kind,
  fn: tr.querySelector('.cb-fn').textContent,
  file: tr.querySelector('.cb-file').textContent, fileTitle: tr.querySelector('.cb-file').getAttribute('title'),
  shareText: tr.querySelector('.share-pct').textContent,
  kindText: tr.querySelector('.cb-kind').textContent,
  site: tr.querySelector('.cb-site .site-fn') ? tr.querySelector('.cb-site .site-fn').textContent : null,
  siteFile: tr.querySelector('.cb-site .site-file') ? tr.querySelector('.cb-site .site-file').textContent : null,
  detail: tr.querySelector('.cb-detail').textContent,
}))"""

KIND_LABELS = {"cpu": "CPU work", "blocking_call": "blocking call", "framework": "framework"}


def callback_rows(page, index: int) -> list:
    return shown(page.eval_on_selector_all(f"#loop-{index} tr.callback-row", _CALLBACK_ROWS_JS))


def test_callbacks_are_ranked_by_share(report, sample_page):
    page = sample_page.page
    index, loop = blocked_loop(report)
    rows = callback_rows(page, index)
    ranked = sorted(loop.callbacks, key=lambda c: -c.share)
    assert len(rows) == len(ranked)
    assert [r.rank for r in rows] == list(range(1, len(ranked) + 1))
    assert [r.share for r in rows] == [c.share for c in ranked]
    for row, cb in zip(rows, ranked):
        assert row.fn == cb.function
        assert row.file.replace("U+202E", "\u202e") == f"{cb.file.rsplit('/', 1)[-1]}:{cb.line}"
        assert row.fileTitle.replace("\u27e8U+202E\u27e9", "\u202e") == f"{cb.file}:{cb.line}"
        assert_percent(row.shareText, cb.share)
        assert row.kind == cb.kind and row.kindText == KIND_LABELS[cb.kind]
        if cb.call_site:
            site = cb.call_site
            assert row.site == site.function
            assert row.siteFile == f"{site.file.rsplit('/', 1)[-1]}:{site.line}"
        else:
            assert row.site is None
        assert row.detail == cb.detail
    # sorting by another column and back to the ranking
    page.locator(f"#loop-{index} thead .sort-btn", has_text="Function").click()
    names = page.eval_on_selector_all(f"#loop-{index} tr.callback-row .cb-fn", "els => els.map(e => e.textContent)")
    assert sorted(names) == sorted(c.function for c in ranked) and names != [c.function for c in ranked]
    page.locator(f"#loop-{index} thead .sort-btn", has_text="#").click()
    again = callback_rows(page, index)
    assert [r.fn for r in again] == [c.function for c in ranked]
    sample_page.assert_clean()


def test_hostile_names_in_processes_and_loops_stay_text(report, sample_page):
    page = sample_page.page
    index, _ = blocked_loop(report)
    fns = page.eval_on_selector_all(f"#loop-{index} .cb-fn", "els => els.map(e => e.textContent)")
    assert HOSTILE_CALLBACK in fns
    assert HOSTILE_CALLBACK in page.inner_text("#event-loops")  # rendered, not hidden
    assert "</script><b>scheduled with call_soon</b>" in page.text_content("#event-loops")
    assert page.locator("img").count() == 0
    assert page.locator("#event-loops b, #processes b, #event-loops script").count() == 0
    assert page.evaluate("document.scripts.length") == 2  # the data block and the page script
    labels = page.eval_on_selector_all("#threads tbody tr[data-thread-index] td:first-child",
                                       "els => els.map(e => e.textContent)")
    assert f"4340 \u00b7 {HOSTILE_THREAD}" in labels
    page.wait_for_timeout(200)  # any injected handler would have fired by now
    assert sample_page.dialogs == []
    sample_page.assert_clean()


def timeline_label(page, lane: int) -> list[str]:
    """Hovers the label area of timeline lane `lane`; returns the tooltip's lines."""
    step = int(page.get_attribute("#timeline", "data-lane-height"))
    canvas = page.locator("#timeline-canvas")
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + 4, box["y"] + lane * step + 6)
    page.wait_for_selector("#tooltip:not([hidden])", timeout=5000)
    return page.eval_on_selector_all("#tooltip > div", "els => els.map(e => e.textContent)")


def test_threads_timeline_and_waits_name_the_process(sample, report, sample_page):
    page = sample_page.page
    threads = report.threads
    rows = page.eval_on_selector_all(
        "#threads tbody tr[data-thread-index]",
        "els => els.map(tr => [Number(tr.dataset.threadIndex), Number(tr.dataset.pid),"
        " tr.cells[0].textContent, tr.cells[0].querySelector('button').textContent])")
    assert len(rows) == len(threads)
    for index, pid, label, button in rows:
        t = threads[index]
        assert pid == t.pid
        assert label == f"{t.pid} \u00b7 {t.name}"
        assert button == t.name  # the name alone still opens the flame graph
    # the same label on each timeline lane, the pid in its tooltip
    lanes = report.page.timeline.lanes  # the page's own table, carried in the report
    for lane in (0, 5, len(lanes) - 1):
        t = threads[lanes[lane].thread]
        lines = timeline_label(page, lane)
        assert lines[0] == f"{t.pid} \u00b7 {t.name}"
        assert f"pid{t.pid}" in lines
    # the flame graph's thread picker says which process
    options = page.eval_on_selector_all("#flame-thread option", "els => els.map(e => e.textContent)")
    assert "MainThread (pid 4341, tid 4341)" in options
    # and each wait site names its process
    pids = page.eval_on_selector_all("#waits-body tr.wait-row .site-pid", "els => els.map(e => e.textContent)")
    assert pids == [f"process {w.pid}" for w in report.waits]
    sample_page.assert_clean()


def test_a_loop_links_to_its_thread_in_the_flame_graph(report, sample_page):
    page = sample_page.page
    index, loop = blocked_loop(report)
    thread = next(i for i, t in enumerate(report.threads) if t.tid == loop.tid and t.pid == loop.pid)
    page.click(f"#loop-{index} button.loop-flame")
    assert page.get_attribute("#flame", "data-thread") == str(thread)
    assert int(page.get_attribute("#flame", "data-total-samples")) == report.threads[thread].samples
    sample_page.assert_clean()


def test_single_process_reports_show_neither_section_nor_pids(sample, report, open_report, tmp_path):
    master = next(p for p in report.processes if p.role == "master")
    one = replace(master, role="single", ppid=None)
    # one process: its threads all in it, no event loop, no wait site naming a process
    single = replace(report, processes=(one,), event_loops=(),
                     threads=tuple(replace(t, pid=master.pid) for t in report.threads),
                     waits=tuple(replace(w, pid=None) for w in report.waits))
    # a report from before processes were read: neither section, no thread's pid
    absent = with_report(sample, replace(single, threads=tuple(replace(t, pid=None)
                                                                for t in single.threads)))
    for key in ("processes", "event_loops"):
        absent["report"].pop(key)
    for variant, data in (("one", with_report(sample, single)), ("absent", absent)):
        opened = open_report(render_page(data, tmp_path / f"{variant}.html"))
        page = opened.page
        assert page.is_hidden("#processes") and page.is_hidden("#event-loops")
        assert page.locator("#processes-body tr, #event-loops-body .loop").count() == 0
        labels = page.eval_on_selector_all("#threads tbody tr[data-thread-index] td:first-child",
                                           "els => els.map(e => e.textContent)")
        assert sorted(labels) == sorted(t.name for t in report.threads)
        assert timeline_label(page, 0)[0] == report.threads[0].name
        assert page.locator("#waits-body .site-pid").count() == 0
        opened.assert_clean()


def test_helpers_lifetimes_and_malformed_entries_render_without_errors(sample, open_report, tmp_path):
    report = sample["report"]
    report["processes"] += [
        {"pid": 4399, "ppid": 4242, "role": "helper",
         "cmdline": ["/srv/venv/bin/python", "-c", "from multiprocessing.resource_tracker import main;main(5)"],
         "threads": 1, "cpu_s": None, "cpu_cores": None, "busy_share": 0.0, "samples": 310,
         "started_s": 0.4, "exited_s": 12.5, "top_finding": None},
        {"pid": 4500, "ppid": 4242, "role": "worker", "cmdline": "python worker.py \u202e--evil",
         "threads": 1, "cpu_s": 0.2, "cpu_cores": 0.01, "busy_share": 0.02, "samples": 20,
         "started_s": None, "exited_s": 7.25, "top_finding": {"id": "not-in-findings", "score": "high"}},
        {"pid": 5001, "ppid": 5002, "role": "worker"},  # a ppid cycle: neither is anyone's child
        {"pid": 5002, "ppid": 5001, "role": "constructor", "cmdline": None},
        "not a process", None, [], {},
    ]
    loops = report["event_loops"]
    loops.append({"pid": "x", "callbacks": [None, {"function": None, "share": "a lot"},
                                                           {"function": "ok", "kind": "toString"}]})
    opened = open_report(render_page(sample, tmp_path / "odd.html"))
    page = opened.page
    rows = {r.pid: r for r in process_rows(page)}
    assert set(rows) == {4242, 4340, 4341, 4342, 4399, 4500, 5001, 5002}
    helper = rows[4399]
    assert helper.role == "helper" and helper.ppid == 4242 and helper.depth == 1
    assert helper.cells[5] == "started at 0.40 s, exited at 12.50 s"
    assert helper.cpu == "\u2014" and helper.cmd.startswith("/srv/venv/bin/python -c")
    assert rows[4500].cells[5] == "exited at 7.25 s"
    assert rows[4500].finding.id == "not-in-findings" and not rows[4500].finding.link
    assert "U+202E" in rows[4500].cmd and "\u202e" not in page.inner_text("#processes")
    assert {rows[5001].depth, rows[5002].depth} == {0, 1}
    # the odd loop is drawn with what it has
    odd = page.locator("#event-loops-body .loop").nth(len(loops) - 1)
    assert odd.locator("tr.callback-row").count() == 2
    assert odd.locator(".loop-pct").all_text_contents() == ["\u2014"] * 3
    opened.assert_clean()


def test_without_javascript_the_fallback_lists_processes_and_loops(sample, report, browser, tmp_path):
    html = render_page(sample, tmp_path / "nojs.html")
    context = browser.new_context(java_script_enabled=False, service_workers="block")
    try:
        page = context.new_page()
        page.goto(html.resolve().as_uri(), wait_until="load")
        text = page.inner_text("body")
        assert "Processes" in text and "Event loops" in text
        for p in report.processes:
            assert f"{p.pid} ({p.role})" in text
        _, loop = blocked_loop(report)
        assert f"{loop.pid} \u00b7 {loop.thread} ({loop.flavor})" in text
        assert page.locator("img").count() == 0
    finally:
        context.close()
