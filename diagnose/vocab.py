"""The report's vocabulary, defined once: thread states, wait kinds, roles, severities, confidence.

Every member is a `str` (enum.StrEnum): it compares, hashes, formats and serialises as its
value, so a report written with these members is byte-identical to one written with the plain
strings. Pandas categoricals are built from the values (`STATES`, `WAIT_KINDS`), so the sample
table's categories stay plain strings.

The groups of states are named by what they mean, not by a shared word: "busy" (running or
wanting to run) includes the GIL wait, "running" (on a CPU) does not. Each place that selects
states uses the group whose meaning it needs.

The report page reads the same vocabulary from its data (`page_vocabulary`, rendered into the
page's data as `vocabulary`) instead of declaring its own.
"""

from __future__ import annotations

import enum


class ThreadState(enum.StrEnum):
    """What a thread was doing in one sample (classify/state.py infers it from the stack)."""

    PYTHON = "python"    # running Python bytecode
    NATIVE = "native"    # running native code (an extension, a library)
    GIL = "gil"          # waiting for the GIL: runnable, wants to run Python
    LOCK = "lock"        # waiting on a lock another thread of the process holds
    IO = "io"            # asleep or blocked in IO
    IDLE = "idle"        # waiting for work
    UNKNOWN = "unknown"  # the samples could not tell


class WaitKind(enum.StrEnum):
    """What a waiting sample waits on ("" when it does not wait)."""

    NONE = ""
    LOCK = "lock"
    RLOCK = "rlock"
    QUEUE = "queue"
    SEMAPHORE = "semaphore"
    CONDITION = "condition"
    EVENT = "event"
    JOIN = "join"
    BARRIER = "barrier"
    LOGGING = "logging"
    FUTURE = "future"
    GIL = "gil"
    IO = "io"
    NATIVE_MUTEX = "native_mutex"  # a native library's mutex (OpenBLAS serializing its callers)
    FILE_LOCK = "file_lock"  # flock / fcntl on a file, held by this or another process (the kernel)


class ThreadRole(enum.StrEnum):
    """What a thread is for, from how it spent the window (model/analysis.summarize_threads)."""

    REQUEST = "request"  # handles requests
    IDLE = "idle"        # waits for work nearly all the window
    LIBRARY = "library"  # a library's own transport thread (model/library_threads.py)
    OTHER = "other"


class ProcessRole(enum.StrEnum):
    """What a process of the service is for (model/service.py), in the page's display order."""

    MASTER = "master"  # the parent of the workers, idle itself
    SINGLE = "single"  # the only process: the service itself
    WORKER = "worker"
    HELPER = "helper"  # a process that serves no request (a resource tracker, a pool helper)
    PEER = "peer"  # a local process the service's connections lead to (attach --follow-peers)


class StageRole(enum.StrEnum):
    """What a group of threads sharing a loop function does in the structure (model/structure.py)."""

    STAGE = "stage"              # takes work from one queue and hands it to another
    REQUEST = "request"          # handles requests itself
    EVENT_LOOP = "event_loop"    # runs an event loop
    SUPERVISOR = "supervisor"    # watches worker processes (a pre-fork master)
    IDLE = "idle"                # waits for work all window
    OTHER = "other"


class EdgeKind(enum.StrEnum):
    """Why one stage waits for another (report/model/sections.Edge, built by model/structure.py)."""

    STARVED = "starved"            # waiting in get on its input queue
    BACKPRESSURE = "backpressure"  # blocked putting into a full queue
    RESULT = "result"              # waiting for a result another stage produces
    LOCK = "lock"
    GIL = "gil"


# Edges that hand work from one stage to the next (a pipeline's links), not shared resources.
HANDOFF_EDGES = frozenset({EdgeKind.STARVED, EdgeKind.BACKPRESSURE, EdgeKind.RESULT})


