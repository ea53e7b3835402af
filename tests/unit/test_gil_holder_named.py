"""The GIL's holder named by the interpreter's own state at each tick (collect/gil_state.py,
model/gil_holder.py): the kernel's reading of that very thread says whether it runs or what it
sleeps on, even while another thread of the process is on a CPU. Synthetic kernel views; the
live fixture is fixtures/workloads/sqlite_shared_connection.py
(tests/integration/test_gil_behind_a_native_lock.py)."""

from __future__ import annotations

import numpy as np

from diagnose.collect.kernel_waits import KernelRecord
from diagnose.model.gil_holder import gil_holding, gil_holding_stacks
from diagnose.model.kernel_waits import RUNNING_OBJECT, Blocking, KernelView, WaitObject
from diagnose.vocab import ResourceKind
from tests.conftest import REPO, marker_line
from tests.replay import replay

GIL = WaitObject(ResourceKind.GIL, "gil:1", "the GIL", Blocking.GIL, "futex")
MUTEX = WaitObject(ResourceKind.LOCK, "futex:1:0x10", "lock at 0x10", Blocking.HELD, "futex")
OBJECTS = (GIL, RUNNING_OBJECT, MUTEX)
TICKS = 20


def view(per_thread: dict[int, list[int]], holders: dict[float, int]) -> KernelView:
    times = np.arange(TICKS, dtype=np.float64) / 10
    return KernelView(1, OBJECTS, {t: times for t in per_thread},
                      {t: np.asarray(i, dtype=np.int32) for t, i in per_thread.items()}, {},
                      {t: TICKS for t in per_thread}, knows_gil=True, gil_holders=holders)


def at_every_tick(tid: int) -> dict[float, int]:
    return {float(t): tid for t in np.arange(TICKS, dtype=np.float64) / 10}


def test_a_named_holder_asleep_on_a_lock_while_another_thread_runs_is_blocked_behind_that_thread() -> None:
    # threads 1, 2 on the GIL; 3 holds it and sleeps on a mutex; 4 runs (holding the mutex)
    kernel = view({1: [0] * TICKS, 2: [0] * TICKS, 3: [2] * TICKS, 4: [1] * TICKS}, at_every_tick(3))
    held = gil_holding(kernel, [1, 2, 3, 4])
    assert held is not None and held.holder_read
    assert held.blocked_share == 1.0
    assert held.on_a_lock and held.holder_wait == "lock at 0x10"
    assert held.lock_runner == 4


def test_the_same_ticks_without_the_named_holder_read_a_thread_on_a_cpu_as_the_holder_running() -> None:
    kernel = view({1: [0] * TICKS, 2: [0] * TICKS, 3: [2] * TICKS, 4: [1] * TICKS}, {})
    held = gil_holding(kernel, [1, 2, 3, 4])
    assert held is not None and not held.holder_read
    assert held.blocked_share == 0.0 and held.lock_runner is None


def test_a_named_holder_on_a_cpu_is_contention_for_work() -> None:
    kernel = view({1: [0] * TICKS, 2: [0] * TICKS, 3: [1] * TICKS}, at_every_tick(3))
    held = gil_holding(kernel, [1, 2, 3])
    assert held is not None and held.holder_read
    assert held.blocked_share == 0.0 and held.holder_wait == ""


def test_too_few_ticks_with_a_named_holder_fall_back_to_inferring_it() -> None:
    holders = {t: 3 for t in list(at_every_tick(3))[:4]}  # 4 ticks named, fewer than 5
    kernel = view({1: [0] * TICKS, 2: [0] * TICKS, 3: [2] * TICKS, 4: [1] * TICKS}, holders)
    held = gil_holding(kernel, [1, 2, 3, 4])
    assert held is not None and not held.holder_read


def test_five_ticks_with_a_named_holder_are_read_directly_where_inferring_needs_ten() -> None:
    # the other ticks read the GIL between two holders (0: dropped, the next one not yet on a core)
    named = list(at_every_tick(3))[:5]
    holders = {t: (3 if t in named else 0) for t in at_every_tick(3)}
    kernel = view({1: [0] * TICKS, 2: [0] * TICKS, 3: [2] * TICKS, 4: [1] * TICKS}, holders)
    held = gil_holding(kernel, [1, 2, 3, 4])
    assert held is not None and held.holder_read and held.contended_ticks == 5
    assert held.blocked_share == 1.0 and held.on_a_lock and held.lock_runner == 4


def test_the_named_holders_survive_the_recordings_round_trip() -> None:
    record = KernelRecord(gil_holders=[(0.1, 7), (0.2, 0)])
    assert KernelRecord.from_dict(record.to_dict()).gil_holders == [(0.1, 7), (0.2, 0)]
    assert KernelRecord.from_dict({}).gil_holders == []  # a recording made before them


