"""Who held the GIL while threads queued for it, and what the holder did, from the kernel's ticks.

At each /proc tick the kernel says, for every thread of the process, whether it was on a CPU or
what it slept on (model/kernel_waits.py). At a tick where a thread sleeps on the GIL's futex,
the GIL is held by a thread that is not waiting for it. When some thread of the process is on
a CPU then, the holder runs (Python, or C code that keeps the GIL): the usual contention. When
no thread is on a CPU, the holder is blocked while it holds the GIL: asleep inside a C call that
never released it (a driver's synchronous wait, `ctypes.PyDLL`, an extension's lock taken with
the GIL held). Then the waiters queue behind a sleep, not behind work, and no amount of CPU or
vectorising helps: the call must release the GIL.

Where the interpreter's own state named the holder at a tick (collect/gil_state.py), that
thread's kernel reading is the holder's: on a CPU, or asleep on what. This sees a holder blocked
while another thread runs: one that waits, with the GIL, for a native lock the running thread
holds without it (threads sharing one SQLite connection: its mutex). Elsewhere the holder's wait
is read among the candidate threads (the request threads not waiting on the GIL at that tick):
what they slept on, most often, at the instants no thread ran.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from diagnose.model.kernel_waits import Blocking, KernelView, WaitObject
from diagnose.vocab import ResourceKind

MIN_CONTENDED_TICKS = 10  # fewer instants with a GIL waiter say nothing about its inferred holder
# Instants the interpreter itself named the holder are direct readings, not inferences: fewer do.
# On a loaded machine most reads find the GIL between two holders (dropped, its next holder woken
# but waiting for a core): CI's attach of threads sharing a SQLite connection named a holder at
# 10 of 45 reads, 9 of them with a waiter, the holder blocked on the connection's mutex at 7; at
# 10 it fell back to inferring, found a thread on a CPU at every instant, and advised vectorising.
MIN_NAMED_TICKS = 5
# Of the instants a thread waited for the GIL, the holder blocked at this share: it holds the GIL
# asleep. Measured on the recordings: a computing holder reads 0.00 in every one (gil_contention,
# gc_heavy, the pure-Python pipelines, forked_workers), one asleep in a C call 0.75, one waiting
# on SQLite's mutex 0.90 on a quiet machine and 0.44 (7 of 16 instants) beside CI's other tests,
# where the mutex's runner waited for a core; at 0.5 that attach read "vectorise the Python".
HELD_ASLEEP_SHARE = 0.25
LOCK_RESOURCES = (ResourceKind.LOCK, ResourceKind.FILE_LOCK)  # a holder on these waits for another's lock


@dataclass(frozen=True)
class GilHolding:
    """The instants some request thread slept on the GIL's futex, and what the others did then."""

    contended_ticks: int  # instants with at least one thread waiting on the GIL
    ticks: int  # every instant the kernel read the process at
    blocked_share: float  # of those, the share at which no thread of the process was on a CPU
    holder_wait: str  # what a request thread not waiting on the GIL slept on most at those instants
    holder_wait_share: float  # of the blocked instants, the share that wait was seen
    holder_wait_kind: ResourceKind | None = None  # that wait's kind: a lock, a timer, a socket...
    # the holder was named by the interpreter's state at each counted tick, not inferred
    holder_read: bool = False
    # the thread most often on a CPU while the holder was blocked on a lock: the one that holds
    # that lock, running without the GIL (None: not read, or nobody ran)
    lock_runner: int | None = None

    @property
    def on_a_lock(self) -> bool:
        """The holder waits for a lock another thread holds (a native mutex taken with the GIL
        held): the GIL's queue is that lock's."""
        return self.holder_wait_kind in LOCK_RESOURCES

    def blocked_by_cpu(self, cores: float) -> float:
        """The counters' reading of the same: while some thread waited for the GIL (the share of
        instants that had one), a holder that computed would have used a core; the process ran
        `cores`, so its holder ran at most that share of the time and was blocked the rest."""
        contended = self.contended_ticks / self.ticks if self.ticks else 0.0
        return round(max(0.0, 1.0 - min(1.0, cores / contended)), 4) if contended else 0.0


def gil_holding(kernel: KernelView | None, tids: Iterable[int]) -> GilHolding | None:
    """None where the kernel did not locate the GIL or too few instants had a GIL waiter."""
    if kernel is None or not kernel.knows_gil:
        return None
    if kernel.gil_holders:
        named = _named_holder(kernel)
        if named is not None:
            return named
    return _inferred_holder(kernel, set(tids))


@dataclass(frozen=True)
class _Ticks:
    """The kernel's readings by tick, as both ways of finding the holder read them."""

    at: dict[tuple[int, float], WaitObject]  # (tid, instant) -> what the thread did then
    waiting: Counter[float]  # instant -> threads asleep on the GIL's futex
    running: dict[float, list[int]]  # instant -> threads on a CPU
    instants: set[float]


def _ticks(kernel: KernelView) -> _Ticks:
    at: dict[tuple[int, float], WaitObject] = {}
    waiting: Counter[float] = Counter()
    running: dict[float, list[int]] = {}
    instants: set[float] = set()
    for tid, times in kernel.times.items():
        for t, index in zip(times.tolist(), kernel.indices[tid].tolist()):
            instants.add(t)
            obj = kernel.objects[index]
            at[(tid, t)] = obj
            if obj.blocking == Blocking.GIL:
                waiting[t] += 1
            elif obj.blocking == Blocking.RUNNING:
                running.setdefault(t, []).append(tid)
    return _Ticks(at, waiting, running, instants)


