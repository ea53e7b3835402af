"""The report's sections read from the samples: processes, threads, wait sites, the service's
structure, event loops and the stacks table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from diagnose.vocab import (AwaitKind, CallbackKind, EdgeKind, LoopFlavor, ProcessRole, Severity,
                            StageRole)
from diagnose.report.model.codec import NULL_WHEN_EMPTY, OPTIONAL
from diagnose.report.model.run import StateSources


@dataclass(frozen=True)
class TopFinding:
    id: str
    score: int = 0
    severity: Severity = Severity.OK
    summary: str = ""


@dataclass(frozen=True)
class Process:
    """One process of the service."""

    pid: int | None
    ppid: int | None = None
    role: ProcessRole = ProcessRole.SINGLE
    cmdline: str = ""  # redacted
    threads: int = 0
    cpu_s: float | None = None
    cpu_cores: float | None = None
    busy_share: float = 0.0
    samples: int = 0
    started_s: float | None = None
    exited_s: float | None = None
    top_finding: TopFinding | None = None


@dataclass(frozen=True)
class ThreadOs:
    """A thread's /proc counters over the window, as the report states them (model/os_summary.py
    ProcThread builds on them)."""

    cpu_s: float | None = None
    runqueue_wait_s: float | None = None
    voluntary_ctx: int | None = None
    involuntary_ctx: int | None = None
    observer_stops: int | None = None
    # cpu_s in user mode and in the kernel; absent in reports of older recordings
    user_s: float | None = field(default=None, metadata=OPTIONAL)
    system_s: float | None = field(default=None, metadata=OPTIONAL)

    def rounded(self) -> ThreadOs:
        """These counters alone (the analysis's ProcThread adds to them), as the report writes
        them: seconds to 4 places."""
        return ThreadOs(cpu_s=_round4(self.cpu_s), runqueue_wait_s=_round4(self.runqueue_wait_s),
                        voluntary_ctx=self.voluntary_ctx, involuntary_ctx=self.involuntary_ctx,
                        observer_stops=self.observer_stops, user_s=_round4(self.user_s),
                        system_s=_round4(self.system_s))


def _round4(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 4)


@dataclass(frozen=True)
class Thread:
    """One thread seen; its index in `Report.threads` is the thread index of the stacks."""

    tid: int
    pid: int | None = None
    name: str = ""
    role: str = "other"
    samples: int = 0
    first_s: float | None = None
    last_s: float | None = None
    states: Mapping[str, int] = field(default_factory=dict)  # samples per thread state
    state_sources: StateSources | None = field(default=None, metadata=OPTIONAL)
    os: ThreadOs | None = None


@dataclass(frozen=True)
class Holder:
    """A thread seen inside the critical section while others waited at the site."""

    stack: tuple[str, ...] = ()
    function: str = ""
    file: str = ""
    line: int = 0
    share: float = 0.0
    instants: int = 0
    scope_line: int = 0  # the holder's line in the frame that holds the lock (the blocking call)
    state: str = ""  # what the holder was most often doing there (running, blocked, ...)


@dataclass(frozen=True)
class WaitSite:
    """Where request threads waited, on what, and who held it."""

    kind: str = ""
    label: str = ""
    function: str = ""
    file: str = ""
    line: int = 0
    samples: int = 0
    thread_seconds: float = 0.0
    threads: int = 0
    max_concurrent: int = 0
    share: float = 0.0  # of request-thread time
    holders: tuple[Holder, ...] = ()
    holder_scope: str = ""
    max_holders: int = 0
    summary: str = ""
    pid: int | None = None


@dataclass(frozen=True)
class Stage:
    """A thread group of one process, by the function its threads loop on."""

    name: str = ""  # the loop function
    role: StageRole = StageRole.OTHER
    function: str = ""
    file: str = ""
    line: int = 0
    tids: tuple[int, ...] = ()
    samples: int = 0
    busy_share: float = 0.0  # per thread: running or runnable (python / native / GIL wait)
    python_share: float = 0.0  # of busy samples, running Python (holding or wanting the GIL)
    starved_share: float = 0.0  # waiting in get on its input queue
    blocked_put_share: float = 0.0  # blocked putting into a full queue
    result_wait_share: float = 0.0  # waiting for a result another thread produces
    gets: tuple[str, ...] = ()  # queue names
    puts: tuple[str, ...] = ()
    busy_thread_seconds: float = 0.0
    utilization: float = 0.0  # the busy share, by the utilization law


@dataclass(frozen=True)
class Edge:
    """Who waits for whom: `waiter` waits on `resource`, held by `holder` when known."""

    waiter: str = ""  # stage name
    kind: EdgeKind = EdgeKind.LOCK
    resource: str = ""  # "queue decoded", "lock at file:line", "GIL"
    holder: str | None = None  # the stage waited for, when known
    share: float = 0.0  # of the waiter's samples


@dataclass(frozen=True)
class Structure:
    """One process's stages and its wait-for edges."""

    stages: tuple[Stage, ...] = ()
    edges: tuple[Edge, ...] = ()
    bottleneck: str | None = None  # stage name
    pipeline: bool = False  # two or more stages joined by a queue
    pid: int | None = None

    def stage(self, name: str) -> Stage | None:
        return next((s for s in self.stages if s.name == name), None)


@dataclass(frozen=True)
class CallSite:
    """A line of code in its function, where a call is made: the one that blocked an event loop,
    a thread's wait, the taking of a lock (model/knots.py)."""

    function: str = ""
    file: str = ""
    line: int = 0


@dataclass(frozen=True)
class Callback:
    """Where an event loop's busy samples were."""

    function: str = ""
    file: str = ""
    line: int = 0
    share: float = 0.0  # of the loop thread's samples
    kind: CallbackKind = CallbackKind.CPU
    call_site: CallSite | None = None
    detail: str = ""
    samples: int = 0
    phase: str = "other"  # the phase most of its samples were in (model / preprocess / ...)
    blocking: str = ""  # sleep / network / database / file, for blocking calls
    python_share: float = 0.0  # of its samples running Python (holding or wanting the GIL)


@dataclass(frozen=True)
class EventLoop:
    """One asyncio/uvloop loop thread and how its time went."""

    pid: int | None = None
    tid: int = 0
    thread: str = ""  # the thread's name
    flavor: LoopFlavor = LoopFlavor.ASYNCIO
    samples: int = 0
    idle_share: float = 0.0
    busy_share: float = 0.0
    app_share: float = 0.0  # synchronous work inside the app's coroutines and callbacks
    framework_share: float = 0.0
    cpu_share_os: float | None = None  # the thread's CPU time / window, from /proc
    callbacks: tuple[Callback, ...] = ()
    block_runs: int = 0  # stretches of consecutive samples inside one app coroutine
    # Estimated synchronous time per request, as bounds: at least the app time over the
    # process's write syscalls (a response takes one write or more), at most the mean stretch
    # (a stretch holds one request or several back to back). None where not measurable.
    est_block_per_request_s: float | None = None
    est_block_min_s: float | None = None
    est_block_max_s: float | None = None
    est_basis: str = ""
    interval_s: float = 0.0


@dataclass(frozen=True)
class TaskAwaitSite:
    """One place request tasks wait, over the window (model/await_sites.py builds it; the checks
    read it at full precision, the report writes it `rounded`)."""

    function: str = ""
    file: str = ""
    line: int = 0
    kind: AwaitKind = AwaitKind.UNKNOWN
    name: str = ""  # what the code calls the primitive at the site ("MODEL_SLOTS", "self.queue"); ""
    local: bool = False  # an in-process primitive (else a call outside the process)
    primitives: int = 1  # distinct objects waited on at the site
    waiting_avg: float = 0.0  # request tasks waiting here, averaged over the reads
    waiting_max: int = 0
    share: float = 0.0  # of request-task time
    # Tasks inside the `async with` block the site opens (holding the primitive), averaged over
    # the reads; None where the site opens no block.
    holders_avg: float | None = None
    permits_free: int | None = None  # fewest free permits read (a semaphore's _value)
    capacity: int | None = None  # holders + free permits of one read, the median over reads
    waiters_max: int | None = None  # the primitive's own waiter count, most seen (all tasks)
    detail: str = ""

    def rounded(self) -> TaskAwaitSite:
        """As the report writes it: averages to 3 places, the share to 4."""
        return replace(self, waiting_avg=round(self.waiting_avg, 3), share=round(self.share, 4),
                       holders_avg=None if self.holders_avg is None else round(self.holders_avg, 3))


@dataclass(frozen=True)
class ProcessTasks:
    """One process's asyncio tasks over the window by await site (model/await_sites.py
    summarize_tasks), or why they were not read (`unreadable`, written null when read)."""

    pid: int = 0
    python: str = ""
    snapshots: int = 0  # reads with tasks kept (torn ones included)
    torn: int = 0
    reads: int = 0
    failed_reads: int = 0
    read_seconds: float = 0.0
    unreadable: str = field(default="", metadata=NULL_WHEN_EMPTY)
    tasks_avg: float = 0.0  # every task, averaged over the reads
    request_tasks_avg: float = 0.0
    request_tasks_max: int = 0
    request_rule: str = ""  # how request tasks were told apart, in words
    local_share: float = 0.0  # of request-task time, on in-process primitives
    downstream_share: float = 0.0  # of request-task time, on calls outside the process
    sites: tuple[TaskAwaitSite, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def local_sites(self) -> tuple[TaskAwaitSite, ...]:
        return tuple(s for s in self.sites if s.local)

    @property
    def downstream_sites(self) -> tuple[TaskAwaitSite, ...]:
        return tuple(s for s in self.sites if not s.local)

    def rounded(self) -> ProcessTasks:
        """As the report writes it: seconds and shares to 4 places, averages to 3."""
        return replace(self, read_seconds=round(self.read_seconds, 4),
                       tasks_avg=round(self.tasks_avg, 3),
                       request_tasks_avg=round(self.request_tasks_avg, 3),
                       local_share=round(self.local_share, 4),
                       downstream_share=round(self.downstream_share, 4),
                       sites=tuple(s.rounded() for s in self.sites))


@dataclass(frozen=True)
class StackFrame:
    """A frame of a stack: the report's frames table, and the profile's interned frames
    (samples/profile.py `Frame`, this type under the name the sampling code reads)."""

    function: str
    file: str = ""
    line: int = 0
    native: bool = False

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass(frozen=True, kw_only=True)
class StackRow:
    """Samples of one distinct (stack, thread, state, leaf category); `stack` indexes
    `Stacks.frames`, root first."""

    stack: tuple[int, ...]
    tid: int | None = None
    thread: str = ""
    pid: int | None = None
    role: str = ""
    state: str = ""
    category: str = ""
    count: int


@dataclass(frozen=True)
class Stacks:
    """The samples as a table of distinct stacks: what pprof export, diff and push read."""

    frames: tuple[StackFrame, ...] = ()
    samples: tuple[StackRow, ...] = ()
    interval_s: float | None = None
