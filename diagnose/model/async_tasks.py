"""Asyncio tasks read from outside the target: the seam between the reader and the checks.

Stack sampling sees only what runs; a coroutine parked on an `asyncio.Semaphore` is on no
thread's stack. The reader (`diagnose/collect/asyncio_tasks/`) reads the target's task objects
from its memory a few times a second and records them here; the checks (`async_wait`,
`deadlock`'s await cycles) and the page's event-loop view read only these types.

Addresses identify objects within one process only; they are never shown as a figure.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class AwaitKind(enum.StrEnum):
    """What a suspended task waits on, read from the future it awaits and that future's owner."""

    SEMAPHORE = "semaphore"    # asyncio.Semaphore / BoundedSemaphore acquire
    LOCK = "lock"              # asyncio.Lock acquire
    CONDITION = "condition"    # asyncio.Condition wait
    EVENT = "event"            # asyncio.Event wait
    QUEUE_GET = "queue_get"    # asyncio.Queue get on an empty queue
    QUEUE_PUT = "queue_put"    # asyncio.Queue put on a full queue
    TASK = "task"              # another task (await task / gather on tasks)
    FUTURE = "future"          # a plain Future nobody above owns (a batcher's result, ...)
    SLEEP = "sleep"            # asyncio.sleep
    IO = "io"                  # a transport / socket readiness future
    UNKNOWN = "unknown"        # suspended, on something the reader could not name


@dataclass(frozen=True)
class CoroFrame:
    """One suspended coroutine frame: where in the code the task stands."""

    function: str
    file: str
    line: int


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
