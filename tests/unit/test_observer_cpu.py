"""The observer's own CPU over the window (diagnose/collect/observer_cpu.py): read from /proc at
the window's start and end, diagnose's process and every process it started, a child reaped in
between still counted through its parent's reaped-children times; the target's from the /proc
sampler's record. Then the report's words for it (render/wording.py) in every output."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from diagnose.collect import observer_cpu
from diagnose.collect.procfs import CLOCK_TICKS, ProcRecord, ThreadCounters, TreeRecord
from diagnose.collect.run_context import WindowCpu
from diagnose.render.html import render_html
from diagnose.render.html_data import page_data
from diagnose.render.markdown import render_markdown
from diagnose.render.wording import observer_cpu_text
from diagnose.run.build_report import observer_cost
from diagnose.report.model import Observer, Sampling
from diagnose.report.model.codec import decode, encode
from diagnose.run.pipeline import from_file
from tests.conftest import RECORDED

SELF = 4000


def stat(pid: int, comm: str, utime: int, stime: int, cutime: int = 0, cstime: int = 0,
         ppid: int = 1, state: str = "S") -> str:
    """A /proc/<pid>/stat line (ticks), its 52 fields; utime..cstime are fields 14-17."""
    fields = [state, ppid, pid, pid, 0, -1, 4194560, 100, 0, 0, 0, utime, stime, cutime, cstime,
              20, 0, 3, 0, 12345, 1000000, 500] + [0] * 30
    return f"{pid} ({comm}) " + " ".join(map(str, fields)) + "\n"


def ticks(seconds: float) -> int:
    return round(seconds * CLOCK_TICKS)


def test_stat_cpu_reads_own_and_reaped_times_past_a_command_name_with_spaces_and_parens():
    text = stat(SELF, "py thon) (x", ticks(1.5), ticks(0.5), ticks(2.0), ticks(0.25))
    assert observer_cpu.stat_cpu(text) == pytest.approx((2.0, 2.25))


def test_used_counts_own_threads_running_children_and_a_child_reaped_in_between():
    # Start: diagnose used 1.0 s; recorder A (2001) has run 0.4 s, recorder B (2002) 0.7 s;
    # an earlier probe, reaped before the window, left 0.3 s in the reaped times.
    start = observer_cpu.reading(
        stat(SELF, "python", ticks(0.8), ticks(0.2), ticks(0.2), ticks(0.1)),
        {2001: stat(2001, "py-spy", ticks(0.3), ticks(0.1), ppid=SELF),
         2002: stat(2002, "py-spy", ticks(0.5), ticks(0.2), ppid=SELF)},
        at=100.0)
    # End, 4 s later: diagnose 1.5 s; A still there at 1.0 s; B exited and was reaped at 1.2 s
    # (its whole life moved into the reaped times), and so was a helper interpreter C started
    # and reaped inside the window (0.3 s); D, started in the window, is a zombie at 0.2 s.
    end = observer_cpu.reading(
        stat(SELF, "python", ticks(1.2), ticks(0.3), ticks(0.3 + 1.2 + 0.3), ticks(0.0)),
        {2001: stat(2001, "py-spy", ticks(0.7), ticks(0.3), ppid=SELF),
         2004: stat(2004, "python3", ticks(0.15), ticks(0.05), ppid=SELF, state="Z")},
        at=104.0)
    cpu = observer_cpu.used(start, end)
    assert cpu.own_cpu_s == pytest.approx(0.5)
    # A 0.6 + B's window part 0.5 (1.2 - 0.7) + C 0.3 + D 0.2
    assert cpu.children_cpu_s == pytest.approx(0.6 + 0.5 + 0.3 + 0.2)
    assert cpu.cpu_s == pytest.approx(2.1)
    assert cpu.window_s == pytest.approx(4.0)


def _record(pid: int, started: float, ended: float | None,
            cpu: dict[int, tuple[float, float | None]]) -> ProcRecord:
    record = ProcRecord(pid=pid, cores=2, cpu_quota_cores=None, started_at=started)
    record.ended_at = ended
    for tid, (first, last) in cpu.items():
        record.first[tid] = ThreadCounters(first, None, None, None, None)
        if last is not None:
            record.last[tid] = ThreadCounters(last, None, None, None, None)
    return record


def test_the_target_tree_cpu_is_each_threads_cpu_between_its_readings_over_the_longest_span():
    tree = TreeRecord(roots=[10])
    tree.records[10] = _record(10, 1000.0, 1004.0, {10: (5.0, 8.0), 11: (1.0, 2.5),
                                                    12: (0.5, None)})  # 12: never read again
    tree.records[20] = _record(20, 1001.0, 1004.0, {20: (0.0, 2.0)})  # born a second in
    assert observer_cpu.tree_cpu(tree) == pytest.approx((3.0 + 1.5 + 2.0, 4.0))
    assert observer_cpu.tree_cpu(TreeRecord(roots=[10], records={
        10: _record(10, 1000.0, None, {10: (1.0, 2.0)})})) is None


def test_window_cpu_rounds_for_the_report_and_needs_both_readings():
    start = observer_cpu.CpuReading(at=10.0, own_s=1.0, reaped_s=0.0)
    end = observer_cpu.CpuReading(at=14.0004, own_s=1.2, reaped_s=0.6, children={7: 0.2})
    tree = TreeRecord(roots=[10], records={10: _record(10, 0.0, 4.0, {10: (0.0, 7.72)})})
    assert observer_cpu.window_cpu(start, end, tree) == WindowCpu(
        own_cpu_s=0.2, children_cpu_s=0.8, window_s=4.0, target_cpu_s=7.72, target_window_s=4.0)
    assert observer_cpu.window_cpu(None, end, tree) is None
    assert observer_cpu.window_cpu(start, end, None).target_cpu_s is None


def test_reading_this_process_counts_its_own_work_and_a_child_that_exited():
    before = observer_cpu.read()
    assert before is not None
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass"
    child = subprocess.Popen([sys.executable, "-c", spin])
    assert child.wait() == 0  # reaped: in the reaped times
    t = time.process_time()
    while time.process_time() - t < 0.1:
        pass
    after = observer_cpu.read()
    assert after is not None
    cpu = observer_cpu.used(before, after)
    assert cpu.children_cpu_s >= 0.15
    assert cpu.own_cpu_s >= 0.05
    # the reaped child is no longer a running one (other tests of this worker may run theirs)
    assert child.pid not in observer_cpu.child_pids()


# ------------------------------------------------------------------ the report

MEASURED = WindowCpu(own_cpu_s=0.2, children_cpu_s=0.64, window_s=4.0, target_cpu_s=7.72,
                     target_window_s=4.0)


def test_the_observer_carries_the_measure_and_round_trips_and_an_older_one_still_reads():
    observer = observer_cost(Sampling(mode="blocking", rate_hz=100), MEASURED)
    assert (observer.observer_cpu_s, observer.observer_own_cpu_s,
            observer.observer_children_cpu_s) == (0.84, 0.2, 0.64)
    assert (observer.observer_cores, observer.target_cpu_s, observer.target_cores,
            observer.cpu_window_s) == (0.21, 7.72, 1.93, 4.0)
    written = json.loads(json.dumps(encode(observer)))
    assert decode(Observer, written) == observer
    # Offline (no measure): none of the keys is written, and a report without them reads.
    plain = observer_cost(Sampling(mode="offline"))
    data = encode(plain)
    assert not {"observer_cpu_s", "observer_cores", "target_cores", "cpu_window_s"} & set(data)
    assert decode(Observer, data) == plain
    assert decode(Observer, {"paused_share": 0.01, "pyspy_cpu_s": 1.0}).observer_cores is None


def test_the_words_say_the_observer_beside_the_target():
    observer = observer_cost(Sampling(mode="blocking"), MEASURED)
    assert observer_cpu_text(observer) == (
        "observer: 0.21 cores (diagnose 0.05, py-spy 0.16) beside the target's 1.93 cores, "
        "measured from /proc over the 4.0 s window")
    assert observer_cpu_text(Observer()) == ""
    no_target = replace(observer, target_cores=None, target_cpu_s=None)
    assert "beside" not in observer_cpu_text(no_target)
    assert observer_cpu_text(replace(observer, observer_cores=float("nan"))) == ""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    out = tmp_path_factory.mktemp("observer-cpu")
    return from_file(RECORDED / "lock_contention.speedscope.json", out, None,
                     RECORDED / "lock_contention.procfs.json").report


def _measured(report):
    sampling = report.sampling
    return replace(report, sampling=replace(
        sampling, observer=observer_cost(sampling, MEASURED)))


LINE = ("observer: 0.21 cores (diagnose 0.05, py-spy 0.16) beside the target's 1.93 cores, "
        "measured from /proc over the 4.0 s window")


def test_the_markdown_summary_states_it_in_the_run_facts_and_offline_says_nothing(recorded):
    assert f"| Observer CPU | {LINE} |" in render_markdown(_measured(recorded))
    assert "Observer CPU" not in render_markdown(recorded)


def test_the_page_carries_the_words_and_its_no_javascript_view_escapes_them(recorded):
    report = _measured(recorded)
    page = render_html(page_data(report), report)
    escaped = LINE.replace("'", "&#39;")
    assert f'<p id="noscript-observer-cpu">{escaped}</p>' in page
    assert LINE not in page.split("<script", 1)[0]  # the raw apostrophe never reaches the markup
    assert json.dumps(LINE) in page  # the page's data: what its script prints as it is
    offline = render_html(page_data(recorded), recorded)
    assert "noscript-observer-cpu" not in offline
    assert '"observer_cpu_text":""' in offline
