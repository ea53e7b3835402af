"""Where a process's asyncio request tasks wait: the reads of collect/task_recording.py grouped by
await site, for the `async_wait` and `underloaded` checks and the report's event-loop view.

Request tasks: tasks that run the application's own code (a frame outside the standard library
and site-packages) called from a server framework's frames (uvicorn, starlette, aiohttp, ...:
event_loops.FRAMEWORK_PACKAGES). When no task of the recording passes through a framework (a
custom asyncio server), every task running the application's own code is one. The server's own
long-lived tasks (a lifespan queue, a connection waiting for its next request) run no
application code; the application's background tasks (a batcher, queue consumers) run no
framework code: neither is a request. One more kind runs no application code yet is a request:
a task in a framework's request cycle (uvicorn's `run_asgi`, Starlette's / FastAPI's
`request_response`) that waits for a worker thread, parked on the framework's capacity (AnyIO's
CapacityLimiter: a FastAPI `def` endpoint or `run_in_threadpool` before its thread is free), or
awaiting the thread that holds its token (AnyIO's `run_sync_in_worker_thread`, asyncio's
`to_thread`): the application's function runs in the thread, not in the coroutine.

The await site of a waiting task: its innermost frame in the application's own code (above the
asyncio library frames of `Semaphore.acquire`, `Queue.get`, ...); for a request that waits on a
framework's capacity without application code, the frame that entered the capacity (AnyIO's
`async with limiter` in `run_sync_in_worker_thread`). A framework primitive's waiters park on a
plain asyncio Event or future underneath; its frames (async_tasks.FRAMEWORK_PRIMITIVES) name
what they wait for. Waits are grouped by (site,
kind, primitive identity) for the primitives many tasks share (semaphore, lock, condition,
queue), by (site, kind) for those each waiter has its own of (a future a batcher resolves, an
event). A future or event the application awaits through a library's frames (a stream reader's
waiter inside an HTTP client) is a downstream call, not a local limit; so are IO and sleeps.

Shares are of request-task time: the waiting tasks summed over the reads over the request tasks
summed over the same reads (Little's law: the time-averaged count of requests in a state over
the count in flight is the share of each request's time spent in it).
"""

from __future__ import annotations

import ast
import functools
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from diagnose.samples import source
from diagnose.collect.task_recording import (CoroFrame, TaskRecording, TaskState,
                                        framework_primitive)
from diagnose.report.model.sections import ProcessTasks, TaskAwaitSite
from diagnose.vocab import AwaitKind
from diagnose.model.event_loops import FRAMEWORK_PACKAGES, frame_owner
from diagnose.samples.profile import Frame

# In-process primitives: a request parked on one waits on the process itself.
LOCAL_KINDS = frozenset({AwaitKind.SEMAPHORE, AwaitKind.LOCK, AwaitKind.CONDITION, AwaitKind.EVENT,
                         AwaitKind.QUEUE_GET, AwaitKind.QUEUE_PUT, AwaitKind.FUTURE,
                         AwaitKind.CAPACITY})
# Shared by their waiters: grouped by identity too (a future or an event may be one per waiter).
SHARED_KINDS = frozenset({AwaitKind.SEMAPHORE, AwaitKind.LOCK, AwaitKind.CONDITION,
                          AwaitKind.QUEUE_GET, AwaitKind.QUEUE_PUT, AwaitKind.CAPACITY})
# Calls outside the process: no local limit.
DOWNSTREAM_KINDS = frozenset({AwaitKind.IO, AwaitKind.SLEEP})
# asyncio's own glue between the application's await and the object it waits on.
_ASYNCIO_GLUE = re.compile(r"/asyncio/(locks|queues|tasks|futures|timeouts|mixins)\.py$")
_SITE_PACKAGES = re.compile(r"/(site|dist)-packages/([^/]+)")
# Frames of a server framework's request cycle (file suffix or package folder, qualified name):
# a task running through one is handling a request, application code called yet or not.
REQUEST_CYCLE_FRAMES = (
    ("uvicorn/protocols/", re.compile(r"(^|\.)run_asgi$")),
    ("hypercorn/", re.compile(r"(^|\.)(_handle|handle_request)$")),
    ("starlette/routing.py", re.compile(r"(^|\.)request_response\b")),
    ("fastapi/routing.py", re.compile(r"(^|\.)(request_response|get_request_handler)\b")),
)
# Where a coroutine hands its work to a thread and awaits it (the token of the capacity it took
# is held until the thread is done).
THREAD_HANDOFF_FRAMES = (
    ("anyio/_backends/_asyncio.py", re.compile(r"(^|\.)run_sync_in_worker_thread$")),
    ("asyncio/threads.py", re.compile(r"(^|\.)to_thread$")),
)

