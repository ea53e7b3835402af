"""A native call is not a lock wait: a wait is a lock only where a lock is named (issue 42).

The kernel names the futex a blocked thread sleeps on, the frames name where it is. A Python
lock (a futex the frames' lock waits sleep on) is waited for at the line that takes it: /proc
ticks on it while py-spy saw the thread in numpy work beside `with lock:` (argsort's
`_wrapfunc`, a normalise) are the neighbouring wait's, and a pthread_mutex_lock under a numpy
call (the GIL's own mutex) is not that lock. A futex no Python code takes (a ctypes call's own
mutex) stays the lock of the native wait the frames show.

The recording is one attach of fixtures/workloads/lock_contention.py in which such ticks read
numpy's `_wrapfunc` as a Lock wait site at 5% of request-thread time (fixtures/recorded/
lock_contention_kernel/, its README says how it was taken); the rest are synthetic sample
tables and kernel views, in-process."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from diagnose.classify.categories import Categorizer
from diagnose.model.os_state import pooled_decisions, settle_with_kernel
from diagnose.collect.procfs import TreeRecord
from diagnose.model.analysis import Analysis
from diagnose.model.kernel_waits import RUNNING_OBJECT, Blocking, WaitObject
from diagnose.model.service import build_service
from diagnose.vocab import ResourceKind, ThreadState, WaitKind
from diagnose.readers.loaders import load_profile
from diagnose.report.model import Report
from tests.replay import replay
from tests.unit.test_kernel_settles_hidden_gil_waits import TICK_S, kernel, stack_changes, table

CASE, NAME = "lock_contention_kernel", "numpy_read_as_lock"

LOCKED, WORK, FORWARD, NUMPY, CALL, NEXT = 0, 1, 2, 3, 4, 5  # stack ids
Sample = tuple[int, ThreadState, WaitKind, str]  # stack, state, wait kind, state source
MODEL_LOCK = WaitObject(ResourceKind.LOCK, "futex:10:0x5600aa00", "lock at 0x5600aa00",
                        Blocking.HELD, "futex")
C_MUTEX = WaitObject(ResourceKind.LOCK, "futex:10:0x7f55aa00", "lock at 0x7f55aa00",
                     Blocking.HELD, "futex")
GIL = WaitObject(ResourceKind.GIL, "gil:10", "the GIL", Blocking.GIL, "futex")


# -- the recording ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def replayed(tmp_path_factory) -> tuple[Report, Analysis]:
    """The attach replayed as `diagnose analyze` reads it (its paths this machine's again), and
    the analysis of its one process built from the same files."""
    into = tmp_path_factory.mktemp("replay")
    report = replay(CASE, NAME, into)
    tree = TreeRecord.from_dict(json.loads((into / f"{NAME}.procfs.json").read_text()))
    service = build_service(load_profile(into / f"{NAME}.chrometrace.json"), Categorizer(), tree,
                            native_profile=load_profile(into / f"{NAME}.native.speedscope.json"))
    return report, service.processes[0].analysis


def test_numpy_calls_beside_a_contended_lock_are_no_lock_wait_sites(replayed):
    report, _ = replayed
    assert [w.function for w in report.waits if w.kind == WaitKind.LOCK] == ["Model.predict"]


def test_samples_in_numpy_calls_beside_the_lock_keep_the_frames_reading(replayed):
    _, analysis = replayed
    samples = analysis.samples
    at = np.array([analysis.profile.frames[s].function if s >= 0 else "" for s in samples["site"]])
    work = samples[np.isin(at, ["_wrapfunc", "normalize"])]
    assert len(work)
    assert not (work["state"] == ThreadState.LOCK).any()


def test_the_contended_lock_is_still_read_at_its_with_line(replayed):
    report, _ = replayed
    top = report.waits[0]
    assert (top.kind, top.function, top.line) == (WaitKind.LOCK, "Model.predict", 52)  # as recorded
    assert top.share > 0.5
    assert report.verdict.primary == "lock_contention"


# -- synthetic sample tables --------------------------------------------------------------------

def requests(work: list[Sample], work_seen: WaitObject, locked_source: str = "calibrated",
             forward: Sample = (FORWARD, ThreadState.NATIVE, WaitKind.NONE, "calibrated"),
             queued: int = 6) -> tuple[list[Sample], list[WaitObject]]:
    """A request thread's four requests in turn: `queued` samples at `with lock:` (the kernel on
    the model lock), then `work` (the kernel on `work_seen`), then the model's forward pass on a
    CPU; and what the kernel saw at each sample's tick."""
    locked: Sample = (LOCKED, ThreadState.LOCK, WaitKind.LOCK, locked_source)
    samples = ([locked] * queued + work + [forward] * (10 - queued - len(work))) * 4
    seen = {LOCKED: MODEL_LOCK, FORWARD: RUNNING_OBJECT, work[0][0]: work_seen}
    return samples, [seen[s[0]] for s in samples]


def settled(samples: list[Sample], seen: list[WaitObject]) -> pd.DataFrame:
    """One thread's samples settled by the kernel (no stack runs in an intra-op pool). It ends
    on a sample of another stack, seen running: its last stretch is known to end there."""
    samples = [*samples, (NEXT, ThreadState.PYTHON, WaitKind.NONE, "estimated")]
    threads = {11: samples}
    return settle_with_kernel(table(threads), kernel({11: [*seen, RUNNING_OBJECT]}), TICK_S, 0.0,
                              stack_changes(threads), pool_stacks=np.zeros(NEXT + 1, dtype=bool))