class NodeKind(enum.StrEnum):
    """What a node of the wait-for graph stands for (model/wait_graph.py)."""

    THREADS = "threads"      # one or more threads of one process that waited alike
    PROCESS = "process"      # a process as a whole (a pipe's writer, a file lock's holder)
    TASKS = "tasks"          # asyncio tasks parked on one await site
    RESOURCE = "resource"


class ResourceKind(enum.StrEnum):
    """What a resource node is, as the kernel (or the task reader) names it."""

    GIL = "gil"
    LOCK = "lock"              # a futex: a Python lock, a native mutex, a condition
    FILE_LOCK = "file_lock"    # flock / fcntl(F_SETLKW) on a file
    PIPE = "pipe"
    SOCKET = "socket"          # a connected socket: a call outside the process
    LISTEN = "listen"          # a listening socket: waiting for work
    CHILD = "child"            # wait4 / waitid on a child process
    SLEEP = "sleep"            # a timer (time.sleep), a signal wait
    POLL = "poll"              # poll / select / epoll on descriptors none of the above
    CAPACITY = "capacity"      # a semaphore or limiter asyncio tasks queue on
    FUTURE = "future"          # a future worker threads resolve (run_in_executor, asyncio.to_thread)
    POOL = "pool"              # a pool threads take items from and give back (a Queue of connections)
    CPU_QUOTA = "cpu_quota"    # the cgroup's CPU quota
    OTHER = "other"


class ChainEnd(enum.StrEnum):
    """Where a chain of waits ends (model/chains.py): what, past every hop the model can follow,
    ends the waiters' wait."""

    LOCAL_SERVER = "local_server"  # a process on this host read beside the service: its load is known
    LOCAL_PEER = "local_peer"      # a process on this host at the other end, not read: load unknown
    REMOTE = "remote"              # an address no local process serves: the end this host can see
    GIL_HOLDER = "gil_holder"      # the thread holding the GIL (running, or blocked on no lock named)
    LOCK_HOLDER = "lock_holder"    # the holder of a lock (a futex, a file lock, a capacity's tokens)
    CHILD = "child"                # a child process the waiters wait for
    CPU_QUOTA = "cpu_quota"        # the cgroup's CPU quota
    WAITING_FOR_WORK = "waiting_for_work"  # the service's own listening socket or its client's next request
    TIMER = "timer"                # a sleep, a timer, a signal
    CYCLE = "cycle"                # back to a process already on the chain: the set serves itself
    KNOT = "knot"                  # threads waiting on one another, none running (model/knots.py)
    # the worker threads a future or a capacity hands work to, every one taken, each waiting on
    # a call whose own end is no limit (a sleep, an address outside): more of them serve more
    WORKER_THREADS = "worker_threads"
    # a pool's items (a queue.Queue of connections, a Semaphore's permits), every one held by a
    # thread waiting on a call whose own end is no limit: more items serve more at once
    POOL_ITEMS = "pool_items"
    UNKNOWN = "unknown"            # a wait nothing here names a server for (a poll, another call)


class GraphEdgeKind(enum.StrEnum):
    """What an edge of the wait-for graph says (model/wait_graph.py)."""

    WAITS_FOR = "waits_for"
    HELD_BY = "held_by"
    SERVED_BY = "served_by"


class LoopFlavor(enum.StrEnum):
    """Which event loop a loop thread runs (model/event_loops.py)."""

    ASYNCIO = "asyncio"
    UVLOOP = "uvloop"


class CodeOwner(enum.StrEnum):
    """Whose code a frame of a loop thread's stack is, and so what a loop stack's innermost
    frames say the loop was doing (LoopStack.segment uses IDLE, FRAMEWORK and APP)."""

    RUNTIME = "runtime"      # the standard library, native code
    FRAMEWORK = "framework"  # the server's packages
    APP = "app"              # the service's own code
    IDLE = "idle"            # (a loop stack only) waiting for events


class CallbackKind(enum.StrEnum):
    """What a callback of the app that held the event loop did (report/model/sections.Callback:
    only stacks in the app's own code are tallied as callbacks)."""

    CPU = "cpu"
    BLOCKING_CALL = "blocking_call"


