"""Every core-second accounted (issue 44): the kernel's counters say how much CPU the service
used over the window (its processes' user and system time, its reaped children's, its children
not sampled), the samples say where the user time went (Python, native libraries, the garbage
collector); the parts add up to the whole, and a recording without the counters has no account
("not measured"), never a made-up one."""

from __future__ import annotations

import json

import pytest

from diagnose.checks.engine import run_checks
from diagnose.collect.procfs import ProcessTimes, ProcRecord, ThreadCounters, TreeRecord, parse_times
from diagnose.model.cpu_account import cpu_account
from diagnose.model.os_summary import CollectorState
from diagnose.model.service import ProcessView, Service, other_children_s
from diagnose.vocab import CpuPart, ProcessRole
from diagnose.render.cpu_account_words import NO_ACCOUNT, account_words
from diagnose.render.report_files import page_html, summary_markdown
from diagnose.run.build_report import build_report
from diagnose.report.model import Report
from tests.unit.test_gc_pressure import COLLECTING, NUMPY_CALL, PYTHON, analysis, gc_heavy

CLK = 100  # ticks per second in the stat lines below


def stat_line(comm: str, utime: int, stime: int, cutime: int, cstime: int) -> str:
    fields = ["S", "1", "1", "1", "0", "-1", "4194304", "0", "0", "0", "0",
              str(utime), str(stime), str(cutime), str(cstime), "20", "0", "1", "0", "1"]
    return f"4242 ({comm}) " + " ".join(fields)


def service_of(*analyses, other_children: float | None = 0.0, exited: dict | None = None) -> Service:
    views = [ProcessView(100 + i, 1 if i == 0 else 100, ProcessRole.WORKER, ["python", "s.py"], a)
             for i, a in enumerate(analyses)]
    for view in views:
        view.exited_s = (exited or {}).get(view.pid)
    return Service(analyses[0], views, other_children)


def parts(account) -> dict[str, float | None]:
    return {p.part.value: p.cpu_s for p in account.parts}


# -- the kernel's counters -----------------------------------------------------------------------

def test_a_stat_line_gives_user_kernel_and_reaped_children_times(monkeypatch):
    monkeypatch.setattr("diagnose.collect.procfs.CLOCK_TICKS", CLK)
    times = parse_times(stat_line("my (odd) name", 392, 8, 40, 10))
    assert (times.user_s, times.system_s, times.children_user_s, times.children_system_s) == (3.92, 0.08, 0.4, 0.1)
    assert times.own_s == pytest.approx(4.0) and times.reaped_s == pytest.approx(0.5)


def test_older_recordings_read_without_the_new_counters():
    old = {"pid": 7, "cores": 2, "cpu_quota_cores": None, "started_at": 0.0, "ended_at": 4.0,
           "first": {"7": {"cpu_s": 1.0, "runqueue_wait_s": 0.1, "timeslices": 3, "voluntary_ctx": 1,
                           "involuntary_ctx": 2}},
           "last": {"7": {"cpu_s": 3.0, "runqueue_wait_s": 0.2, "timeslices": 9, "voluntary_ctx": 4,
                          "involuntary_ctx": 5}}}
    record = ProcRecord.from_dict(old)
    assert record.process_cpu == [] and record.last[7].user_s is None
    assert TreeRecord.from_dict({"roots": [7], "processes": [{"record": old}]}).other_children == {}
    assert other_children_s(TreeRecord.from_dict({"roots": [7], "processes": [{"record": old}]})) is None


def test_the_new_counters_round_trip_through_a_recording():
    record = ProcRecord(pid=7, cores=2, cpu_quota_cores=None, started_at=0.0)
    record.first[7] = ThreadCounters(1.0, None, None, None, None, 0.9, 0.1)
    record.process_cpu = [ProcessTimes(1.0, 0.1, 0.0, 0.0).as_list(), ProcessTimes(3.0, 0.3, 0.5, 0.1).as_list()]
    tree = TreeRecord(roots=[7], records={7: record}, other_children={9: [7.0, 1.0, 2.5], 10: [7.0, None, 0.4],
                                                                       11: [9.0, 0.2, None]})
    again = TreeRecord.from_dict(json.loads(json.dumps(tree.to_dict())))
    assert again.records[7].process_cpu == record.process_cpu
    assert again.records[7].first[7].user_s == 0.9
    # 9 ran 1.5 s in the window, 10 started in it (0.4 s), 11 is gone (in its parent's reaped)
    assert other_children_s(again) == pytest.approx(1.9)


# -- the account's arithmetic ----------------------------------------------------------------------