MAX_SITES = 12  # await sites kept per process (the heaviest): the report stays small
MAX_NAME = 80


# The loops of a framework's worker threads (the holders of a capacity's tokens): a thread whose
# stacks run one is such a worker; its samples outside the loop's own wait for work are a job.
WORKER_LOOP_FRAMES = (
    ("anyio/_backends/_asyncio.py", re.compile(r"(^|\.)WorkerThread\.run$")),
    ("concurrent/futures/thread.py", re.compile(r"(^|\.)_worker$")),
)


def _frame(f: CoroFrame) -> Frame:
    return Frame(f.function, f.file, f.line, False)


def is_own_code(f: CoroFrame) -> bool:
    """The application's own code: not the runtime, not an installed package."""
    return frame_owner(_frame(f)) == "app" and not _SITE_PACKAGES.search(f.file)


def is_framework(f: CoroFrame) -> bool:
    match = _SITE_PACKAGES.search(f.file)
    return match is not None and match.group(2).split(".")[0].removesuffix(".py") in FRAMEWORK_PACKAGES


def _in(f: CoroFrame, table: tuple[tuple[str, re.Pattern[str]], ...]) -> bool:
    path = f.file.replace("\\", "/")
    return any((path.endswith(where) or f"/{where}" in path) and pattern.search(f.function)
               for where, pattern in table)


@functools.lru_cache(maxsize=4096)
def _cycle_frame(f: CoroFrame) -> bool:
    return _in(f, REQUEST_CYCLE_FRAMES)


@functools.lru_cache(maxsize=4096)
def _primitive_frame(f: CoroFrame) -> AwaitKind | None:
    return framework_primitive(f.function, f.file)


def in_request_cycle(task: TaskState) -> bool:
    """The task runs through a server framework's request-handling frames."""
    return any(_cycle_frame(f) for f in task.frames)


def framework_wait(task: TaskState, parked: bool = True) -> tuple[int, AwaitKind] | None:
    """(index of the frame that entered a framework primitive, the primitive's kind) for a task
    parked in one (nothing but the primitive's and asyncio's frames below it); else None.
    `parked=False`: also a task standing there ready to run (woken: the token is its own)."""
    if parked and task.waits_on is None:
        return None
    frames = task.frames
    for i in range(len(frames) - 1, -1, -1):
        kind = _primitive_frame(frames[i])
        if kind is None:
            if _ASYNCIO_GLUE.search(frames[i].file):
                continue
            return None
        k = i
        while k > 0 and _primitive_frame(frames[k - 1]) is not None:
            k -= 1
        return (k - 1, kind) if k > 0 else None
    return None


def in_worker_thread(task: TaskState, parked: bool = True) -> bool:
    """The task awaits the thread it handed its work to (its innermost frame, asyncio's glue
    aside, is a hand-off frame); `parked=False`: or stands there ready to run (its thread done,
    the token still its own)."""
    if parked and task.waits_on is None:
        return False
    for f in reversed(task.frames):
        if _ASYNCIO_GLUE.search(f.file):
            continue
        return _in(f, THREAD_HANDOFF_FRAMES)
    return False


def _own_site(task: TaskState) -> int | None:
    for i in range(len(task.frames) - 1, -1, -1):
        if is_own_code(task.frames[i]):
            return i
    return None


def thread_bound(task: TaskState) -> bool:
    """A request that runs no application code because its work goes to a worker thread: in a
    framework's request cycle, parked on the framework's capacity or awaiting its thread."""
    if _own_site(task) is not None or not in_request_cycle(task):
        return False
    # Ready to run counts too: a woken waiter or a holder whose thread is done is in flight.
    return in_worker_thread(task, parked=False) or framework_wait(task, parked=False) is not None


def site_index(task: TaskState) -> int | None:
    """Index in `task.frames` of its await site: the innermost frame of the application's own
    code; for a request parked on a framework's capacity without application code, the frame
    that entered it; None otherwise."""
    own = _own_site(task)
    if own is not None:
        return own
    if in_request_cycle(task):
        parked = framework_wait(task)
        if parked is not None:
            return parked[0]
    return None


