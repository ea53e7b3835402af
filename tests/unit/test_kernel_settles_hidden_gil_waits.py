"""Samples the frames read as a wait outside the process, settled by what the kernel saw the
thread wait on (model/os_state.settle_with_kernel): a C extension that released the GIL for
its work (PIL's JPEG decode) and queues to take it back reads, in py-spy's native stacks, as the
library's own wait ("io"); where the kernel saw the thread asleep on the GIL's futex it was a GIL
wait. Only to that: a parked queue.get, a lock's futex or a socket leave the frames' reading.
Synthetic sample tables and kernel views, in-process."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from diagnose.model.os_state import settle_with_kernel
from diagnose.model.kernel_waits import RUNNING_OBJECT, Blocking, KernelView, ThreadWaits, WaitObject
from diagnose.model.table import validate
from diagnose.vocab import ResourceKind, ThreadState, WaitKind

TICK_S = 0.1  # py-spy's sampling interval and the /proc sampler's
GIL = WaitObject(ResourceKind.GIL, "gil:10", "the GIL", Blocking.GIL, "futex")
QUEUE_FUTEX = WaitObject(ResourceKind.LOCK, "futex:10:0x7f00aa00", "lock at 0x7f00aa00",
                         Blocking.HELD, "futex")
STRAY_FUTEX = WaitObject(ResourceKind.LOCK, "futex:10:0x7f00bb00", "lock at 0x7f00bb00",
                         Blocking.HELD, "futex")
SOCKET = WaitObject(ResourceKind.SOCKET, "socket:127.0.0.1:6379", "socket to 127.0.0.1:6379",
                    Blocking.OUTSIDE, "read")

DECODE, MODEL, PARKED, RECV, NEXT = 0, 1, 2, 3, 4  # stack ids
Sample = tuple[int, ThreadState, WaitKind, str]  # stack, state, wait kind, state source


def table(threads: dict[int, list[Sample]]) -> pd.DataFrame:
    """{tid: its samples in turn, one per TICK_S from 0}: a sample table as
    model/table.build_sample_table lays it out (a calibrated stack's samples each a row)."""
    rows = []
    for index, (tid, samples) in enumerate(threads.items()):
        for i, (stack, state, kind, source) in enumerate(samples):
            rows.append({"thread": index, "tid": tid, "t": round(i * TICK_S, 3), "stack": stack,
                         "count": 1, "state": state.value, "wait_kind": kind.value, "site": -1,
                         "phase": "other", "leaf_category": "other",
                         "estimated": source == "estimated", "state_source": source,
                         "calibration_support": 20 if source == "calibrated" else 0})
    return validate(pd.DataFrame(rows))


def kernel(threads: dict[int, list[WaitObject]]) -> KernelView:
    """{tid: what the /proc sampler saw it on at each tick, one per TICK_S from TICK_S / 2}."""
    objects: dict[WaitObject, int] = {}
    times, indices, waits = {}, {}, {}
    for tid, seen in threads.items():
        idx = [objects.setdefault(obj, len(objects)) for obj in seen]
        times[tid] = np.round(np.arange(len(seen)) * TICK_S + TICK_S / 2, 3)
        indices[tid] = np.array(idx, dtype=np.int32)
    ordered = tuple(objects)
    for tid, idx in indices.items():
        counts = Counter(idx.tolist()).most_common()
        waits[tid] = ThreadWaits(tid, len(idx), tuple((ordered[i], n) for i, n in counts))
    return KernelView(10, ordered, times, indices, waits,
                      {tid: len(seen) for tid, seen in threads.items()}, knows_gil=True)


def stack_changes(threads: dict[int, list[Sample]]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per thread, the instants its stack changed and the stack then (a timestamped recording)."""
    out = {}
    for tid, samples in threads.items():
        stacks = np.array([s[0] for s in samples])
        starts = np.flatnonzero(np.r_[True, stacks[1:] != stacks[:-1]])
        out[tid] = (np.round(starts * TICK_S, 3), stacks[starts])
    return out


def settled(threads: dict[int, list[Sample]], seen: dict[int, list[WaitObject]]) -> pd.DataFrame:
    """The samples settled by the kernel's view. Each thread ends on a sample of another stack,
    seen running: a stretch of one stack is known to end where py-spy saw the next one."""
    threads = {tid: [*samples, (NEXT, ThreadState.PYTHON, WaitKind.NONE, "estimated")]
               for tid, samples in threads.items()}
    seen = {tid: [*ticks, RUNNING_OBJECT] for tid, ticks in seen.items()}
    return settle_with_kernel(table(threads), kernel(seen), TICK_S, 0.0, stack_changes(threads))


def states(out: pd.DataFrame, tid: int, stack: int) -> Counter[tuple[str, str]]:
    rows = out[(out["tid"] == tid) & (out["stack"] == stack)]
    return Counter(zip(rows["state"].astype(str), rows["wait_kind"].astype(str)))


def decode_samples(source: str, n: int = 30) -> list[Sample]:
    """A request thread in PIL's decode whose frames read 7 samples in 10 as a library's own
    wait (io: the GIL's condition variable right under the extension's frame) and the rest as
    native code running."""
    return [(DECODE, ThreadState.IO, WaitKind.IO, source) if i % 10 < 7 else
            (DECODE, ThreadState.NATIVE, WaitKind.NONE, source) for i in range(n)]


def decoding_on_the_gil(n: int = 30) -> list[WaitObject]:
    """The kernel's view of that thread: asleep on the GIL's futex 5 ticks in 10, on a CPU 3,
    and twice on the futex it parks on for work (two requests in a row, the sample between them
    missed): fewer than 3 in 4 of its asleep ticks name the GIL, and none a wait outside."""
    return [GIL if i % 10 < 5 else RUNNING_OBJECT if i % 10 < 8 else QUEUE_FUTEX for i in range(n)]


def model_samples(n: int) -> list[Sample]:
    return [(MODEL, ThreadState.PYTHON, WaitKind.NONE, "estimated")] * n


def io_samples(stack: int, source: str, n: int = 20) -> list[Sample]:
    return [(stack, ThreadState.IO, WaitKind.IO, source)] * n


@pytest.mark.parametrize("source", ["estimated", "calibrated"])
def test_io_samples_at_a_native_decode_in_a_thread_on_the_gils_futex_become_gil_waits(source):
    threads = {11: model_samples(10) + decode_samples(source)}
    out = settled(threads, {11: [RUNNING_OBJECT] * 10 + decoding_on_the_gil()})
    assert states(out, 11, DECODE) == Counter({("gil", "gil"): 21, ("native", ""): 9})
    assert states(out, 11, MODEL) == Counter({("python", ""): 10})  # the kernel saw it run


def test_io_samples_of_a_thread_on_the_gils_futex_all_window_become_gil_waits():
    out = settled({11: io_samples(DECODE, "calibrated")}, {11: [GIL] * 20})
    assert states(out, 11, DECODE) == Counter({("gil", "gil"): 20})


def test_idle_samples_in_queue_get_of_a_thread_on_a_locks_futex_stay_idle():
    parked = [(PARKED, ThreadState.IDLE, WaitKind.QUEUE, "calibrated")] * 20
    # parked all window; and by the stack's votes, on its futex with some GIL ticks
    out = settled({12: parked, 13: parked}, {12: [QUEUE_FUTEX] * 20, 13: [QUEUE_FUTEX, GIL] * 10})
    assert states(out, 12, PARKED) == Counter({("idle", "queue"): 20})
    assert states(out, 13, PARKED) == Counter({("idle", "queue"): 20})


def test_a_wait_outside_in_a_thread_on_a_locks_futex_is_never_made_a_lock_wait():
    out = settled({12: io_samples(RECV, "calibrated"), 13: io_samples(PARKED, "estimated")},
                  {12: [QUEUE_FUTEX] * 20, 13: [QUEUE_FUTEX] * 16 + [GIL] * 4})
    assert states(out, 12, RECV) == Counter({("io", "io"): 20})
    assert states(out, 13, PARKED) == Counter({("io", "io"): 20})


def test_io_samples_of_a_thread_on_a_socket_stay_io():
    # each thread at a stack of its own (a stack's votes are pooled over its threads)
    threads = {13: io_samples(13, "estimated"), 14: io_samples(14, "calibrated"),
               15: io_samples(15, "calibrated"), 16: io_samples(16, "estimated")}
    # all window on the socket; by the stack's votes, mostly on it with a few GIL ticks; on the
    # GIL most, but on the socket too often for the wait to be the GIL's
    out = settled(threads, {13: [SOCKET] * 20, 14: [SOCKET] * 14 + [GIL] * 3 + [RUNNING_OBJECT] * 3,
                            15: [GIL] * 8 + [SOCKET] * 6 + [RUNNING_OBJECT] * 6,
                            16: [GIL, SOCKET, RUNNING_OBJECT, GIL] * 5})
    for tid in threads:
        assert states(out, tid, tid) == Counter({("io", "io"): 20})


def test_a_calibrated_stacks_running_share_is_not_overridden_by_the_kernels_gil():
    # The native samples that calibrated the stack counted its GIL waits: its samples read as
    # running stay so, in a thread on the GIL's futex by the stack's votes or all window.
    running = [(MODEL, ThreadState.PYTHON, WaitKind.NONE, "calibrated")] * 20
    out = settled({11: decode_samples("calibrated"), 12: running}, {11: decoding_on_the_gil(), 12: [GIL] * 20})
    assert states(out, 11, DECODE)[("native", "")] == 9
    assert states(out, 12, MODEL) == Counter({("python", ""): 20})


def test_a_wait_measured_by_its_own_native_sample_is_not_settled():
    out = settled({11: io_samples(DECODE, "measured")}, {11: [GIL] * 20})
    assert states(out, 11, DECODE) == Counter({("io", "io"): 20})
