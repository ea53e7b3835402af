"""Asyncio tasks read from outside the target: the seam between the reader and the checks.

Stack sampling sees only what runs; a coroutine parked on an `asyncio.Semaphore` is on no
thread's stack. The reader (`diagnose/collect/asyncio_tasks/`) reads the target's task objects
from its memory a few times a second and records them here; the checks (`async_wait`,
`deadlock`'s await cycles) and the page's event-loop view read only these types.

Addresses identify objects within one process only; they are never shown as a figure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# A suspended coroutine's frame is a call site: where the task stands, the line of its await.
from diagnose.report.model.sections import CallSite as CoroFrame
from diagnose.vocab import AwaitKind


@dataclass(frozen=True)
class AwaitTarget:
    kind: AwaitKind
    identity: int = 0            # address of the primitive (or future) in the target; 0 unknown
    permits: int | None = None   # a semaphore's free permits (its _value), where readable
    waiters: int | None = None   # length of the primitive's waiter deque, where readable
    awaited_task: int | None = None  # for TASK: the awaited task's task_id (await cycles)
    detail: str = ""             # the reader's own words: a type name, the sleep's delay


@dataclass(frozen=True)
class TaskState:
    task_id: int                 # address of the Task object
    name: str                    # Task.get_name()
    frames: tuple[CoroFrame, ...]  # outermost coroutine first, innermost suspended frame last
    waits_on: AwaitTarget | None  # None: running, ready to run, or not readable
    done: bool = False


@dataclass(frozen=True)
class TaskSnapshot:
    at: float                    # wall-clock time of the read (time.time())
    tasks: tuple[TaskState, ...]
    torn: bool = False           # the read raced the target; the tasks read are kept


@dataclass(frozen=True)
class TaskRecording:
    """Every read of one process's tasks over the window, or why there are none."""

    pid: int
    python: str                  # "3.12" - the target's minor version, "" when unknown
    snapshots: tuple[TaskSnapshot, ...] = ()
    unreadable: str = ""         # "asyncio tasks not readable on CPython X.Y: ..." - a note
    reads: int = 0               # attempts, failed ones included
    failed_reads: int = 0
    read_seconds: float = 0.0    # the reader's own wall time over the window (its cost)
    notes: tuple[str, ...] = field(default_factory=tuple)


# Primitives of server frameworks a request parks on, by (file suffix, qualified-name pattern):
# the reader names what such a task waits on from these frames (their waiters are parked on a
# plain asyncio.Event or future underneath), and the await-site model recognises them in any
# recording. AnyIO's asyncio backend: CapacityLimiter (the thread limiter of `to_thread.run_sync`,
# FastAPI / Starlette `def` endpoints, `run_in_threadpool`), Semaphore and Lock.
FRAMEWORK_PRIMITIVES: tuple[tuple[str, re.Pattern[str], AwaitKind], ...] = (
    ("anyio/_backends/_asyncio.py",
     re.compile(r"(^|\.)CapacityLimiter\.(acquire|acquire_on_behalf_of|__aenter__)$"),
     AwaitKind.CAPACITY),
    ("anyio/_backends/_asyncio.py", re.compile(r"(^|\.)Semaphore\.(acquire|__aenter__)$"),
     AwaitKind.SEMAPHORE),
    ("anyio/_backends/_asyncio.py", re.compile(r"(^|\.)Lock\.(acquire|__aenter__)$"),
     AwaitKind.LOCK),
)


def framework_primitive(function: str, file: str) -> AwaitKind | None:
    """The kind of a framework primitive's acquiring frame, None for any other frame."""
    path = file.replace("\\", "/")
    for suffix, pattern, kind in FRAMEWORK_PRIMITIVES:
        if path.endswith(suffix) and pattern.search(function):
            return kind
    return None
