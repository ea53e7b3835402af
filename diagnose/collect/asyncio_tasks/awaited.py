"""What a suspended task waits on: named from the frames of a server framework's primitive (an
AnyIO CapacityLimiter, Semaphore or Lock: its waiters park on a plain asyncio.Event or future
underneath, so the framework's frame says what they wait for), else from the innermost frames
that belong to asyncio's own primitives (their `self` is the primitive), else from the future
the task is parked on."""

from __future__ import annotations

import re

from diagnose.collect.asyncio_tasks.objects import MAX_STR
from diagnose.collect.asyncio_tasks.remote import RemoteReadError
from diagnose.collect.asyncio_tasks.walk import Chain, TaskWalker
from diagnose.collect.task_recording import AwaitTarget, framework_primitive
from diagnose.vocab import AwaitKind

# (file suffix, co_qualname) -> kind, and the deque attribute holding the primitive's waiters
_PRIMITIVES: dict[tuple[str, str], tuple[AwaitKind, str]] = {
    ("asyncio/locks.py", "Semaphore.acquire"): (AwaitKind.SEMAPHORE, "_waiters"),
    ("asyncio/locks.py", "Lock.acquire"): (AwaitKind.LOCK, "_waiters"),
    ("asyncio/locks.py", "Condition.wait"): (AwaitKind.CONDITION, "_waiters"),
    ("asyncio/locks.py", "Event.wait"): (AwaitKind.EVENT, "_waiters"),
    ("asyncio/queues.py", "Queue.get"): (AwaitKind.QUEUE_GET, "_getters"),
    ("asyncio/queues.py", "Queue.put"): (AwaitKind.QUEUE_PUT, "_putters"),
}
_SLEEP = ("asyncio/tasks.py", "sleep")
_IO_FILES = ("asyncio/streams.py", "asyncio/selector_events.py", "asyncio/proactor_events.py",
             "asyncio/sslproto.py")
_FUTURE_TYPES = ("_asyncio.Future", "Future")


def _site(file: str) -> str:
    """The last two path parts, which is how asyncio's own files are recognised."""
    return "/".join(file.replace("\\", "/").rsplit("/", 2)[-2:])


def classify(walker: TaskWalker, task: int, chain: Chain, waiter: int) -> AwaitTarget | None:
    """None when the task is not suspended on anything (running, or ready to run)."""
    if waiter or chain.awaited:
        for suspended in reversed(chain.frames):
            kind = framework_primitive(suspended.frame.function, suspended.frame.file)
            if kind is not None:
                # The innermost of its frames is a method of the primitive: `self` is it.
                return AwaitTarget(kind, identity=suspended.local0,
                                   detail=_framework_words(suspended.frame.function,
                                                           suspended.frame.file))
    for suspended in reversed(chain.frames):
        frame = suspended.frame
        site = _site(frame.file)
        known = _PRIMITIVES.get((site, frame.function))
        if known is not None:
            kind, waiters_attr = known
            owner = suspended.local0
            permits = walker.int_attribute(owner, "_value") if kind is AwaitKind.SEMAPHORE \
                else None
            return AwaitTarget(kind, identity=owner, permits=permits,
                               waiters=walker.deque_length(owner, waiters_attr))
        if (site, frame.function) == _SLEEP:
            return AwaitTarget(AwaitKind.SLEEP, identity=waiter)
        if site in _IO_FILES:
            return AwaitTarget(AwaitKind.IO, identity=waiter, detail=frame.function[:MAX_STR])
    if waiter:
        return _by_future(walker, task, waiter)
    if chain.awaited:
        return AwaitTarget(AwaitKind.UNKNOWN, detail=_type_name(walker, chain.awaited))
    return None


def _by_future(walker: TaskWalker, task: int, waiter: int) -> AwaitTarget:
    try:
        waiter_type = walker.r.type_of(waiter)
        name = walker.r.type_name(waiter_type)
        if waiter_type == walker.r.type_of(task) or name in ("_asyncio.Task", "Task"):
            return AwaitTarget(AwaitKind.TASK, identity=waiter, awaited_task=waiter)
        if name in _FUTURE_TYPES:
            return AwaitTarget(AwaitKind.FUTURE, identity=waiter)
        return AwaitTarget(AwaitKind.UNKNOWN, identity=waiter, detail=name[:MAX_STR])
    except RemoteReadError:
        return AwaitTarget(AwaitKind.UNKNOWN, identity=waiter)


def _type_name(walker: TaskWalker, address: int) -> str:
    try:
        return walker.r.type_name_of(address)[:MAX_STR]
    except RemoteReadError:
        return ""


def _framework_words(function: str, file: str) -> str:
    """"anyio CapacityLimiter" from `CapacityLimiter.acquire_on_behalf_of` in anyio's files."""
    owner = function.rsplit(".", 1)[0].rsplit(".", 1)[-1]
    package = re.search(r"/(?:site|dist)-packages/([A-Za-z_]\w*)", file.replace("\\", "/"))
    return (f"{package.group(1)} {owner}" if package else owner)[:MAX_STR]