class AwaitKind(enum.StrEnum):
    """What a suspended asyncio task waits on, read from the future it awaits and that future's
    owner (collect/task_recording.py); a report's await site says it (report/model/sections.py)."""

    SEMAPHORE = "semaphore"    # asyncio.Semaphore / BoundedSemaphore acquire
    LOCK = "lock"              # asyncio.Lock acquire
    # A framework's limit on work handed to threads (AnyIO's CapacityLimiter: FastAPI / Starlette
    # `def` endpoints and run_in_threadpool take one of its tokens): its holders are threads
    CAPACITY = "capacity"
    CONDITION = "condition"    # asyncio.Condition wait
    EVENT = "event"            # asyncio.Event wait
    QUEUE_GET = "queue_get"    # asyncio.Queue get on an empty queue
    QUEUE_PUT = "queue_put"    # asyncio.Queue put on a full queue
    TASK = "task"              # another task (await task / gather on tasks)
    FUTURE = "future"          # a plain Future nobody above owns (a batcher's result, ...)
    SLEEP = "sleep"            # asyncio.sleep
    IO = "io"                  # a transport / socket readiness future
    UNKNOWN = "unknown"        # suspended, on something the reader could not name


class Severity(enum.StrEnum):
    """A finding's (and a verdict's) severity, lowest first: `SEVERITIES` is the order."""

    OK = "ok"
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class LeverKind(enum.StrEnum):
    """What a finding's lever changes: the work itself, or the cores the work runs on."""

    REMOVE_WORK = "remove_work"  # vectorise, cache, a cheaper decode: the work gets cheaper
    MORE_CORES = "more_cores"  # processes, workers, replicas: the same work on more cores


class CpuPart(enum.StrEnum):
    """Where a core-second of the service went (report/model/account.CpuAccount), in the order
    the account lists them."""

    PYTHON = "python"            # user time running Python code (the collector's left out)
    NATIVE = "native"            # user time in native libraries (threads without Python frames too)
    COLLECTOR = "collector"      # user time in CPython's cyclic garbage collector
    KERNEL = "kernel"            # system time: the kernel's work for the service's threads
    CHILDREN = "children"        # child processes not sampled, alive in the window
    REAPED = "reaped"            # children that exited and were reaped in the window
    UNEXPLAINED = "unexplained"  # CPU the counters measured that the samples could not place


class Confidence(enum.StrEnum):
    """A verdict's confidence: low when a finding it names rests on too few samples."""

    OK = "ok"
    LOW = "low"


# ---------------------------------------------------------------- orders (plain values)

# The sample table's categories, and the page's state indices, in this order.
STATES: tuple[str, ...] = tuple(s.value for s in ThreadState)
WAIT_KINDS: tuple[str, ...] = tuple(k.value for k in WaitKind)
SEVERITIES: tuple[str, ...] = tuple(s.value for s in Severity)  # lowest first

# Score thresholds of the severities (checks/base.severity_for): a score at or above one has
# that severity. CRITICAL_SCORE is also the arbiter's critical line (checks/arbiter.py).
CRITICAL_SCORE = 75
WARNING_SCORE = 50
INFO_SCORE = 25
SEVERITY_THRESHOLDS: tuple[tuple[int, Severity], ...] = (
    (CRITICAL_SCORE, Severity.CRITICAL), (WARNING_SCORE, Severity.WARNING), (INFO_SCORE, Severity.INFO))

# The severities `--fail-on` accepts.
GATE_SEVERITIES: tuple[str, ...] = (Severity.WARNING.value, Severity.CRITICAL.value)


def severity_rank(severity: str) -> int:
    """A severity's place in `SEVERITIES` (ok = 0); ValueError for another word."""
    return SEVERITIES.index(severity)


# ---------------------------------------------------------------- groups of thread states