def wait_kind(task: TaskState) -> AwaitKind | None:
    """What the task waits on: the framework primitive its frames show, else what the reader
    named."""
    if task.waits_on is None:
        return None
    parked = framework_wait(task)
    return parked[1] if parked is not None else task.waits_on.kind


def _awaited_directly(task: TaskState, site: int) -> bool:
    """Nothing but asyncio's glue between the site and what it waits on; `asyncio.to_thread`
    counts as glue: it is run_in_executor on the default executor, whose threads resolve the
    future in the process."""
    return all(_ASYNCIO_GLUE.search(f.file) or _in(f, _EXECUTOR_HANDOFF) for f in task.frames[site + 1:])


_EXECUTOR_HANDOFF = (("asyncio/threads.py", re.compile(r"(^|\.)to_thread$")),)


def is_local(task: TaskState, site: int) -> bool:
    """Waits on an in-process primitive (see the module docstring)."""
    kind = wait_kind(task)
    if kind is None or kind not in LOCAL_KINDS:
        return False
    if kind in SHARED_KINDS:
        return True
    if _own_site(task) is None and in_worker_thread(task):
        return False  # its thread runs the work: what the thread waits on is the threads' to say
    return _awaited_directly(task, site)


def is_downstream(task: TaskState, site: int) -> bool:
    kind = wait_kind(task)
    if kind is None:
        return False
    if _own_site(task) is None and in_worker_thread(task):
        return False
    return kind in DOWNSTREAM_KINDS or (kind in LOCAL_KINDS and not is_local(task, site))


# What the code calls the primitive at the await site, per kind: the expression before the
# method awaited, or after `async with` / `await`.
_NAME = r"([A-Za-z_][\w.]*(?:\[[^\]\n]{0,40}\])?)"
_ASYNC_WITH = re.compile(r"async\s+with\s+" + _NAME)
_METHOD = {
    AwaitKind.SEMAPHORE: ("acquire",), AwaitKind.LOCK: ("acquire",),
    AwaitKind.CONDITION: ("wait", "wait_for", "acquire"), AwaitKind.EVENT: ("wait",),
    AwaitKind.QUEUE_GET: ("get",), AwaitKind.QUEUE_PUT: ("put", "join"),
}
_AWAIT_WRAPPED = re.compile(r"await\s+asyncio\.(?:wait_for|shield)\(\s*" + _NAME)
_AWAIT = re.compile(r"await\s+" + _NAME + r"\s*(?:$|[)\],;#])")
_AWAIT_CALL = re.compile(r"await\s+" + _NAME + r"\s*\(")


def primitive_name(line: str, kind: AwaitKind) -> str:
    """The name the code gives the primitive on source line `line` ("" when it cannot tell)."""
    text = line.strip()
    if not text:
        return ""
    found = None
    if kind in (AwaitKind.SEMAPHORE, AwaitKind.LOCK, AwaitKind.CONDITION, AwaitKind.CAPACITY):
        found = _ASYNC_WITH.search(text)
    for method in _METHOD.get(kind, ()):
        found = found or re.search(r"await\s+" + _NAME + r"\." + method + r"\s*\(", text)
    found = found or _AWAIT_WRAPPED.search(text) or _AWAIT.search(text) or _AWAIT_CALL.search(text)
    return found.group(1)[:MAX_NAME] if found else ""


def guarded_lines(file: str, line: int, trees: dict[str, ast.Module | None] | None = None) -> range | None:
    """The body of the `async with` (or `with`) statement whose header is on `line`, read from
    the source; None when the line opens no such block or the source cannot be parsed.
    `trees`: parsed files by name, kept by the caller across calls."""
    trees = {} if trees is None else trees
    if file not in trees:
        try:
            trees[file] = ast.parse(source.text(file)) if source.text(file) else None
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            trees[file] = None
    tree = trees[file]
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.AsyncWith, ast.With)) and node.lineno == line and node.body:
            return range(node.body[0].lineno, (node.end_lineno or node.body[-1].lineno) + 1)
    return None


def request_filter(recording: TaskRecording) -> tuple[Callable[[TaskState], bool], str]:
    """(is this task a request?, the rule in words)."""
    def under_framework(t: TaskState) -> bool:
        return (_own_site(t) is not None and any(is_framework(f) for f in t.frames)) or thread_bound(t)

    framework_seen = any(under_framework(t) for snap in recording.snapshots for t in snap.tasks)
    if framework_seen:
        return (under_framework,
                "tasks running the application's code under the server framework's request "
                "handling, or waiting for the framework's worker threads that run it")
    return (lambda t: _own_site(t) is not None,
            "tasks running the application's own code (no server framework's frames were seen)")


