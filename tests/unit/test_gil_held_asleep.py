"""The GIL's holder read from the kernel's ticks (model/gil_holder.py): at instants a thread
sleeps on the GIL's futex, a holder on a CPU is contention for work; no thread on a CPU is a
holder asleep inside a call that keeps the GIL. Synthetic kernel views; the live fixture is
fixtures/workloads/gil_held_asleep.py (tests/integration/test_gil_held_asleep.py)."""

from __future__ import annotations

import numpy as np

from diagnose.model.gil_holder import gil_holding
from diagnose.model.kernel_waits import RUNNING_OBJECT, Blocking, KernelView, WaitObject
from diagnose.vocab import ResourceKind

GIL = WaitObject(ResourceKind.GIL, "gil:1", "the GIL", Blocking.GIL, "futex")
SLEEP = WaitObject(ResourceKind.SLEEP, "sleep", "a timer or signal", Blocking.OUTSIDE, "clock_nanosleep")
MUTEX = WaitObject(ResourceKind.LOCK, "futex:1:0x10", "lock at 0x10", Blocking.HELD, "futex")
OBJECTS = (GIL, RUNNING_OBJECT, SLEEP, MUTEX)


def view(holder: list[int], ticks: int = 20) -> KernelView:
    """Threads 1 and 2 asleep on the GIL at every tick; thread 3's object index per tick."""
    times = np.arange(ticks, dtype=np.float64) / 10
    per_thread = {1: [0] * ticks, 2: [0] * ticks, 3: holder}
    return KernelView(1, OBJECTS, {t: times for t in per_thread},
                      {t: np.asarray(i, dtype=np.int32) for t, i in per_thread.items()}, {},
                      {t: ticks for t in per_thread}, knows_gil=True)


def test_a_holder_asleep_in_a_call_while_threads_wait_for_the_gil_is_seen_blocked_in_it() -> None:
    held = gil_holding(view([2] * 18 + [1] * 2), [1, 2, 3])
    assert held is not None
    assert held.contended_ticks == 20
    assert held.blocked_share == 0.9
    assert held.holder_wait == "a timer or signal" and held.holder_wait_share == 1.0


def test_a_holder_on_a_cpu_while_threads_wait_for_the_gil_is_contention_for_work() -> None:
    held = gil_holding(view([1] * 20), [1, 2, 3])
    assert held is not None and held.blocked_share == 0.0 and held.holder_wait == ""


def test_too_few_instants_with_a_gil_waiter_say_nothing_about_its_holder() -> None:
    assert gil_holding(view([2] * 5, ticks=5), [1, 2, 3]) is None


def test_a_process_that_ran_next_to_no_cpu_while_threads_waited_for_the_gil_had_its_holder_blocked() -> None:
    held = gil_holding(view([1] * 20), [1, 2, 3])  # the kernel caught it on a CPU at every instant
    assert held is not None
    # ...but the process ran 0.05 cores while a thread waited for the GIL at every instant
    assert held.blocked_by_cpu(0.05) == 0.95
    assert held.blocked_by_cpu(1.2) == 0.0


def test_a_holder_blocked_on_a_native_lock_makes_the_gils_queue_that_locks() -> None:
    held = gil_holding(view([3] * 18 + [1] * 2), [1, 2, 3])
    assert held is not None and held.on_a_lock and held.holder_wait == "lock at 0x10"
    assert not gil_holding(view([2] * 18 + [1] * 2), [1, 2, 3]).on_a_lock  # type: ignore[union-attr]


def test_threads_queued_behind_a_sleeping_gil_holder_on_a_busy_machine_are_not_called_busy(tmp_path) -> None:
    """A CI run's attach beside other tests (fixtures/recorded/gil_held_asleep_busy_machine): the
    GIL waiters' run-queue time read as 0.25 cores "wanted", and cpu_bound scored 25 beside the
    right verdict. Waiting behind a holder that sleeps is not busy."""
    from tests.replay import replay

    report = replay("gil_held_asleep_busy_machine", "front_end_8_threads", tmp_path)
    assert report.verdict.primary == "gil_contention"
    busy = report.finding("cpu_bound")
    assert busy is None or busy.score < 25


def test_a_computing_holder_kept_off_a_core_by_other_tenants_is_not_asleep(tmp_path) -> None:
    """A CI run's attach of the gil_contention fixture beside other tests
    (fixtures/recorded/gil_contention_busy_machine): the process got few cores while its holder
    ran postprocess, so its CPU alone read the holder as blocked 50%+ of the contended time, and
    the verdict advised releasing the GIL around a call that computes. Its run-queue time says it
    wanted a core all along: the holder computes, and the advice is the Python hot spot's."""
    from tests.replay import replay

    report = replay("gil_contention_busy_machine", "postprocess_8_threads", tmp_path)
    assert report.verdict.primary == "gil_contention"
    gil = report.finding("gil_contention")
    assert gil is not None and gil.sites[0].function == "postprocess"
    assert gil.value("gil_wait_share_per_thread"), [v.key for v in gil.evidence]
    assert "release it around that call" not in gil.advice[0], gil.advice[0]