def test_threads_sharing_a_sqlite_connection_on_a_busy_machine_read_the_native_lock_not_the_thread_count(
        tmp_path) -> None:
    """A live attach beside a benchmark that filled both cores
    (fixtures/recorded/sqlite_shared_busy_machine): the GIL's waiters were mostly runnable inside
    its wait, queued for a core, so the kernel saw them asleep on its futex only 16% of the time
    and scheduler_overhead led ("cut the threads to 2"). The native frames saw them in the GIL's
    wait 57% of the time; the holder, named by the interpreter, was blocked on the connection's
    mutex at 90% of the ticks."""
    report = replay("sqlite_shared_busy_machine", "scheduler_overhead_led", tmp_path)
    assert report.verdict.primary == "gil_contention", report.verdict
    gil = next(f for f in report.findings if f.id == "gil_contention")
    assert "Give each thread its own" in gil.advice[0]
    assert "without the GIL" in gil.summary


def test_a_holder_blocked_at_under_half_of_the_instants_is_still_the_gil_held_asleep(tmp_path) -> None:
    """CI's live attach of the same workload beside the suite's other tests
    (fixtures/recorded/sqlite_shared_busy_machine/holder_blocked_at_7_of_16_beside_the_suite): the
    mutex's runner waited for a core, so the holder, named by the interpreter, was blocked on
    the connection's mutex at 7 of the 16 instants a thread slept on the GIL. Read against half
    of them, the finding said only "request threads spend 67% of their time waiting for the GIL"
    and advised vectorising; a computing holder reads 0 in every recording."""
    report = replay("sqlite_shared_busy_machine", "holder_blocked_at_7_of_16_beside_the_suite", tmp_path)
    assert report.verdict.primary == "gil_contention", report.verdict
    gil = next(f for f in report.findings if f.id == "gil_contention")
    assert "read from the interpreter" in gil.summary and "without the GIL" in gil.summary
    assert "Give each thread its own" in gil.advice[0]


def test_a_holder_named_at_few_instants_on_a_loaded_machine_is_still_read_blocked_on_the_mutex(tmp_path) -> None:
    """CI's live attach of the same workload beside the suite's other tests
    (fixtures/recorded/sqlite_shared_busy_machine/holder_named_at_9_instants_beside_the_suite):
    35 of the 45 reads of the GIL found it between two holders (the next one woken but waiting
    for a core), so the interpreter named a holder at 9 instants with a waiter; at 7 of them it
    was blocked on the connection's mutex. Needing 10 such instants, the finding fell back to
    inferring the holder, found a thread on a CPU at every instant and advised vectorising."""
    report = replay("sqlite_shared_busy_machine", "holder_named_at_9_instants_beside_the_suite", tmp_path)
    assert report.verdict.primary == "gil_contention", report.verdict
    gil = next(f for f in report.findings if f.id == "gil_contention")
    assert "read from the interpreter at 9 of those instants" in gil.summary, gil.summary
    assert "without the GIL" in gil.summary
    assert "Give each thread its own" in gil.advice[0]


# -- the stacks in C code that hold the GIL --------------------------------------------------------

def test_a_stack_whose_running_thread_the_interpreter_names_the_holder_holds_the_gil() -> None:
    # thread 1 waits on the GIL; 3 runs in stack 5 (json's C decoder) and is named the holder at
    # every tick; 4 runs in stack 9 (a BLAS call that released the GIL) beside it, never named
    kernel = view({1: [0] * TICKS, 3: [1] * TICKS, 4: [1] * TICKS}, at_every_tick(3))
    stacks = {1: np.full(TICKS, 2), 3: np.full(TICKS, 5), 4: np.full(TICKS, 9)}
    assert gil_holding_stacks(kernel, stacks) == frozenset({5})


def test_a_stack_named_the_holder_at_few_of_its_contended_ticks_does_not_hold_it() -> None:
    holders = {t: (3 if k < 2 else 4) for k, t in enumerate(at_every_tick(3))}  # 3 named twice only
    kernel = view({1: [0] * TICKS, 3: [1] * TICKS, 4: [1] * TICKS}, holders)
    stacks = {1: np.full(TICKS, 2), 3: np.full(TICKS, 5), 4: np.full(TICKS, 9)}
    assert gil_holding_stacks(kernel, stacks) == frozenset({9})
    assert gil_holding_stacks(view({1: [0] * TICKS, 3: [1] * TICKS}, {}), stacks) == frozenset()


def test_a_gil_held_by_a_librarys_c_code_names_it_and_the_services_line_that_calls_it(tmp_path) -> None:
    # fixtures/recorded/gil_c_holder: json's C decoder parsing a vocabulary per request under a
    # gunicorn gthread worker. Its samples read as native code; the holders were the threads
    # running Python, and the advice was to vectorise gunicorn's response write.
    report = replay("gil_c_holder", "vocab_parsed_per_request_gthread", tmp_path)
    assert report.verdict.primary == "gil_contention"
    found = next(f for f in report.findings if f.id == "gil_contention")
    assert found.sites and found.sites[0].function == "JSONDecoder.raw_decode"
    line = marker_line(REPO / "fixtures" / "servers" / "vocab_per_request.py", "vocab-per-request")
    first = report.verdict.first_advice[0]
    assert first.startswith("Call JSONDecoder.raw_decode (json/decoder.py:")
    assert f"less at load_vocab (servers/vocab_per_request.py:{line})" in first
    assert "Vectorize" not in first and "write" not in first
    assert found.levers[0].label == f"if the calls at load_vocab:{line} cost nothing"
    assert found.predicted_gain == found.levers[0].gain > 2.0
    assert [f.knob for f in found.fixes] == ["call_less"]
