"""Threads that came and went between the /proc sampler's reads (a thread per request): the
process's own counters hold their CPU, their page faults and their system time, which no
thread's counter does."""

from __future__ import annotations

import dataclasses

import pytest

from diagnose.checks import kernel_work
from diagnose.checks.base import Finding
from diagnose.checks.engine import load_check_settings
from diagnose.collect.procfs import ProcessTimes, ProcRecord, ThreadCounters, parse_times
from diagnose.model.analysis import Analysis
from diagnose.model.os_summary import combine, runqueue_ratio, summarize
from tests.replay import replay
from tests.unit.test_gc_pressure import LIB, THREAD, analysis, py

KERNEL = load_check_settings()["kernel_work"]
WINDOW_S = 4.0

# the acceptor: a long-lived thread that starts one thread per request (socketserver.ThreadingMixIn)
ACCEPTING = [py("serve_forever", 240, f"{LIB}/socketserver.py"), py("process_request", 705, f"{LIB}/socketserver.py"),
             py("Thread.start", 964, f"{LIB}/threading.py")]
# a request thread filling a fresh array
FILLING = THREAD + [py("handle", 9)]


def record(thread_cpu: dict[int, tuple[float, float]], process: tuple[ProcessTimes, ProcessTimes],
           seen_once: tuple[int, ...] = (), reads=(0, 0), writes=(0, 0)) -> ProcRecord:
    """A window of WINDOW_S: threads read at both ends (CPU at the end, from 0), threads whose
    state was seen once and never counted again, and the process's own counters."""
    rec = ProcRecord(pid=1, cores=2, cpu_quota_cores=None, started_at=100.0)
    rec.ended_at = 100.0 + WINDOW_S
    for tid, (user_s, system_s) in thread_cpu.items():
        rec.first[tid] = ThreadCounters(0.0, 0.0, 0, 0, 0, user_s=0.0, system_s=0.0)
        rec.last[tid] = ThreadCounters(user_s + system_s, 0.1, 10, 5, 5, user_s=user_s, system_s=system_s)
        rec.state_samples += [(100.5, tid, "R"), (103.5, tid, "R")]
    rec.state_samples += [(101.0 + 0.1 * k, tid, "R") for k, tid in enumerate(seen_once)]
    rec.process_cpu = [process[0].as_list(), process[1].as_list()]
    rec.read_syscalls, rec.write_syscalls = list(reads), list(writes)
    return rec


def test_the_process_cpu_counts_threads_that_came_and_went_between_reads():
    summary = summarize(record({1: (0.1, 0.1)}, (ProcessTimes(0.0, 0.0, 0.0, 0.0, minor_faults=100),
                                                 ProcessTimes(1.5, 1.5, 0.0, 0.0, minor_faults=600_100)),
                               seen_once=(7, 8)))
    assert summary.cpu_s == 3.0 and summary.threads_cpu_s == 0.2
    assert summary.cpu_s - summary.threads_cpu_s == 2.8  # the threads that came and went
    # the threads read ran a fifteenth of the process's CPU: their run-queue wait is taken per
    # the process's CPU, a floor (per their own it would be biased: they lived long by waiting)
    assert summary.runqueue_ratio == 0.1 / 3.0 and summary.runqueue_ratio_floor
    assert summary.minor_faults == 600_000
    # a thread seen once is no measured 0 s of CPU: the report states no figure for it
    assert not summary.threads[7].counted and summary.threads[7].rounded().cpu_s is None
    assert summary.threads[1].counted and summary.threads[1].rounded().cpu_s == 0.2
    both = combine([summary, summary])
    assert both.cpu_s == 6.0 and both.threads_cpu_s == 0.4 and both.minor_faults == 1_200_000


def test_the_threads_counters_stand_where_the_process_counter_is_smaller_or_absent():
    summary = summarize(record({1: (1.0, 0.2)}, (ProcessTimes(0.0, 0.0, 0.0, 0.0), ProcessTimes(1.0, 0.1, 0.0, 0.0))))
    assert summary.cpu_s == 1.2 and summary.threads_cpu_s == 1.2
    older = record({1: (1.0, 0.2)}, (ProcessTimes(0.0, 0.0, 0.0, 0.0), ProcessTimes(1.0, 0.1, 0.0, 0.0)))
    older.process_cpu = []
    assert summarize(older).cpu_s == 1.2 and summarize(older).minor_faults is None