def _holding(contended: int, ticks: _Ticks, blocked: int, seen: Counter[WaitObject],
             holder_read: bool = False, runner: int | None = None) -> GilHolding:
    """The holding read off: the holder blocked at `blocked` of the `contended` instants, on
    what `seen` counts most."""
    share = round(blocked / contended, 4)
    if not seen:
        return GilHolding(contended, len(ticks.instants), share, "", 0.0, holder_read=holder_read)
    wait, count = seen.most_common(1)[0]
    return GilHolding(contended, len(ticks.instants), share, wait.label, round(count / blocked, 4),
                      wait.resource, holder_read=holder_read,
                      lock_runner=runner if wait.resource in LOCK_RESOURCES else None)


def _named_holder(kernel: KernelView) -> GilHolding | None:
    """At each tick with a GIL waiter and a holder the interpreter named: what the kernel saw
    that thread do. None where too few such ticks."""
    ticks = _ticks(kernel)
    contended = [t for t in ticks.waiting if kernel.gil_holders.get(t, 0) > 0
                 and (kernel.gil_holders[t], t) in ticks.at]
    if len(contended) < MIN_NAMED_TICKS:
        return None
    seen: Counter[WaitObject] = Counter()
    runners: Counter[int] = Counter()
    blocked = 0
    for t in contended:
        holder = kernel.gil_holders[t]
        obj = ticks.at[(holder, t)]
        if obj.blocking == Blocking.RUNNING:
            continue
        blocked += 1
        seen[obj] += 1
        if obj.resource in LOCK_RESOURCES:
            runners.update(tid for tid in ticks.running.get(t, ()) if tid != holder)
    runner = runners.most_common(1)[0][0] if runners else None
    return _holding(len(contended), ticks, blocked, seen, holder_read=True, runner=runner)


def _inferred_holder(kernel: KernelView, candidates: set[int]) -> GilHolding | None:
    """The holder inferred: at a tick with a GIL waiter, a thread on a CPU is the holder
    running; none on a CPU, the holder is blocked on what the other candidates sleep on."""
    ticks = _ticks(kernel)
    contended = [t for t in ticks.waiting if ticks.waiting[t] > 0]
    if len(contended) < MIN_CONTENDED_TICKS:
        return None
    blocked = {t for t in contended if t not in ticks.running}
    # the candidates' other waits at those instants, each object once per instant
    others: dict[float, set[WaitObject]] = {}
    for (tid, t), obj in ticks.at.items():
        if (t in blocked and tid in candidates
                and obj.blocking not in (Blocking.GIL, Blocking.RUNNING, Blocking.IDLE)):
            others.setdefault(t, set()).add(obj)
    seen: Counter[WaitObject] = Counter()
    for objects in others.values():
        seen.update(objects)
    return _holding(len(contended), ticks, len(blocked), seen)


# A stack whose samples read as running C code holds the GIL when, at the instants some thread
# waited for it and a thread was seen running there, the interpreter named that thread the
# holder this often (MIN_HOLDING_TICKS instants at least): json's C decoder, a regex, pickle, an
# extension that never releases it. A stack in C code that releases the GIL (a BLAS call) is
# named at few of them: its thread runs beside the holder. Measured: json's raw_decode under a
# gunicorn gthread worker, named at 21 of its 23 running contended instants; numpy's read of a
# file, 2 of 9.
HOLDING_SHARE = 0.5
MIN_HOLDING_TICKS = 3


def gil_holding_stacks(kernel: KernelView | None, tick_stacks: Mapping[int, np.ndarray]) -> frozenset[int]:
    """The stacks whose running threads the interpreter named the GIL's holder at most of the
    instants a thread waited for it (HOLDING_SHARE, MIN_HOLDING_TICKS); `tick_stacks`: per
    thread, its stack at each of its kernel ticks (Analysis.tick_stacks). Empty where the
    interpreter's state named no holder."""
    if kernel is None or not kernel.gil_holders or not tick_stacks:
        return frozenset()
    ticks = _ticks(kernel)
    running_on: Counter[int] = Counter()
    named_on: Counter[int] = Counter()
    for tid, times in kernel.times.items():
        stacks = tick_stacks.get(tid)
        if stacks is None:
            continue
        for t, stack in zip(times.tolist(), stacks.tolist()):
            holder = kernel.gil_holders.get(t, 0)
            if stack < 0 or holder <= 0 or not ticks.waiting.get(t):
                continue
            if ticks.at[(tid, t)].blocking != Blocking.RUNNING:
                continue
            running_on[stack] += 1
            if holder == tid:
                named_on[stack] += 1
    return frozenset(stack for stack, n in named_on.items()
                     if n >= MIN_HOLDING_TICKS and n >= HOLDING_SHARE * running_on[stack])


def blocked_share(holding: GilHolding | None, cores: float | None) -> float:
    """How often the GIL's holder was blocked while threads waited for it: the kernel's instants
    or the counters' CPU, whichever says more (each misses what the other sees); 0 unknown."""
    if holding is None:
        return 0.0
    return max(holding.blocked_share, holding.blocked_by_cpu(cores) if cores is not None else 0.0)
