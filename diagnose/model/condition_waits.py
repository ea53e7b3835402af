"""Threads waiting on one Condition are one wait, though the kernel sees each on a lock of its own.

`threading.Condition.wait` parks each waiter on a fresh lock of its own, so the kernel names as
many futexes as there are waiters: a pool of two connections with seven threads queueing for it
(`queue.Queue.get` under a pool's acquire) read as seven chains "1 thread, 80% of the time →
lock at 0x… → end: the lock's holder". The frames name the one thing they queue on: the
application's line that calls into the wait (model's wait site) and its kind. Matched tick by
tick to the stacks py-spy saw (Analysis.tick_stacks), a thread's own futex whose ticks sit
in `Condition.wait` under one wait site is that site's wait.

A pooled resource (vocab.POOL_KINDS: a Queue or Semaphore the request threads take items from)
is then served by the threads holding its items: the same request threads, at the other times.
What they slept on then (a socket to a backend, a timer) is where the chain goes next
(model/chains.py's pool rule).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from diagnose.model.kernel_waits import Blocking, KernelView, WaitObject
from diagnose.samples.profile import Frame
from diagnose.vocab import POOL_KINDS, ResourceKind, WaitKind

# Of a futex's ticks matched to a stack, this share at least sat in Condition.wait under one
# site: the futex is that site's condition
MIN_MATCHED_SHARE = 0.6
_KIND_WORDS: dict[str, str] = {WaitKind.QUEUE: "queue.Queue", WaitKind.SEMAPHORE: "Semaphore",
               WaitKind.CONDITION: "Condition", WaitKind.EVENT: "Event", WaitKind.BARRIER: "Barrier"}


@dataclass(frozen=True)
class PoolHolding:
    """A pool the request threads queued on, and what its items' holders slept on meanwhile."""

    key: str  # the grouped wait's key ("condition:FILE:LINE")
    threads: tuple[int, ...]  # the threads that queued on it (they hold its items in turn)
    # what those threads slept on most besides the pool (None: they mostly ran), and its share
    # of their ticks out of the pool
    wait: WaitObject | None
    wait_share: float


@dataclass(frozen=True)
class ConditionWaits:
    """Per thread, its own futexes that are a condition's wait, as the one object they stand
    for; and the pools among them."""

    renamed: Mapping[tuple[int, str], WaitObject]  # (tid, futex key) -> the condition's object
    pools: Mapping[str, PoolHolding]  # by the condition's key

    def rename(self, tid: int, obj: WaitObject) -> WaitObject:
        return self.renamed.get((tid, obj.key), obj)


NO_CONDITION_WAITS = ConditionWaits({}, {})


def condition_waits(kernel: KernelView | None, tick_stacks: Mapping[int, np.ndarray],
                    stack_frames: Callable[[int], Sequence[Frame]],
                    site_of: Callable[[int], int], kind_of: Callable[[int], str],
                    frame: Callable[[int], Frame]) -> ConditionWaits:
    """`tick_stacks`: per thread, the stack py-spy saw it keep at each of its kernel ticks
    (Analysis.tick_stacks, os_state.stacks_at_ticks); `site_of(stack)`: the frame id of its wait
    site (-1: none); `kind_of(stack)`: its wait kind; `frame(id)`: a frame by id."""
    if kernel is None or not tick_stacks:
        return NO_CONDITION_WAITS
    users: dict[str, set[int]] = {}
    for tid, waits in kernel.threads.items():
        for obj, _ in waits.objects:
            if obj.resource == ResourceKind.LOCK:
                users.setdefault(obj.key, set()).add(tid)
    renamed: dict[tuple[int, str], WaitObject] = {}
    for tid, stacks in tick_stacks.items():
        sites: dict[str, Counter[tuple[int, str]]] = {}
        matched: Counter[str] = Counter()
        for index, stack in zip(kernel.indices[tid].tolist(), stacks.tolist()):
            obj = kernel.objects[index]
            if stack < 0 or not _may_be_a_waiter_lock(obj, users, tid):
                continue
            matched[obj.key] += 1
            if _in_condition_wait(stack_frames(stack)) and site_of(stack) >= 0:
                sites.setdefault(obj.key, Counter())[(site_of(stack), kind_of(stack))] += 1
        for key, counts in sites.items():
            (site, kind), n = counts.most_common(1)[0]
            if n >= MIN_MATCHED_SHARE * matched[key]:
                renamed[(tid, key)] = _condition(frame(site), kind)
    return ConditionWaits(renamed, _pools(kernel, renamed))


RESUMED_FUTEX = "other:futex_do_wait"  # a futex wait the kernel resumed: its address is gone


def _may_be_a_waiter_lock(obj: WaitObject, users: Mapping[str, set[int]], tid: int) -> bool:
    """A futex only this thread waited on (a condition's waiter lock is its one waiter's
    alone), or a futex wait resumed after a stop, whose address the kernel no longer says."""
    return ((obj.resource == ResourceKind.LOCK and users.get(obj.key) == {tid})
            or obj.key == RESUMED_FUTEX)


def _in_condition_wait(frames: Sequence[Frame]) -> bool:
    python = [f for f in frames if not f.native]
    return bool(python) and python[-1].file.endswith("threading.py") and python[-1].function.endswith("Condition.wait")


def _condition(site: Frame, kind: str) -> WaitObject:
    where = f"{site.function} ({site.file.rsplit('/', 1)[-1]}:{site.line})"
    what = _KIND_WORDS.get(kind, "a condition")
    pooled = kind in POOL_KINDS
    label = f"pool: {what} at {where}" if pooled else f"{what} at {where}"
    return WaitObject(ResourceKind.POOL if pooled else ResourceKind.LOCK, condition_key(site.file, site.line),
                      label, Blocking.HELD, "futex")


def condition_key(file: str, line: int) -> str:
    """The key of the condition waited on at a line: the chains group its waiters by it, and a
    check finds its chain by it (pool_wait)."""
    return f"condition:{file}:{line}"


def _pools(kernel: KernelView, renamed: Mapping[tuple[int, str], WaitObject]) -> dict[str, PoolHolding]:
    """Each pool's threads and what they slept on most while not queueing for it."""
    members: dict[str, set[int]] = {}
    for (tid, _), obj in renamed.items():
        if obj.resource == ResourceKind.POOL:
            members.setdefault(obj.key, set()).add(tid)
    out = {}
    for key, tids in members.items():
        slept: dict[str, float] = {}
        objects: dict[str, WaitObject] = {}
        outside = 0.0
        for tid in tids:
            for obj, share in kernel.shares(tid):
                obj = renamed.get((tid, obj.key), obj)
                if obj.key == key:
                    continue
                outside += share
                if obj.blocking not in (Blocking.RUNNING, Blocking.IDLE) and obj.resource is not None:
                    slept[obj.key] = slept.get(obj.key, 0.0) + share
                    objects[obj.key] = obj
        top = max(slept, key=slept.__getitem__, default=None)
        wait = objects[top] if top is not None else None
        share = slept[top] if top is not None else 0.0
        out[key] = PoolHolding(key, tuple(sorted(tids)), wait,
                               round(share / outside, 4) if wait is not None and outside > 0 else 0.0)
    return out

