"""Who held a lock the kernel saw threads wait on, and what its holder waited on meanwhile.

The kernel names the futex a thread sleeps on, never the thread holding it. The frames name
both ends of a Python lock: the lock a waiting thread takes at its wait site
(held_locks.waited_at) and the locks a thread's stack holds (held_locks.held_in_stack). On a
timestamped recording each /proc tick of a thread is matched to the stack py-spy saw it keep
then (os_state.stacks_at_ticks): the waiters' matched stacks name the Python lock behind the
futex.

Which thread held it at an instant some thread slept on the futex: among the threads the kernel
saw on the futex at some tick (its users), those not on it then, but for one whose stack py-spy
saw kept then holds no such lock. A stack py-spy did not see kept (a lock held for less than two
samples' time: a request's call to a backend under it) may be the holder's, and counts. What the
kernel saw those threads do at the same instants is what the holder did: on a CPU (it computes
under the lock), or asleep on something else (a socket to a backend, a pipe, another lock). The
chain of waits follows the lock there (model/chains.py), as it follows a server's own wait.

Not done: a lock no Python frame takes (a native mutex); two futexes the source names alike (a
list of locks, two objects' `self.lock`: held_locks cannot tell instances apart, so neither is
followed); a holder the frames do not see holding it (a lock passed to a helper that releases
it); a recording whose samples carry no instants of their own (its rows stand on a grid: a tick
cannot be matched to a stack).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from diagnose.model.held_locks import LockSite, held_in_stack, waited_at
from diagnose.model.kernel_waits import Blocking, KernelView, WaitObject
from diagnose.samples.profile import Frame
from diagnose.vocab import ResourceKind

MIN_HOLDING_TICKS = 5  # fewer ticks of a holder seen while others waited say nothing of what it does


@dataclass(frozen=True)
class LockHolding:
    """A lock the kernel saw threads wait on, its holders as the frames name them, and what
    they did while others waited on it."""

    key: str  # the kernel's lock (WaitObject.key)
    lock: LockSite  # the lock as the waiters' code takes it
    ticks: int  # instants a holder was seen holding it while another thread slept on it
    threads: tuple[int, ...]  # the holders (tids), most of those instants first
    # what the holders slept on most at those instants (None: they were mostly on a CPU, or
    # slept on nothing in particular)
    wait: WaitObject | None
    wait_share: float  # of those instants, the share `wait` was seen

    @property
    def thread(self) -> int | None:
        """The one thread that held it, where one did at every instant seen; None where the
        holders took turns."""
        return self.threads[0] if len(self.threads) == 1 else None


@dataclass(frozen=True)
class _Tick:
    """One thread at one /proc instant: what the kernel saw, and the stack py-spy matched."""

    tid: int
    obj: WaitObject
    stack: int


def lock_holdings(kernel: KernelView | None, tick_stacks: Mapping[int, np.ndarray],
                  stack_frames: Callable[[int], Sequence[Frame]],
                  sites: Callable[[int], int]) -> dict[str, LockHolding]:
    """Per lock the kernel saw threads wait on (its key), who held it and what they did then.
    `tick_stacks`: per thread, the stack py-spy saw it keep at each of its kernel ticks
    (Analysis.tick_stacks, os_state.stacks_at_ticks); `stack_frames(stack)`: its frames,
    outermost first; `sites(stack)`: the index among them of the frame waiting (-1: none)."""
    if kernel is None or not tick_stacks:
        return {}
    at: dict[float, list[_Tick]] = {}
    for tid, stacks in tick_stacks.items():
        times = kernel.times[tid]
        for t, index, stack in zip(times.tolist(), kernel.indices[tid].tolist(), stacks.tolist()):
            at.setdefault(t, []).append(_Tick(tid, kernel.objects[index], int(stack)))
    reader = _Reader(stack_frames, sites)
    locks = _locks_waited(at, reader)
    # One name taken by two futexes is two instances the source cannot tell apart (a list of
    # locks, `self.lock` of two objects): a thread holding one would read as the other's holder.
    names = Counter(lock.identity for lock in locks.values())
    out = {}
    for key, lock in locks.items():
        if names[lock.identity] > 1:
            continue
        holding = _holding(at, key, lock, reader)
        if holding is not None:
            out[key] = holding
    return out


class _Reader:
    """The locks a stack waits at and holds, each stack read once."""

    def __init__(self, stack_frames: Callable[[int], Sequence[Frame]], sites: Callable[[int], int]):
        self.stack_frames = stack_frames
        self.sites = sites
        self._waited: dict[int, LockSite | None] = {}
        self._held: dict[int, frozenset[str]] = {}

    def waited(self, stack: int) -> LockSite | None:
        if stack not in self._waited:
            site = self.sites(stack)
            self._waited[stack] = waited_at(list(self.stack_frames(stack)), site) if site >= 0 else None
        return self._waited[stack]

    def holds(self, stack: int) -> frozenset[str]:
        if stack not in self._held:
            self._held[stack] = frozenset(s.identity for s in held_in_stack(list(self.stack_frames(stack))))
        return self._held[stack]


def _locks_waited(at: Mapping[float, list[_Tick]], reader: _Reader) -> dict[str, LockSite]:
    """Per futex, the Python lock its waiters' stacks take at most of the ticks matched."""
    seen: dict[str, Counter[LockSite]] = {}
    for ticks in at.values():
        for tick in ticks:
            if tick.obj.resource != ResourceKind.LOCK or tick.stack < 0:
                continue
            lock = reader.waited(tick.stack)
            if lock is not None:
                seen.setdefault(tick.obj.key, Counter())[lock] += 1
    return {key: counts.most_common(1)[0][0] for key, counts in seen.items()}


def _holding(at: Mapping[float, list[_Tick]], key: str, lock: LockSite, reader: _Reader) -> LockHolding | None:
    """At each instant some thread slept on `key`: its other users (threads the kernel saw on
    it at some tick) not on it then, but for those whose stack py-spy saw then holds no
    `lock`, and what the kernel saw them do. A stack py-spy did not see kept at the tick (a lock
    held for less than two samples' time) may be the holder's: it counts. None where too few
    such instants."""
    waited = [instant for instant in at.values() if any(t.obj.key == key for t in instant)]
    users = {t.tid for instant in waited for t in instant if t.obj.key == key}
    did: Counter[WaitObject] = Counter()
    holders: Counter[int] = Counter()
    ticks = 0
    for instant in waited:
        held = [t for t in instant if t.tid in users and t.obj.key != key
                and (t.stack < 0 or lock.identity in reader.holds(t.stack))]
        if not held:
            continue
        ticks += 1
        holders.update(t.tid for t in held)
        did.update({t.obj for t in held})  # each thing once per instant
    if ticks < MIN_HOLDING_TICKS:
        return None
    wait, count = did.most_common(1)[0]
    asleep = wait.blocking not in (Blocking.RUNNING, Blocking.IDLE)
    return LockHolding(key, lock, ticks, tuple(t for t, _ in holders.most_common()),
                       wait if asleep else None, round(count / ticks, 4) if asleep else 0.0)