def test_the_fault_count_is_read_from_the_stat_line_and_older_recordings_have_none():
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
    line = "42 (python3) S 1 42 42 0 -1 4194560 123456 0 7 0 250 150 30 20 20 0 9 0"
    times = parse_times(line)
    assert times.minor_faults == 123456 and times.system_s == 1.5
    assert ProcessTimes.from_list(times.as_list()) == times
    assert ProcessTimes.from_list([1.0, 2.0, 0.0, 0.0]).minor_faults is None  # four values: older
    rec = record({}, (times, times), reads=(5, 9), writes=(1, 2))
    back = ProcRecord.from_dict(rec.to_dict())
    assert back.read_syscalls == [5, 9] and summarize(back).io_syscalls == 5
    old = rec.to_dict()
    del old["read_syscalls"]
    assert summarize(ProcRecord.from_dict(old)).io_syscalls is None


def churning(system_s: float = 1.5, faults: int | None = None, io_calls: int | None = None) -> Analysis:
    """An acceptor (thread 1, counted: little system time) and request threads 2-5 that each
    lived between two of the sampler's reads (no counter), the process's counters holding
    their time."""
    found = analysis({1: [(ACCEPTING, 40)], **{tid: [(FILLING, 10)] for tid in (2, 3, 4, 5)}},
                     native_profile=False)
    assert found.os is not None
    acceptor = dataclasses.replace(found.os.threads[1], system_s=0.05)
    found.os = dataclasses.replace(found.os, threads={1: acceptor}, process_user_s=1.5, process_system_s=system_s,
                                   reaped_children_s=0.0, minor_faults=faults, io_syscalls=io_calls)
    return found


def test_system_time_of_threads_no_counter_held_lands_on_their_lines_not_on_the_thread_that_starts_them():
    found = kernel_work.run(churning(), KERNEL)
    assert isinstance(found, Finding) and found.score == 100
    assert [(s.function, s.line) for s in found.sites][0] == ("handle", 9)
    assert found.sites[0].share > 0.9 and "(an estimate)" in found.summary
    # no page-fault counts (an older recording): the calls' advice
    assert found.advice[0].startswith("Make fewer system calls at handle")


def test_many_page_faults_and_few_read_write_calls_are_told_to_reuse_the_buffers():
    found = kernel_work.run(churning(faults=600_000, io_calls=2_000), KERNEL)
    assert isinstance(found, Finding)
    assert found.advice[0].startswith("Stop mapping and unmapping memory on every call at handle")
    assert "buffer the writes" not in found.advice[0] and "page faults a second" in found.summary
    assert [f.knob for f in found.fixes] == ["reuse_memory"]
    assert found.evidence["minor_faults_per_s"] == 600_000 / WINDOW_S


def test_write_calls_outnumbering_the_faults_keep_the_advice_on_the_calls():
    found = kernel_work.run(churning(faults=60_000, io_calls=900_000), KERNEL)
    assert isinstance(found, Finding) and found.advice[0].startswith("Make fewer system calls")
    assert [f.knob for f in found.fixes] == ["batch_syscalls"]
    # a few faults a second are a service at rest, whatever its calls
    quiet = kernel_work.run(churning(faults=400, io_calls=0), KERNEL)
    assert isinstance(quiet, Finding) and quiet.advice[0].startswith("Make fewer system calls")


# -- the run-queue wait per CPU-second ---------------------------------------------------------------

def test_the_run_queue_ratio_is_the_counted_threads_own_where_they_ran_most_of_the_process():
    assert runqueue_ratio(2.0, counted_cpu_s=4.0, process_cpu_s=5.0) == 0.5


def test_where_the_counted_threads_ran_little_of_the_process_the_ratio_is_a_floor_over_its_cpu():
    # the threads read twice lived long because they waited: per their own 0.09 s it read 35.9
    assert runqueue_ratio(3.23, counted_cpu_s=0.09, process_cpu_s=1.67) == pytest.approx(1.934, abs=1e-3)
    assert runqueue_ratio(1.0, counted_cpu_s=0.0, process_cpu_s=0.0) is None


def test_recorded_thread_per_request_server_beside_a_browser_is_not_called_starved_by_a_biased_ratio(tmp_path):
    # CI's parallel pass attached fixtures/servers/thread_per_request.py while a browser test's
    # chromium (nice -8) ran beside it. The threads read twice ran 0.09 s of the process's
    # 1.67 s and waited 3.23 s: "35.9 s for a core per CPU-second", cores_taken 91, critical.
    report = replay("thread_per_request", "beside_a_browser_in_ci", tmp_path)
    assert report.verdict.primary == "kernel_work"
    taken = next(f for f in report.findings if f.id == "cores_taken")
    ratio = taken.evidence["runqueue_wait_per_cpu_second"]
    assert ratio == pytest.approx(taken.evidence["runqueue_wait_s"] / taken.evidence["cpu_s"], rel=1e-3)
    assert "waited at least 1.9 s for a core per CPU-second" in taken.summary
    assert taken.score < 40