class _AnyLineBut:
    """Every line of a function but one (`line in _AnyLineBut(n)`)."""

    def __init__(self, line: int) -> None:
        self.line = line

    def __contains__(self, other: object) -> bool:
        return other != self.line


def _primitive_words(task: TaskState) -> str:
    """What the framework primitive a task is parked on is, from its frames ("anyio
    CapacityLimiter")."""
    for f in reversed(task.frames):
        if _primitive_frame(f) is not None:
            owner = f.function.rsplit(".", 1)[0].rsplit(".", 1)[-1]
            package = _SITE_PACKAGES.search(f.file.replace("\\", "/"))
            return (f"{package.group(2).split('.')[0]} {owner}" if package else owner)[:MAX_NAME]
    return ""


# An await site: (file, line, function, what is awaited, in-process, the primitive's address
# for a shared primitive else 0)
_SiteKey = tuple[str, int, str, AwaitKind, bool, int]


def summarize_tasks(recording: TaskRecording) -> ProcessTasks:
    """One process's task recording by await site: each read's request tasks tallied where they
    wait (_tally_reads), then each site's averages, holders and capacity (_await_site)."""
    snaps = recording.snapshots
    n = len(snaps)
    is_request, rule = request_filter(recording)
    reads = _tally_reads(recording, is_request)
    in_flight = reads.in_flight
    observed = sum(in_flight)
    trees: dict[str, ast.Module | None] = {}
    sites = [_await_site(reads, key, per_read, observed, trees) for key, per_read in reads.counts.items()]
    sites.sort(key=lambda s: (-s.share, s.file, s.line))
    local_share = sum(s.share for s in sites if s.local)
    downstream_share = sum(s.share for s in sites if not s.local)
    return ProcessTasks(
        pid=recording.pid, python=recording.python, snapshots=n,
        torn=sum(1 for s in snaps if s.torn), reads=recording.reads,
        failed_reads=recording.failed_reads, read_seconds=recording.read_seconds,
        unreadable=recording.unreadable,
        tasks_avg=sum(len(s.tasks) for s in snaps) / n if n else 0.0,
        request_tasks_avg=observed / n if n else 0.0, request_tasks_max=max(in_flight, default=0),
        request_rule=rule, local_share=local_share, downstream_share=downstream_share,
        sites=tuple(sites[:MAX_SITES]), notes=tuple(recording.notes))


@dataclass(frozen=True)
class _Reads:
    """The request tasks of every read, tallied by the await site they wait at (a per-read list
    holds one entry per read, by the read's index)."""

    n: int  # reads
    counts: dict[_SiteKey, list[int]]  # tasks waiting at the site, per read
    identities: dict[_SiteKey, set[int]]  # the primitives' addresses seen there
    free: dict[_SiteKey, list[int]]  # free permits, each time read
    free_by_read: dict[_SiteKey, dict[int, int]]  # read index -> fewest free
    waiters: dict[_SiteKey, list[int]]  # the primitive's own waiter count, each time read
    details: dict[_SiteKey, Counter[str]]  # what the primitive is, in words
    in_flight: list[int]  # request tasks, per read
    positions: list[list[tuple[CoroFrame, ...]]]  # request tasks' frames, per read
    woken: list[Counter[tuple[str, int, str]]]  # ready at an entry, per read

    @classmethod
    def empty(cls, n: int) -> _Reads:
        return cls(n=n, counts=defaultdict(lambda: [0] * n), identities=defaultdict(set),
                   free=defaultdict(list), free_by_read=defaultdict(dict), waiters=defaultdict(list),
                   details=defaultdict(Counter), in_flight=[0] * n,
                   positions=[[] for _ in range(n)], woken=[Counter() for _ in range(n)])


def _tally_reads(recording: TaskRecording, is_request: Callable[[TaskState], bool]) -> _Reads:
    """Each read's request tasks: where they stand, those woken in a framework primitive, and
    where each waits (_tally_wait)."""
    reads = _Reads.empty(len(recording.snapshots))
    for i, snap in enumerate(recording.snapshots):
        for task in snap.tasks:
            if task.done or not is_request(task):
                continue
            reads.in_flight[i] += 1
            reads.positions[i].append(task.frames)
            if task.waits_on is None:
                entered = framework_wait(task, parked=False)
                if entered is not None:  # woken in the primitive: it holds what it waited for
                    f = task.frames[entered[0]]
                    reads.woken[i][(f.file, f.line, f.function)] += 1
            _tally_wait(reads, i, task)
    return reads