def test_the_parts_add_up_and_the_user_time_is_split_by_the_running_samples():
    process = gc_heavy()  # 40% collector, 50% Python, 10% numpy; four threads at 1 s, 98% user
    account = cpu_account(service_of(process, other_children=0.5))
    assert account is not None and account.native_frames and account.samples == 100
    got = parts(account)
    user = 4 * 0.98
    assert got["collector"] == pytest.approx(0.4 * user, abs=1e-3)
    assert got["python"] == pytest.approx(0.5 * user, abs=1e-3)
    assert got["native"] == pytest.approx(0.1 * user, abs=1e-3)
    assert got["kernel"] == pytest.approx(4 * 0.02, abs=1e-3)
    assert (got["children"], got["reaped"], got["unexplained"]) == (0.5, 0.0, 0.0)
    assert account.cpu_s == pytest.approx(sum(v for v in got.values() if v is not None), abs=1e-2)
    assert sum(p.share or 0 for p in account.parts) == pytest.approx(1.0, abs=1e-3)
    assert account.cores == pytest.approx(account.cpu_s / 4.0, abs=1e-3)
    estimated = {p.part.value for p in account.parts if p.estimated}
    assert estimated == {"python", "native", "collector"}


def test_native_only_threads_exited_threads_and_reaped_children_have_their_own_parts():
    process = gc_heavy()
    os_ = process.os
    assert os_ is not None
    pool = type(os_.threads[1])(tid=99, comm="omp", cpu_s=0.6, user_s=0.6, system_s=0.0)  # no Python frames
    process.os = type(os_)(**{**os_.__dict__, "threads": {**os_.threads, 99: pool},
                              "process_user_s": (os_.process_user_s or 0) + 0.6 + 0.25,
                              "reaped_children_s": 1.2})
    got = parts(cpu_account(service_of(process)))
    assert got["native"] == pytest.approx(0.6 + 0.1 * 3.92, abs=1e-3)
    assert got["unexplained"] == pytest.approx(0.25, abs=1e-3)  # a thread gone before it was read
    assert got["reaped"] == pytest.approx(1.2)


def test_a_sampled_child_reaped_by_its_sampled_parent_is_counted_once():
    parent, child = gc_heavy(), gc_heavy()
    os_ = parent.os
    assert os_ is not None
    parent.os = type(os_)(**{**os_.__dict__, "reaped_children_s": 5.0})  # the child's whole life
    account = cpu_account(service_of(parent, child, exited={101: 3.0}))
    child_own = (child.os.process_user_s or 0) + (child.os.process_system_s or 0)
    assert parts(account)["reaped"] == pytest.approx(5.0 - child_own, abs=1e-3)


def test_without_native_frames_the_collector_is_not_measured_and_python_holds_its_time():
    python_only = analysis({1: [(COLLECTING, 40), (PYTHON, 50), (NUMPY_CALL, 10)]}, native_profile=False)
    account = cpu_account(service_of(python_only))
    assert account is not None and not account.native_frames
    collector = account.part(CpuPart.COLLECTOR)
    assert collector is not None and collector.cpu_s is None and "not measured" in collector.how
    # Python frames alone read the numpy call as Python too: all of the user time is "Python"
    assert parts(account)["python"] == pytest.approx(0.98, abs=1e-3)
    assert parts(account)["native"] == 0.0
    # ...and the account says so, not only "(estimate)"
    assert any(n.startswith("no native frames: the user time's split") for n in account.notes)
    words = account_words(account)
    assert "garbage collector not measured" in words.summary


def test_a_collector_whose_counters_say_no_collection_ran_spent_nothing_without_native_frames():
    idle = CollectorState(polls=400, collecting_share=0.0, polled_s=8.0, collections=(0, 0, 0))
    python_only = analysis({1: [(PYTHON, 90), (NUMPY_CALL, 10)]}, native_profile=False, held=idle)
    account = cpu_account(service_of(python_only))
    assert account is not None and not account.native_frames
    collector = account.part(CpuPart.COLLECTOR)
    assert collector is not None and collector.cpu_s == 0.0 and not collector.estimated, collector
    assert "no collection ran" in collector.how and "counters" in collector.how
    assert "garbage collector not measured" not in account_words(account).summary


def test_a_collector_that_collected_is_still_not_measured_without_native_frames():
    # a young collection or two in the window, none caught by a poll: its time is unknown, not 0
    busy = CollectorState(polls=400, collecting_share=0.0, polled_s=8.0, collections=(3, 0, 0))
    python_only = analysis({1: [(PYTHON, 90), (NUMPY_CALL, 10)]}, native_profile=False, held=busy)
    collector = cpu_account(service_of(python_only)).part(CpuPart.COLLECTOR)
    assert collector is not None and collector.cpu_s is None and "not measured" in collector.how