def states(out: pd.DataFrame, stack: int) -> Counter[tuple[str, str]]:
    rows = out[out["stack"] == stack]
    return Counter(zip(rows["state"].astype(str), rows["wait_kind"].astype(str)))


def test_ticks_on_a_python_lock_during_numpy_work_leave_the_work_as_the_frames_read_it():
    # The kernel saw the thread on the model lock at every tick of its argsort's samples (the
    # edge of the queue before and after): the lock is waited for at `with lock:`.
    numpy_work: Sample = (WORK, ThreadState.PYTHON, WaitKind.NONE, "estimated")
    out = settled(*requests([numpy_work] * 3, MODEL_LOCK))
    assert states(out, WORK) == Counter({("python", ""): 12})
    assert states(out, LOCKED) == Counter({("lock", "lock"): 24})


def test_a_thread_on_a_python_lock_nearly_all_window_waits_for_it_only_where_it_takes_it():
    # One of many request threads, asleep on the model lock at every tick: its two samples of
    # numpy work between two waits are that work, not the lock.
    numpy_work: Sample = (WORK, ThreadState.PYTHON, WaitKind.NONE, "estimated")
    samples = [(LOCKED, ThreadState.LOCK, WaitKind.LOCK, "calibrated")] * 38 + [numpy_work] * 2
    out = settled(samples, [MODEL_LOCK] * 40)
    assert states(out, WORK) == Counter({("python", ""): 2})
    assert states(out, LOCKED) == Counter({("lock", "lock"): 38})


def test_a_native_mutex_under_numpy_in_a_thread_queued_on_a_python_lock_is_no_lock_wait():
    # pthread_mutex_lock under numpy's argsort (the GIL's mutex, re-taken after the call) in a
    # thread asleep on the model lock 7 ticks in 10: that lock is taken at `with lock:` only.
    mutex: Sample = (NUMPY, ThreadState.NATIVE, WaitKind.NATIVE_MUTEX, "measured")
    out = settled(*requests([mutex] * 2, GIL, locked_source="measured", queued=7))
    assert states(out, NUMPY) == Counter({("native", "native_mutex"): 8})
    assert states(out, LOCKED) == Counter({("lock", "lock"): 28})


def test_a_mutex_no_python_code_takes_is_still_the_lock_of_the_native_wait():
    # A ctypes call's own mutex: the thread asleep on its futex 7 ticks in 10, and no Python
    # frame takes that futex anywhere.
    call: Sample = (CALL, ThreadState.NATIVE, WaitKind.NATIVE_MUTEX, "measured")
    forward: Sample = (FORWARD, ThreadState.NATIVE, WaitKind.NONE, "measured")
    samples = ([call] * 7 + [forward] * 3) * 4
    seen = [C_MUTEX if s[0] == CALL else RUNNING_OBJECT for s in samples]
    out = settled(samples, seen)
    assert states(out, CALL) == Counter({("lock", "lock"): 28})


def test_votes_pooled_over_workers_give_a_python_lock_to_the_line_that_takes_it_only():
    # Two workers of one program, each with its own model lock, each seen on it at the ticks
    # of its numpy work too: per line, only `with lock:` waits on a lock.
    numpy_work: Sample = (WORK, ThreadState.PYTHON, WaitKind.NONE, "estimated")
    samples, _ = requests([numpy_work] * 3, MODEL_LOCK)
    samples = [*samples, (NEXT, ThreadState.PYTHON, WaitKind.NONE, "estimated")]
    kernels, changes = {}, {}
    for pid in (20, 30):
        own_lock = WaitObject(ResourceKind.LOCK, f"futex:{pid}:0x5600aa00", "lock at 0x5600aa00",
                              Blocking.HELD, "futex")
        seen = [own_lock if s[0] in (LOCKED, WORK) else RUNNING_OBJECT for s in samples]
        kernels[pid] = kernel({pid: seen})
        changes[(pid, pid)] = stack_changes({pid: samples})[pid]
    lines = {LOCKED: 100, WORK: 101, FORWARD: 102, NEXT: 103}  # stack -> its innermost Python frame
    taking = np.array([s == LOCKED for s in range(NEXT + 1)])
    decided = pooled_decisions(kernels, changes, lines, TICK_S, taking)
    assert {line: obj.blocking for line, obj in decided.items()} == {100: Blocking.HELD}


def test_a_pool_librarys_own_futex_under_a_matmul_is_its_mutex_not_a_python_lock(tmp_path):
    """fixtures/recorded/blas_fanout_py313: eight threads fanning out into OpenBLAS's pool, no
    Python lock anywhere; the kernel saw them asleep on the pool's futex at the matmul lines.
    That wait is the pool's mutex (scheduler_overhead's evidence), never a Lock wait site."""
    from tests.replay import replay

    report = replay("blas_fanout_py313", "matmul_read_as_lock", tmp_path)
    assert report.verdict.primary == "scheduler_overhead", report.verdict
    assert [w for w in report.waits if w.kind == "lock"] == [], report.waits
    assert {w.kind for w in report.waits} == {"native_mutex"}