def _tally_wait(reads: _Reads, i: int, task: TaskState) -> None:
    """One request task of read `i` at the await site it waits at, in-process or downstream,
    with what the reader saw of the primitive (its permits, waiters, words)."""
    site = site_index(task)
    target = task.waits_on
    kind = wait_kind(task)
    if site is None or target is None or kind is None:
        return
    local = is_local(task, site)
    if not local and not is_downstream(task, site):
        return
    where = task.frames[site]
    shared = kind in SHARED_KINDS
    # The reader's identity is the primitive's only where it named the same kind (a
    # framework primitive's waiters each park on an Event of their own).
    identity = target.identity if kind == target.kind else 0
    key = (where.file, where.line, where.function, kind, local,
           identity if shared else 0)
    reads.counts[key][i] += 1
    if identity:
        reads.identities[key].add(identity)
    if kind != target.kind and not target.detail:
        reads.details[key][_primitive_words(task)] += 1
    if target.permits is not None and kind == target.kind:
        reads.free[key].append(target.permits)
        read_free = reads.free_by_read[key]
        read_free[i] = min(read_free.get(i, target.permits), target.permits)
    if target.waiters is not None and kind == target.kind:
        reads.waiters[key].append(target.waiters)
    if target.detail:
        reads.details[key][target.detail[:MAX_NAME]] += 1


def _await_site(reads: _Reads, key: _SiteKey, per_read: list[int], observed: int,
                trees: dict[str, ast.Module | None]) -> TaskAwaitSite:
    """One site over the window: its waiters on average and at most, its share of request-task
    time, and, for a primitive that opens a block, its holders and capacity."""
    file, line, function, kind, local, _ = key
    n = reads.n
    holders_avg, capacity = _holders_and_capacity(reads, key, per_read, trees)
    total = sum(per_read)
    identities, free, waiters, details = (reads.identities[key], reads.free[key],
                                          reads.waiters[key], reads.details[key])
    return TaskAwaitSite(
        function=function, file=file, line=line, kind=kind,
        name=primitive_name(source.getline(file, line), kind), local=local,
        primitives=max(1, len(identities)) if identities else 1,
        waiting_avg=total / n if n else 0.0, waiting_max=max(per_read, default=0),
        share=total / observed if observed else 0.0, holders_avg=holders_avg,
        permits_free=min(free) if free else None, capacity=capacity,
        waiters_max=max(waiters) if waiters else None,
        detail=details.most_common(1)[0][0] if details else "")


def _holders_and_capacity(reads: _Reads, key: _SiteKey, per_read: list[int],
                          trees: dict[str, ast.Module | None]) -> tuple[float | None, int | None]:
    """(tasks inside the block the site opens on average, the primitive's permits in all), each
    None where the site opens no block (or its permits cannot be told)."""
    file, line, function, kind, local, _ = key
    n = reads.n
    capacity = None
    body: range | _AnyLineBut | None = (guarded_lines(file, line, trees)
                                        if local and kind in SHARED_KINDS else None)
    if body is None and local and kind == AwaitKind.CAPACITY:
        # The source that opens the capacity is not readable: its holders are the tasks
        # standing elsewhere in the same function (past the acquire).
        body = _AnyLineBut(line)
    if body is None:
        return None, None
    holding = [sum(1 for chain in reads.positions[i]
                   if any(f.file == file and f.function == function and f.line in body
                          for f in chain))
               + (reads.woken[i][(file, line, function)] if kind == AwaitKind.CAPACITY else 0)
               for i in range(n)]
    holders_avg = sum(holding) / n if n else 0.0
    free_by_read = reads.free_by_read[key]
    if kind == AwaitKind.CAPACITY and not free_by_read:
        # Its free tokens are not read, but a framework queues a request only when none
        # is free: in a read where requests wait, the holders are every token.
        full = sorted(holding[i] for i in range(n) if per_read[i] > 0 and holding[i] > 0)
        capacity = full[len(full) // 2] if full else None
    if free_by_read:
        # A read's free permits beside the holders of that same read: the permits in all.
        # A read is not atomic (tasks move while it walks them: one that left the block
        # and one that entered can both be counted), so the median over reads, not the
        # most, is the capacity.
        permits = sorted(holding[i] + f for i, f in free_by_read.items())
        capacity = permits[len(permits) // 2]
    return holders_avg, capacity