def test_a_worker_whose_counters_say_no_collection_ran_does_not_borrow_its_siblings_collector():
    # the second process runs the same program, so it takes the first one's native split
    # (40% collector, 50% Python, 10% numpy), but its own counters say no collection ran
    idle = CollectorState(polls=400, collecting_share=0.0, polled_s=8.0, collections=(0, 0, 0))
    python_only = analysis({1: [(PYTHON, 100)]}, native_profile=False, held=idle)
    account = cpu_account(service_of(gc_heavy(), python_only))
    collector = account.part(CpuPart.COLLECTOR)
    assert collector is not None and collector.estimated  # the first process's share is sampled
    assert collector.cpu_s == pytest.approx(0.4 * 4 * 0.98, abs=1e-3)  # the first process's alone
    assert "native frames" in collector.how and "no collection ran in 1 process" in collector.how
    # the idle one's user time goes to Python and numpy in the sibling's proportion (5:1)
    assert parts(account)["python"] == pytest.approx(0.5 * 3.92 + 0.98 * 5 / 6, abs=1e-3)
    assert parts(account)["native"] == pytest.approx(0.1 * 3.92 + 0.98 / 6, abs=1e-3)


def test_a_recording_without_the_process_counters_has_no_account():
    process = gc_heavy()
    os_ = process.os
    assert os_ is not None
    process.os = type(os_)(**{**os_.__dict__, "process_user_s": None, "process_system_s": None,
                              "reaped_children_s": None})
    assert cpu_account(service_of(process)) is None
    assert account_words(None).summary == NO_ACCOUNT and not account_words(None).measured


# -- in the report -------------------------------------------------------------------------------

def report_for(service: Service) -> Report:
    results = run_checks(service.combined)
    return build_report(service, results, {100: results})


def test_the_report_carries_the_account_in_its_json_and_on_its_page():
    report = report_for(service_of(gc_heavy()))
    data = report.to_json()
    assert [p["part"] for p in data["cpu_account"]["parts"]] == [p.value for p in CpuPart]
    assert Report.from_json(json.loads(json.dumps(data))).cpu_account == report.cpu_account
    html = page_html(report)
    assert 'id="cpu-account"' in html and 'id="noscript-cpu-account"' in html
    assert "garbage collector 39% (estimate)" in html
    assert "| CPU account |" in summary_markdown(report, "r")


def test_a_report_without_the_account_leaves_the_key_out_and_says_not_measured():
    process = gc_heavy()
    os_ = process.os
    assert os_ is not None
    process.os = type(os_)(**{**os_.__dict__, "process_user_s": None})
    report = report_for(service_of(process))
    assert "cpu_account" not in report.to_json()
    html = page_html(report)
    assert NO_ACCOUNT.split(":")[0] in html and "| CPU account |" not in summary_markdown(report, "r")


def test_a_worker_the_native_calibration_did_not_sample_takes_its_siblings_split():
    calibrated = gc_heavy()  # 40% collector
    uncalibrated = analysis({5: [(COLLECTING, 40), (PYTHON, 50), (NUMPY_CALL, 10)]}, native_profile=False)
    account = cpu_account(service_of(calibrated, uncalibrated))
    assert account is not None and account.native_frames
    # both processes' Python user time (4 x 0.98 + 0.98) split 40% collector
    assert parts(account)["collector"] == pytest.approx(0.4 * 5 * 0.98, abs=1e-3)


def test_the_user_time_of_threads_gone_between_reads_goes_with_the_python_threads_whose_samples_ran():
    # a thread per request: thread 1 ran in the samples but the counters never read it; the
    # process's user time beyond the counted threads' (2-4, waiting for the GIL) splits as the
    # Python threads' does
    process = gc_heavy()
    os_ = process.os
    assert os_ is not None
    counted = {tid: t for tid, t in os_.threads.items() if tid != 1}
    process.os = type(os_)(**{**os_.__dict__, "threads": counted})
    account = cpu_account(service_of(process))
    assert account is not None
    got = parts(account)
    assert got["unexplained"] == 0.0
    user = os_.process_user_s or 0.0
    assert got["python"] + got["collector"] + got["native"] == pytest.approx(user, abs=1e-3)
    assert any("came and went between the counters' reads" in note for note in account.notes)
    # threads the counters never read that did not run in the samples explain nothing
    idle = gc_heavy()
    assert idle.os is not None
    idle.os = type(idle.os)(**{**idle.os.__dict__, "threads": {t: c for t, c in idle.os.threads.items() if t != 4}})
    assert parts(cpu_account(service_of(idle)))["unexplained"] == pytest.approx(idle.os.threads[1].user_s, abs=1e-3)


def test_a_split_resting_on_few_running_samples_is_said_to_be_of_low_confidence():
    few = cpu_account(service_of(analysis({1: [(COLLECTING, 2), (PYTHON, 3)]})))
    assert few is not None and few.samples == 5
    assert any("rests on 5 running samples: low confidence" in note and "+-44 points" in note
               for note in few.notes)
    many = cpu_account(service_of(gc_heavy()))  # 100 running samples
    assert many is not None and not any("low confidence" in note for note in many.notes)
