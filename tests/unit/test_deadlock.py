"""Synthetic stacks over real source files: the locks a stack holds (from its `with` blocks and
`acquire()` calls), which lock it waits for, the cycle of threads blocked on each other's locks,
their victims, and the deadlock finding's place in the ranking."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from diagnose.checks import lock_contention
from diagnose.checks.arbiter import rank
from diagnose.checks.base import Finding
from diagnose.checks.engine import load_check_settings, order_of, run_checks
from diagnose.classify.categories import Categorizer
from diagnose.model import held_locks
from diagnose.samples import source
from diagnose.model.analysis import analysis_of, classify_profile
from diagnose.model.deadlock import BlockedThread, deadlocks_among
from diagnose.model.held_locks import LockSite, Taken, acquired_at, held_at
from diagnose.model.os_summary import ProcessOS, StateTick, ProcThread
from diagnose.samples.profile import Frame, Profile, ThreadTrack

LIB = "/usr/lib/python3.11"
LIBPYTHON = "/usr/lib/libpython3.11.so.1.0"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
WINDOW_S = 3.0

SERVICE = '''\
import threading

LOCK_A = threading.Lock()
LOCK_B = threading.Lock()


def worker(n):
    while True:
        if n % 2:
            transfer_ab()  # mark: call-ab
        else:
            transfer_ba()  # mark: call-ba


def transfer_ab():
    with LOCK_A:  # mark: ab-outer
        step()  # mark: ab-work
        with LOCK_B:  # mark: ab-inner
            step()


def transfer_ba():
    with LOCK_B:  # mark: ba-outer
        step()  # mark: ba-work
        with LOCK_A:  # mark: ba-inner
            step()


def step():
    return sum(range(10))  # mark: step


class Cache:
    def __init__(self):
        self.lock = threading.Lock()

    def get(self):
        with self.lock:  # mark: cache-get
            return 1


class Registry:
    def __init__(self):
        self.lock = threading.Lock()

    def get(self):
        with self.lock:  # mark: registry-get
            return 1


class Account:
    def __init__(self):
        self.balance_lock = threading.Lock()

    def later(self):
        def callback(event):
            with self.balance_lock:  # mark: closure
                return event
        return callback

    def pay(self, other):
        with self.balance_lock:
            with other.balance_lock:  # mark: other-attr
                return 1


def manual():
    LOCK_A.acquire()
    try:
        LOCK_B.acquire()  # mark: manual-wait
    finally:
        LOCK_A.release()


def released_then_wait():
    LOCK_A.acquire()
    LOCK_A.release()
    LOCK_B.acquire()  # mark: released-wait


def relock():
    with LOCK_A:  # mark: relock-outer
        return relock_helper()  # mark: relock-call


def relock_helper():
    with LOCK_A:  # mark: relock-inner
        return 1


def local_lock():
    LOCK_A = threading.Lock()
    with LOCK_A:  # mark: local-lock
        return 1
'''


@pytest.fixture()
def service(tmp_path: Path) -> Path:
    path = tmp_path / "service.py"
    path.write_text(SERVICE)
    source.clear()
    held_locks.clear()
    return path


def line(mark: str) -> int:
    return next(i for i, text in enumerate(SERVICE.splitlines(), 1) if f"# mark: {mark}" in text)


def py(function, file, line_no=1):
    return Frame(function, str(file), line_no, False)


def native(function, lib):
    return Frame(function, lib, 0, True)


LOCK_WAIT = [native("lock_PyThread_acquire_lock", LIBPYTHON),
             native("PyThread_acquire_lock_timed", LIBPYTHON), native("0x7f001", LIBC)]
THREAD_ROOT = [py("Thread._bootstrap", f"{LIB}/threading.py", 1002),
               py("Thread._bootstrap_inner", f"{LIB}/threading.py", 1045),
               py("Thread.run", f"{LIB}/threading.py", 982)]


def waiting_in(path, caller_mark, function, mark):
    """A thread of `worker` inside `function`, blocked acquiring the lock on line `mark`."""
    return THREAD_ROOT + [py("worker", path, line(caller_mark)), py(function, path, line(mark))] + LOCK_WAIT


def running_in(path, caller_mark, function, mark):
    return THREAD_ROOT + [py("worker", path, line(caller_mark)), py(function, path, line(mark)),
                          py("step", path, line("step"))]


def process_os(cpu_by_tid: dict) -> ProcessOS:
    threads = {tid: ProcThread(tid=tid, cpu_s=cpu, state_counts={"S": 30}) for tid, cpu in cpu_by_tid.items()}
    cpu = float(sum(cpu_by_tid.values()))
    return ProcessOS(window_s=WINDOW_S, cores=2, cpu_quota_cores=None, threads_max=len(threads),
                     cpu_s=cpu, cpu_utilization=cpu / (2 * WINDOW_S), runqueue_wait_s=None,
                     runqueue_ratio=None, mean_runnable=0.0, involuntary_ctx_per_s=None,
                     voluntary_ctx_per_s=None, observer_stop_share=0.0, rss_start=None,
                     rss_end=None, rss_slope_bytes_per_s=None, rss_fit_r2=None, threads=threads)


def _with_threads(profile: Profile, threads: dict, timed: bool) -> Profile:
    """`profile` with one track per thread of {tid: [(frames, samples)...]}, one sample per
    10 ms (`timed`: with those instants from the window's start)."""
    for tid, stacks in threads.items():
        ids = []
        for frames, count in stacks:
            sid = profile.intern_stack(tuple(profile.intern_frame(f) for f in frames))
            ids += [sid] * count
        times = np.arange(len(ids)) * 0.01 if timed else None
        profile.threads.append(ThreadTrack(tid, f"worker-{tid}", np.array(ids, dtype=np.int32),
                                           np.full(len(ids), 0.01), times=times))
    return profile


def analysis(threads: dict, cpu: dict | None = None, os_: ProcessOS | None = None):
    """threads: {tid: [(frames, samples)...]} -> the analysis of one process (its /proc record
    `os_`, or one made from `cpu`: {tid: CPU seconds})."""
    profile = _with_threads(Profile(native=True, interval_s=0.01), threads, timed=False)
    if os_ is None and cpu is not None:
        os_ = process_os(cpu)
    return analysis_of(profile, classify_profile(profile, Categorizer()), os_summary=os_)


def two_lock_deadlock(path, extra=None, cpu=None, os_=None):
    threads = {1: [(waiting_in(path, "call-ab", "transfer_ab", "ab-inner"), 300)],
               2: [(waiting_in(path, "call-ba", "transfer_ba", "ba-inner"), 300)]}
    threads.update(extra or {})
    return analysis(threads, cpu, os_)


# -- held and waited locks ----------------------------------------------------------------------

def test_a_with_block_around_the_line_is_a_held_lock_and_its_header_is_the_wait(service):
    held = held_at(str(service), line("ab-work"))
    assert [(s.name, s.line, s.taken) for s in held] == [("LOCK_A", line("ab-outer"), Taken.WITH)]
    assert [s.name for s in held_at(str(service), line("ab-inner"))] == ["LOCK_A"]
    waited = acquired_at(str(service), line("ab-inner"))
    assert (waited.name, waited.line, waited.function) == ("LOCK_B", line("ab-inner"), "transfer_ab")


def test_nested_with_blocks_are_held_innermost_first(service):
    inside = line("ab-inner") + 1
    assert [s.name for s in held_at(str(service), inside)] == ["LOCK_B", "LOCK_A"]


def test_an_acquire_not_yet_released_is_held_and_a_released_one_is_not(service):
    held = held_at(str(service), line("manual-wait"))
    assert [(s.name, s.taken) for s in held] == [("LOCK_A", Taken.ACQUIRE)]
    assert acquired_at(str(service), line("manual-wait")).name == "LOCK_B"
    assert held_at(str(service), line("released-wait")) == ()


def test_self_attributes_of_different_classes_are_different_locks(service):
    cache = acquired_at(str(service), line("cache-get"))
    registry = acquired_at(str(service), line("registry-get"))
    assert cache.name == registry.name == "self.lock"
    assert cache.identity != registry.identity


def test_a_module_global_is_one_lock_across_functions_and_a_local_of_that_name_is_not(service):
    ab = acquired_at(str(service), line("ba-inner"))
    ba = acquired_at(str(service), line("ab-outer"))
    assert ab.identity == ba.identity
    assert acquired_at(str(service), line("local-lock")).identity != ab.identity


def test_another_objects_attribute_resolves_to_the_one_class_that_assigns_it(service):
    other = acquired_at(str(service), line("other-attr"))
    own = held_at(str(service), line("other-attr"))[0]
    assert other.name == "other.balance_lock" and own.name == "self.balance_lock"
    assert other.identity == own.identity


def test_a_closure_in_a_method_takes_the_methods_own_attribute_lock(service):
    closure = acquired_at(str(service), line("closure"))
    assert closure.qualified == "Account.balance_lock"
    assert closure.function == "Account.later.callback"


def test_unreadable_source_holds_nothing_and_names_no_wait(tmp_path):
    assert held_at(str(tmp_path / "gone.py"), 3) == ()
    assert acquired_at("/dev/zero", 1) is None
    garbage = tmp_path / "garbage.py"
    garbage.write_text("with (" * 300 + "\n")
    assert held_at(str(garbage), 1) == () and acquired_at(str(garbage), 1) is None
    deep = tmp_path / "deep.py"
    deep.write_text("with L:\n    x = " + "(" * 180 + "1" + ")" * 180 + "\n")
    assert acquired_at(str(deep), 1) is not None


# -- the wait-for graph -------------------------------------------------------------------------

def test_two_threads_taking_two_locks_in_opposite_orders_are_one_deadlock(service):
    found = two_lock_deadlock(service).deadlocks
    assert len(found) == 1
    members = {m.thread.tid: m for m in found[0].cycle}
    assert set(members) == {1, 2}
    assert (members[1].holds.name, members[1].holds.line) == ("LOCK_A", line("ab-outer"))
    assert (members[1].waits_for.name, members[1].waits_for.line) == ("LOCK_B", line("ab-inner"))
    assert (members[2].holds.name, members[2].holds.line) == ("LOCK_B", line("ba-outer"))
    assert (members[2].waits_for.name, members[2].waits_for.line) == ("LOCK_A", line("ba-inner"))
    assert members[1].held_by == "worker-2" and members[2].held_by == "worker-1"
    assert found[0].victims == ()


def test_no_deadlock_when_one_of_the_threads_runs_during_the_window(service):
    runs = {2: [(waiting_in(service, "call-ba", "transfer_ba", "ba-inner"), 290),
                (running_in(service, "call-ba", "transfer_ba", "ba-work"), 10)]}
    assert two_lock_deadlock(service, extra=runs).deadlocks == ()


def test_cpu_time_proc_measured_overrules_samples_that_look_blocked(service):
    assert two_lock_deadlock(service, cpu={1: 0.0, 2: 0.0}).deadlocks
    assert two_lock_deadlock(service, cpu={1: 0.0, 2: 0.9}).deadlocks == ()


def test_state_r_observations_explained_by_waiting_for_a_core_do_not_make_a_thread_run(service):
    # Blocked threads an observer's stops woke, seen in state R while they waited for a core on
    # a loaded machine (15% of the observations, 12% of the window on the run queue): blocked.
    def woken(runqueue_s):
        os_ = process_os({1: 0.0, 2: 0.0})
        for tid in (1, 2):
            os_.threads[tid] = ProcThread(tid=tid, runqueue_wait_s=runqueue_s, voluntary_ctx=16,
                                          involuntary_ctx=0, state_counts={"S": 17, "R": 3},
                                          observer_stops=2)
        return os_
    assert two_lock_deadlock(service, os_=woken(0.12 * WINDOW_S)).deadlocks
    # the same R observations with no wait for a core to explain them: the threads ran
    assert two_lock_deadlock(service, os_=woken(0.0)).deadlocks == ()


def test_threads_queued_behind_a_deadlocked_lock_are_its_victims(service):
    queued = {tid: [(waiting_in(service, "call-ab", "transfer_ab", "ab-outer"), 300)] for tid in (3, 4, 5)}
    found = two_lock_deadlock(service, extra=queued).deadlocks
    assert len(found) == 1
    assert sorted(v.thread.tid for v in found[0].victims) == [3, 4, 5]
    assert {v.held_by for v in found[0].victims} == {"worker-1"}  # transfer_ab holds LOCK_A


def test_a_queued_thread_proc_saw_run_earlier_is_still_a_victim(service):
    # Every sample of thread 3 is a wait at the outer lock (a convoy before the hang, sampled
    # sparsely on a loaded machine), but /proc counted 0.3 s of CPU: it got the lock between
    # samples, so it is not blocked all window. It still ends queued behind the deadlock.
    queued = {3: [(waiting_in(service, "call-ab", "transfer_ab", "ab-outer"), 300)]}
    (found,) = two_lock_deadlock(service, extra=queued, cpu={1: 0.0, 2: 0.0, 3: 0.3}).deadlocks
    assert {m.thread.tid for m in found.cycle} == {1, 2}
    assert [v.thread.tid for v in found.victims] == [3]


def test_a_thread_that_ran_then_queued_behind_the_deadlock_is_a_victim_not_a_member(service):
    ran_then_queued = {3: [(running_in(service, "call-ab", "transfer_ab", "ab-work"), 60),
                           (waiting_in(service, "call-ab", "transfer_ab", "ab-outer"), 240)],
                       4: [(waiting_in(service, "call-ab", "transfer_ab", "ab-outer"), 240),
                           (running_in(service, "call-ab", "transfer_ab", "ab-work"), 60)]}
    (found,) = two_lock_deadlock(service, extra=ran_then_queued).deadlocks
    assert {m.thread.tid for m in found.cycle} == {1, 2}
    # 3 waits to the end; 4 got going again, so it was only contention
    assert [v.thread.tid for v in found.victims] == [3]


def test_the_deadlock_is_the_verdict_and_its_waits_are_not_lock_contention(service):
    queued = {tid: [(waiting_in(service, "call-ab", "transfer_ab", "ab-outer"), 300)] for tid in (3, 4)}
    results = run_checks(two_lock_deadlock(service, extra=queued))
    assert results.verdict.primary == "deadlock"
    assert results.verdict.severity == "critical"
    finding = results.findings[0]
    assert finding.id == "deadlock" and finding.predicted_gain is None and "hung" in finding.gain_basis
    assert finding.evidence["deadlocked_threads"] == 2 and finding.evidence["victim_threads"] == 2
    assert [f.id for f in results.findings].count("deadlock") == 1
    contention = next(f for f in results.findings if f.id == "lock_contention")
    assert contention.score == 0


def test_the_advice_names_the_lock_order_and_the_line_that_breaks_it(service):
    finding = run_checks(two_lock_deadlock(service)).findings[0]
    first = finding.advice[0]
    assert "always take `LOCK_A` before `LOCK_B`" in first
    # transfer_ba holds LOCK_B (the later lock) and waits for LOCK_A: that path breaks the order.
    assert f"took `LOCK_B` at {service.parent.name}/service.py:{line('ba-outer')} (transfer_ba)" in first


def test_a_thread_waiting_for_a_global_lock_it_holds_itself_is_a_deadlock_of_one(service):
    relock = THREAD_ROOT + [py("worker", service, line("call-ab")), py("relock", service, line("relock-call")),
                            py("relock_helper", service, line("relock-inner"))] + LOCK_WAIT
    queued = {2: [(waiting_in(service, "call-ab", "transfer_ab", "ab-outer"), 300)]}
    a = analysis({1: [(relock, 300)], **queued})
    (found,) = a.deadlocks
    (member,) = found.cycle
    assert (member.holds.line, member.waits_for.line) == (line("relock-outer"), line("relock-inner"))
    assert [v.thread.tid for v in found.victims] == [2]
    finding = run_checks(a).findings[0]
    assert finding.id == "deadlock" and "which it holds itself" in finding.summary
    assert finding.advice[0].startswith("`LOCK_A` is not reentrant")


def test_an_attribute_lock_held_and_waited_for_by_one_thread_is_not_called_a_deadlock():
    # `self.lock` held and `self.lock` waited for may be two instances of one class.
    def site(name, line_no):
        return LockSite("self.lock", "f::Node.lock", "f.py", line_no, "Node.visit", Taken.WITH)
    t = BlockedThread(0, 100, "t0", site("self.lock", 9), (site("self.lock", 5),), 50)
    assert deadlocks_among([t]) == ()


def _blocked(i, waits, holds):
    def site(name):
        return LockSite(name, f"f::{name}", "f.py", 1, "f", Taken.WITH)
    return BlockedThread(i, 100 + i, f"t{i}", site(waits), tuple(site(h) for h in holds), 50)


def test_a_cycle_of_three_threads_is_found_and_a_chain_without_a_cycle_is_not():
    cycle = [_blocked(0, "A", ["C"]), _blocked(1, "B", ["A"]), _blocked(2, "C", ["B"])]
    found = deadlocks_among(cycle)
    assert len(found) == 1 and len(found[0].cycle) == 3
    assert [s.name for s in found[0].lock_order] == ["A", "B", "C"]
    chain = [_blocked(0, "A", ["C"]), _blocked(1, "B", ["A"]), _blocked(2, "X", ["B"])]
    assert deadlocks_among(chain) == ()


def test_a_victim_of_a_victim_is_still_the_deadlocks_victim():
    threads = [_blocked(0, "A", ["B"]), _blocked(1, "B", ["A"]),
               _blocked(2, "A", ["C"]), _blocked(3, "C", [])]
    found = deadlocks_among(threads)
    assert sorted(v.thread.thread for v in found[0].victims) == [2, 3]


# -- ranking ------------------------------------------------------------------------------------

def _finding(check_id, score, gain):
    return Finding(check_id, check_id, score, "critical", "", {}, predicted_gain=gain)


def test_a_deadlock_ranks_first_over_any_critical_throughput_finding():
    findings = [_finding("lock_contention", 100, 19.0), _finding("unbounded_backlog", 100, 1.0),
                _finding("deadlock", 100, None)]
    assert [f.id for f in rank(findings, order_of)] == ["deadlock", "unbounded_backlog",
                                                        "lock_contention"]


def test_lock_contention_outside_the_deadlock_is_still_found(service):
    # Two threads convoy on the Cache lock (one holds it, computing), besides the deadlock.
    convoy = {7: [(THREAD_ROOT + [py("worker", service, line("call-ab")),
                                  py("Cache.get", service, line("cache-get"))] + LOCK_WAIT, 200),
                  (running_in(service, "call-ab", "transfer_ab", "ab-work"), 100)]}
    a = two_lock_deadlock(service, extra=convoy)
    settings = load_check_settings()["lock_contention"]
    finding = lock_contention.run(a, settings)
    assert finding.sites and finding.sites[0].line == line("cache-get")


# -- a deadlock that forms inside the window ----------------------------------------------------

TICK_S = 0.1  # the /proc sampler's tick in these timelines


def timed_analysis(threads: dict, window_s: float = 4.0, ticks: dict | None = None):
    """threads: {tid: [(frames, samples)...]} in sampling order, one sample per 10 ms from the
    window's start (measured instants); ticks: {tid: [(t, state)...]} of /proc."""
    profile = _with_threads(Profile(native=True, interval_s=0.01, instants="measured",
                                    window=(0.0, window_s)), threads, timed=True)
    os_ = None
    if ticks is not None:
        os_ = ProcessOS(window_s=window_s, cores=2, cpu_quota_cores=None, threads_max=len(ticks),
                        cpu_s=0.5, cpu_utilization=0.1, runqueue_wait_s=None, runqueue_ratio=None,
                        mean_runnable=0.0, involuntary_ctx_per_s=None, voluntary_ctx_per_s=None,
                        observer_stop_share=0.0, rss_start=None, rss_end=None,
                        rss_slope_bytes_per_s=None, rss_fit_r2=None,
                        threads={tid: ProcThread(tid=tid, cpu_s=0.25,
                                                 state_counts={s: [x for _, x in obs].count(s)
                                                               for _, s in obs},
                                                 ticks=tuple(StateTick(t, s) for t, s in obs))
                                 for tid, obs in ticks.items()})
    return analysis_of(profile, classify_profile(profile, Categorizer()), os_summary=os_)


def ran_then_blocked(path, side, ran_s, window_s=4.0):
    """A thread of transfer_ab (side "ab") or transfer_ba ("ba") working for `ran_s`, then
    blocked on its inner lock, holding its outer one, to the window's end."""
    ran = round(ran_s * 100)
    return [(running_in(path, f"call-{side}", f"transfer_{side}", f"{side}-work"), ran),
            (waiting_in(path, f"call-{side}", f"transfer_{side}", f"{side}-inner"),
             round(window_s * 100) - ran)]


def proc_timeline(running_until_s, window_s=4.0):
    """/proc ticks of a thread in state R until `running_until_s`, asleep (S) after."""
    n = round(window_s / TICK_S)
    return [(i * TICK_S, "R" if i * TICK_S < running_until_s else "S") for i in range(n)]


def test_a_cycle_that_closes_mid_window_is_a_deadlock_formed_when_its_last_member_blocked(service):
    a = timed_analysis({1: ran_then_blocked(service, "ab", 1.0), 2: ran_then_blocked(service, "ba", 1.5)})
    (found,) = a.deadlocks
    assert {m.thread.tid for m in found.cycle} == {1, 2}
    assert found.formed_s == pytest.approx(1.5)
    finding = run_checks(a).findings[0]
    assert finding.id == "deadlock"
    assert "deadlocked since about 1.5 s into the window" in finding.summary
    assert finding.evidence["formed_at_s"] == pytest.approx(1.5)


def test_a_deadlock_blocked_all_window_says_nothing_of_when_it_formed(service):
    a = timed_analysis({1: ran_then_blocked(service, "ab", 0.0), 2: ran_then_blocked(service, "ba", 0.0)})
    (found,) = a.deadlocks
    assert found.formed_s is None
    finding = run_checks(a).findings[0]
    assert finding.id == "deadlock" and "deadlocked since" not in finding.summary
    assert "formed_at_s" not in finding.evidence


def test_a_thread_re_acquiring_a_contended_lock_in_a_loop_is_not_in_a_cycle(service):
    # Waits of 0.3 s at one site with running samples between, to the end: each one is short.
    looping = []
    for _ in range(10):
        looping += [(running_in(service, "call-ba", "transfer_ba", "ba-work"), 10),
                    (waiting_in(service, "call-ba", "transfer_ba", "ba-inner"), 30)]
    a = timed_analysis({1: ran_then_blocked(service, "ab", 1.0), 2: looping})
    assert a.deadlocks == ()
    assert run_checks(a).findings[0].id != "deadlock"


def test_a_trailing_run_shorter_than_the_minimum_span_is_not_in_a_cycle(service):
    # 0.8 s of a 4 s window: under a second
    assert timed_analysis({1: ran_then_blocked(service, "ab", 1.0),
                           2: ran_then_blocked(service, "ba", 3.2)}).deadlocks == ()
    # 1.5 s of a 8 s window: over a second, under a quarter of the window
    assert timed_analysis({1: ran_then_blocked(service, "ab", 1.0, 8.0),
                           2: ran_then_blocked(service, "ba", 6.5, 8.0)}, window_s=8.0).deadlocks == ()
    # 2.5 s of it: both
    (found,) = timed_analysis({1: ran_then_blocked(service, "ab", 1.0, 8.0),
                               2: ran_then_blocked(service, "ba", 5.5, 8.0)}, window_s=8.0).deadlocks
    assert found.formed_s == pytest.approx(5.5)


def test_proc_seeing_a_thread_run_after_its_waits_began_keeps_it_out_of_a_cycle(service):
    threads = {1: ran_then_blocked(service, "ab", 1.0), 2: ran_then_blocked(service, "ba", 1.5)}
    asleep_since_run = {1: proc_timeline(1.0), 2: proc_timeline(1.5)}
    assert timed_analysis(threads, ticks=asleep_since_run).deadlocks
    running_on = {1: proc_timeline(1.0), 2: proc_timeline(2.5)}  # R for a second into its "wait"
    assert timed_analysis(threads, ticks=running_on).deadlocks == ()


def test_threads_with_only_waits_sampled_that_proc_counted_cpu_for_are_not_a_cycle(service):
    # Waits in every sample from the window's start, asleep at every /proc tick, but 0.25 s of
    # CPU each (timed_analysis): they ran between the samples. No cycle, however dated.
    threads = {1: ran_then_blocked(service, "ab", 0.0), 2: ran_then_blocked(service, "ba", 0.0)}
    asleep = {tid: [(k * TICK_S, "S") for k in range(40)] for tid in (1, 2)}
    assert timed_analysis(threads).deadlocks  # the samples alone: blocked all window
    assert timed_analysis(threads, ticks=asleep).deadlocks == ()


def test_without_measured_instants_only_threads_blocked_all_window_form_a_cycle(service):
    threads = {1: ran_then_blocked(service, "ab", 1.0), 2: ran_then_blocked(service, "ba", 1.5)}
    assert analysis(threads).deadlocks == ()  # laid end to end: the run cannot be dated


def test_a_run_whose_stacks_hold_different_locks_is_not_one_wait(service):
    # The same wait line, reached once with Cache.lock held and once without: the thread got
    # the lock between them, so its run is not one blocked acquire.
    via_cache = THREAD_ROOT + [py("worker", service, line("call-ab")),
                               py("Cache.get", service, line("cache-get") + 1),
                               py("transfer_ab", service, line("ab-inner"))] + LOCK_WAIT
    moved = [(running_in(service, "call-ab", "transfer_ab", "ab-work"), 100),
             (via_cache, 150), (waiting_in(service, "call-ab", "transfer_ab", "ab-inner"), 150)]
    a = timed_analysis({1: moved, 2: ran_then_blocked(service, "ba", 1.5)})
    assert a.deadlocks == ()


def test_a_member_that_queued_on_its_first_lock_then_blocked_on_the_second_is_in_the_cycle(service):
    # At a low rate no running sample may fall between the two waits: the run that counts is
    # the last one, at one site (the first wait ended when the thread got its lock).
    queued_then_blocked = [(waiting_in(service, "call-ba", "transfer_ba", "ba-outer"), 150),
                           (waiting_in(service, "call-ba", "transfer_ba", "ba-inner"), 250)]
    (found,) = timed_analysis({1: ran_then_blocked(service, "ab", 1.0), 2: queued_then_blocked}).deadlocks
    assert {m.thread.tid for m in found.cycle} == {1, 2}
    assert found.formed_s == pytest.approx(1.5)


def test_a_forming_cycle_through_one_lock_name_is_not_a_deadlock_but_one_blocked_all_window_is(service):
    # Account.pay holds `self.balance_lock` and waits for `other.balance_lock`: one identity for
    # every account, so two threads paying between four accounts look like a cycle too.
    paying = THREAD_ROOT + [py("worker", service, line("call-ab")),
                            py("Account.pay", service, line("other-attr"))] + LOCK_WAIT

    def payer(ran_s):
        ran = round(ran_s * 100)
        return [(running_in(service, "call-ab", "transfer_ab", "ab-work"), ran), (paying, 400 - ran)]

    assert timed_analysis({1: payer(1.0), 2: payer(1.5)}).deadlocks == ()
    (found,) = timed_analysis({1: payer(0.0), 2: payer(0.0)}).deadlocks
    assert {m.thread.tid for m in found.cycle} == {1, 2} and found.formed_s is None


def test_a_short_window_deadlock_that_proc_watched_is_certain_and_critical(service):
    """49 samples per thread (a 3 s window at the gentle rate) are under the sample count a share
    needs; /proc watching both threads not run through the window makes the hang certain."""
    few = {1: [(waiting_in(service, "call-ab", "transfer_ab", "ab-inner"), 49)],
           2: [(waiting_in(service, "call-ba", "transfer_ba", "ba-inner"), 49)]}
    unwatched = run_checks(analysis(few)).verdict
    assert unwatched.primary == "deadlock" and unwatched.confidence == "low"
    assert unwatched.severity == "warning"  # samples alone: said with low confidence
    watched = run_checks(analysis(few, cpu={1: 0.0, 2: 0.0})).verdict
    assert (watched.primary, watched.confidence, watched.severity) == ("deadlock", "ok", "critical")


# -- the kernel as the witness of a hang ----------------------------------------------------------

def knot_witnessed(tids_on_futex: dict[int, int], window_s: float = 4.0):
    """The /proc and kernel record of a process whose threads {tid: futex address} slept on
    their lock at every tick of the window while the process used no CPU (a knot)."""
    from diagnose.model.kernel_waits import kernel_view
    from diagnose.model.os_summary import summarize
    from tests.unit.test_kernel_waits import SEM_WAIT_PRIVATE, FUTEX, record_with, tree_of

    ticks = np.arange(0.05, window_s, TICK_S)
    rec = record_with(10, [(round(float(t), 3), tid, FUTEX, address, SEM_WAIT_PRIVATE, 0, "")
                           for t in ticks for tid, address in tids_on_futex.items()])
    rec.ended_at = window_s
    return kernel_view(rec, tree_of(rec)), summarize(rec)


def cut_short(stacks: list, seconds: float) -> list:
    """A thread's samples in sampling order, the last `seconds` of them missing (py-spy's last
    samples of the window lost: a recorder starved of CPU on a loaded machine)."""
    drop = round(seconds * 100)
    kept, out = 0, []
    total = sum(n for _, n in stacks) - drop
    for frames, n in stacks:
        take = min(n, total - kept)
        if take > 0:
            out.append((frames, take))
            kept += take
    return out


def test_a_cycle_the_kernel_saw_asleep_on_its_locks_is_told_from_its_victims_when_its_samples_end_early(service):
    """deadlock_two_locks forming inside the window, on a loaded CI machine: the report said
    7 threads were in the deadlock where its cycle has 2. The samples could not date the
    members' block (here: the window's last 0.5 s of samples lost), so no cycle was found from
    the source, and the kernel's knot counted every thread asleep on the two locks as a member.
    The kernel witnesses the block; the source still names holders and waiters."""
    members = {1: cut_short(ran_then_blocked(service, "ab", 1.0), 0.5),
               2: cut_short(ran_then_blocked(service, "ba", 1.5), 0.5)}
    victims = {tid: cut_short([(waiting_in(service, "call-ab", "transfer_ab", "ab-outer"), 400)], 0.5)
               for tid in (3, 4, 5, 6, 7)}
    threads = {**members, **victims}
    profile = _with_threads(Profile(native=True, interval_s=0.01, instants="measured",
                                    window=(0.0, 4.0)), threads, timed=True)
    lock_a, lock_b = 0x55AA00, 0x55BB00
    kernel, os_ = knot_witnessed({1: lock_b, 2: lock_a, 3: lock_a, 4: lock_a, 5: lock_a, 6: lock_a,
                                  7: lock_a})
    a = analysis_of(profile, classify_profile(profile, Categorizer()), os_summary=os_, kernel=kernel)
    (found,) = a.deadlocks
    assert {m.thread.tid for m in found.cycle} == {1, 2}
    assert sorted(v.thread.tid for v in found.victims) == [3, 4, 5, 6, 7]
    finding = run_checks(a).findings[0]
    assert finding.id == "deadlock"
    assert (finding.evidence["deadlocked_threads"], finding.evidence["victim_threads"]) == (2, 5)
    assert "2 threads each hold a lock another of them waits for" in finding.summary


def test_a_knot_the_source_cannot_name_counts_its_threads_as_blocked_not_as_the_cycle():
    """Without readable source (a container's code) the kernel names the futexes the threads
    sleep on, not which thread holds which: the finding counts them blocked, never as members."""
    unreadable = "/nonexistent/service.py"
    frames = THREAD_ROOT + [py("worker", unreadable, 10), py("transfer", unreadable, 20)] + LOCK_WAIT
    threads = {tid: [(frames, 400)] for tid in (1, 2, 3, 4)}
    profile = _with_threads(Profile(native=True, interval_s=0.01, instants="measured",
                                    window=(0.0, 4.0)), threads, timed=True)
    kernel, os_ = knot_witnessed({1: 0x55AA00, 2: 0x55BB00, 3: 0x55AA00, 4: 0x55AA00})
    a = analysis_of(profile, classify_profile(profile, Categorizer()), os_summary=os_, kernel=kernel)
    assert a.deadlocks == ()
    finding = run_checks(a).findings[0]
    assert finding.id == "deadlock" and finding.evidence["blocked_threads"] == 4
    assert "deadlocked_threads" not in finding.evidence


def test_a_member_on_the_run_queue_after_an_observers_stop_still_closes_a_forming_cycle(service):
    # /proc saw member 2 in state R at 3 of its ticks after its wait began (15%): woken by a
    # native sample's stop, it waited for a core on a loaded machine, 12% of the window on the
    # run queue by schedstat. That is not running: the cycle still closes.
    threads = {1: ran_then_blocked(service, "ab", 1.0), 2: ran_then_blocked(service, "ba", 1.5)}
    woken = {1: proc_timeline(1.0), 2: [(t, "R" if t < 1.5 or t in (2.0, 2.5, 3.0) else s)
                                        for t, s in proc_timeline(1.5)]}
    a = timed_analysis(threads, ticks=woken)
    assert a.deadlocks == ()  # no run-queue wait to explain the R ticks: it ran
    a.os.threads[2] = dataclasses.replace(a.os.threads[2], runqueue_wait_s=0.12 * 4.0)
    del a.__dict__["deadlocks"]
    (found,) = a.deadlocks
    assert {m.thread.tid for m in found.cycle} == {1, 2}