# On a CPU, running the thread's own code (Python or native).
RUNNING: tuple[ThreadState, ...] = (ThreadState.PYTHON, ThreadState.NATIVE)
# Running or wanting to run its own work: RUNNING and the GIL wait (a runnable thread).
BUSY: tuple[ThreadState, ...] = (ThreadState.PYTHON, ThreadState.NATIVE, ThreadState.GIL)
# Running Python or waiting for the GIL to: the GIL-bound work.
GIL_BOUND: tuple[ThreadState, ...] = (ThreadState.PYTHON, ThreadState.GIL)
# Busy, or blocked on a lock another thread holds: a thread doing (or held up in) a request.
ACTIVE: tuple[ThreadState, ...] = (ThreadState.PYTHON, ThreadState.NATIVE, ThreadState.GIL,
                                   ThreadState.LOCK)
# Waiting on something another thread of the same process holds: a lock or the GIL.
CONTENDED: tuple[ThreadState, ...] = (ThreadState.LOCK, ThreadState.GIL)
# Every waiting state.
WAITING: tuple[ThreadState, ...] = (ThreadState.GIL, ThreadState.LOCK, ThreadState.IO,
                                    ThreadState.IDLE)

# ---------------------------------------------------------------- groups of wait kinds

# Locks proper (checks/lock_contention.py).
LOCK_KINDS: tuple[WaitKind, ...] = (WaitKind.LOCK, WaitKind.RLOCK, WaitKind.CONDITION, WaitKind.BARRIER,
                                    WaitKind.FILE_LOCK)
# A bounded pool's waits: for a free slot or a result (checks/pool_wait.py).
POOL_KINDS: tuple[WaitKind, ...] = (WaitKind.QUEUE, WaitKind.SEMAPHORE)
# A thread parked for the window rather than serving (model/analysis.py).
PARKING_KINDS: tuple[WaitKind, ...] = (WaitKind.EVENT, WaitKind.JOIN)
# Waits on something held inside the process, which another process cannot be held up by
# (model/service.py).
IN_PROCESS_KINDS: tuple[WaitKind, ...] = (WaitKind.LOCK, WaitKind.RLOCK, WaitKind.SEMAPHORE,
                                          WaitKind.QUEUE, WaitKind.LOGGING, WaitKind.GIL)
# Waits the frames read on a Python synchronisation primitive: each sleeps on a Python lock's
# futex, so the kernel's reading of that futex is a lock wait only where Python code takes one
# (model/os_state.py).
PRIMITIVE_KINDS: tuple[WaitKind, ...] = (WaitKind.LOCK, WaitKind.RLOCK, WaitKind.CONDITION,
                                         WaitKind.BARRIER, WaitKind.SEMAPHORE, WaitKind.QUEUE,
                                         WaitKind.EVENT, WaitKind.JOIN, WaitKind.LOGGING,
                                         WaitKind.FUTURE)
# Waits on something one thread holds at a time: an edge from the waiter to the holder
# (model/structure.py).
HELD_KINDS: tuple[WaitKind, ...] = (WaitKind.LOCK, WaitKind.RLOCK, WaitKind.CONDITION,
                                    WaitKind.SEMAPHORE, WaitKind.GIL, WaitKind.NATIVE_MUTEX)

# ---------------------------------------------------------------- groups of roles

# The threads that take requests, busy or waiting for one.
HANDLER_ROLES: tuple[ThreadRole, ...] = (ThreadRole.REQUEST, ThreadRole.IDLE)
# The processes that serve requests (model/service.ServiceModel.workers).
SERVING_ROLES: tuple[ProcessRole, ...] = (ProcessRole.WORKER, ProcessRole.SINGLE)


def page_vocabulary() -> dict[str, object]:
    """The vocabulary the report page reads from its data (docs/report-data.md)."""
    return {
        "severities": list(SEVERITIES),
        "critical_score": CRITICAL_SCORE,
        "states": list(STATES),
        "running": [s.value for s in RUNNING],
        "waiting": [s.value for s in WAITING],
        "wait_kinds": list(WAIT_KINDS),
        "thread_roles": [r.value for r in ThreadRole],
        "process_roles": [r.value for r in ProcessRole],
        "confidences": [c.value for c in Confidence],
    }
