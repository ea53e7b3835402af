"""Where a process's asyncio request tasks wait: the reads of model/async_tasks.py grouped by
await site, for the `async_wait` and `underloaded` checks and the report's event-loop view.

Request tasks: tasks that run the application's own code (a frame outside the standard library
and site-packages) called from a server framework's frames (uvicorn, starlette, aiohttp, ...:
event_loops.FRAMEWORK_PACKAGES). When no task of the recording passes through a framework (a
custom asyncio server), every task running the application's own code is one. The server's own
long-lived tasks (a lifespan queue, a connection waiting for its next request) run no
application code; the application's background tasks (a batcher, queue consumers) run no
framework code: neither is a request.

The await site of a waiting task: its innermost frame in the application's own code (above the
asyncio library frames of `Semaphore.acquire`, `Queue.get`, ...). Waits are grouped by (site,
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
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from diagnose.model import source
from diagnose.model.async_tasks import AwaitKind, CoroFrame, TaskRecording, TaskState
from diagnose.model.event_loops import FRAMEWORK_PACKAGES, frame_owner
from diagnose.model.profile import Frame

# In-process primitives: a request parked on one waits on the process itself.
LOCAL_KINDS = frozenset({AwaitKind.SEMAPHORE, AwaitKind.LOCK, AwaitKind.CONDITION, AwaitKind.EVENT,
                         AwaitKind.QUEUE_GET, AwaitKind.QUEUE_PUT, AwaitKind.FUTURE})
# Shared by their waiters: grouped by identity too (a future or an event may be one per waiter).
SHARED_KINDS = frozenset({AwaitKind.SEMAPHORE, AwaitKind.LOCK, AwaitKind.CONDITION,
                          AwaitKind.QUEUE_GET, AwaitKind.QUEUE_PUT})
# Calls outside the process: no local limit.
DOWNSTREAM_KINDS = frozenset({AwaitKind.IO, AwaitKind.SLEEP})
# asyncio's own glue between the application's await and the object it waits on.
_ASYNCIO_GLUE = re.compile(r"/asyncio/(locks|queues|tasks|futures|timeouts|mixins)\.py$")
_SITE_PACKAGES = re.compile(r"/(site|dist)-packages/([^/]+)")

MAX_SITES = 12  # await sites kept per process (the heaviest): the report stays small
MAX_NAME = 80


@dataclass(frozen=True)
class AwaitSite:
    """One place request tasks wait, over the window."""

    function: str
    file: str
    line: int
    kind: AwaitKind
    name: str  # what the code calls the primitive at the site ("MODEL_SLOTS", "self.queue"); ""
    local: bool  # an in-process primitive (else a call outside the process)
    primitives: int  # distinct objects waited on at the site
    waiting_avg: float  # request tasks waiting here, averaged over the reads
    waiting_max: int
    share: float  # of request-task time
    # Tasks inside the `async with` block the site opens (holding the primitive), averaged over
    # the reads; None where the site opens no block.
    holders_avg: float | None = None
    permits_free: int | None = None  # fewest free permits read (a semaphore's _value)
    capacity: int | None = None  # holders + free permits of one read, the median over reads
    waiters_max: int | None = None  # the primitive's own waiter count, most seen (all tasks)
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"function": self.function, "file": self.file, "line": self.line,
                "kind": str(self.kind), "name": self.name, "local": self.local,
                "primitives": self.primitives, "waiting_avg": round(self.waiting_avg, 3),
                "waiting_max": self.waiting_max, "share": round(self.share, 4),
                "holders_avg": None if self.holders_avg is None else round(self.holders_avg, 3),
                "permits_free": self.permits_free, "capacity": self.capacity,
                "waiters_max": self.waiters_max, "detail": self.detail}


@dataclass(frozen=True)
class TaskSummary:
    """One process's asyncio tasks over the window, by await site."""

    pid: int
    python: str
    snapshots: int  # reads with tasks kept (torn ones included)
    torn: int
    reads: int
    failed_reads: int
    read_seconds: float
    unreadable: str
    tasks_avg: float  # every task, averaged over the reads
    request_tasks_avg: float
    request_tasks_max: int
    request_rule: str  # how request tasks were told apart, in words
    local_share: float  # of request-task time, on in-process primitives
    downstream_share: float  # of request-task time, on calls outside the process
    sites: tuple[AwaitSite, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def local_sites(self) -> tuple[AwaitSite, ...]:
        return tuple(s for s in self.sites if s.local)

    @property
    def downstream_sites(self) -> tuple[AwaitSite, ...]:
        return tuple(s for s in self.sites if not s.local)

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "python": self.python, "snapshots": self.snapshots,
                "torn": self.torn, "reads": self.reads, "failed_reads": self.failed_reads,
                "read_seconds": round(self.read_seconds, 4), "unreadable": self.unreadable or None,
                "tasks_avg": round(self.tasks_avg, 3),
                "request_tasks_avg": round(self.request_tasks_avg, 3),
                "request_tasks_max": self.request_tasks_max, "request_rule": self.request_rule,
                "local_share": round(self.local_share, 4),
                "downstream_share": round(self.downstream_share, 4),
                "sites": [s.to_dict() for s in self.sites], "notes": list(self.notes)}


def _frame(f: CoroFrame) -> Frame:
    return Frame(f.function, f.file, f.line, False)


def is_own_code(f: CoroFrame) -> bool:
    """The application's own code: not the runtime, not an installed package."""
    return frame_owner(_frame(f)) == "app" and not _SITE_PACKAGES.search(f.file)


def is_framework(f: CoroFrame) -> bool:
    match = _SITE_PACKAGES.search(f.file)
    return match is not None and match.group(2).split(".")[0].removesuffix(".py") in FRAMEWORK_PACKAGES


def site_index(task: TaskState) -> int | None:
    """Index in `task.frames` of its await site: the innermost frame of the application's own
    code; None when the task runs none."""
    for i in range(len(task.frames) - 1, -1, -1):
        if is_own_code(task.frames[i]):
            return i
    return None


def _awaited_directly(task: TaskState, site: int) -> bool:
    """Nothing but asyncio's glue between the site and what it waits on."""
    return all(_ASYNCIO_GLUE.search(f.file) for f in task.frames[site + 1:])


def is_local(task: TaskState, site: int) -> bool:
    """Waits on an in-process primitive (see the module docstring)."""
    target = task.waits_on
    if target is None or target.kind not in LOCAL_KINDS:
        return False
    if target.kind in SHARED_KINDS:
        return True
    return _awaited_directly(task, site)


def is_downstream(task: TaskState, site: int) -> bool:
    target = task.waits_on
    if target is None:
        return False
    return target.kind in DOWNSTREAM_KINDS or (target.kind in LOCAL_KINDS and not is_local(task, site))


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
    if kind in (AwaitKind.SEMAPHORE, AwaitKind.LOCK, AwaitKind.CONDITION):
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
    framework_seen = any(any(is_framework(f) for f in t.frames) and site_index(t) is not None
                         for snap in recording.snapshots for t in snap.tasks)
    if framework_seen:
        return (lambda t: site_index(t) is not None and any(is_framework(f) for f in t.frames),
                "tasks running the application's code under the server framework's request handling")
    return (lambda t: site_index(t) is not None,
            "tasks running the application's own code (no server framework's frames were seen)")


# An await site: (file, line, function, what is awaited, in-process, the primitive's address
# for a shared primitive else 0)
_SiteKey = tuple[str, int, str, AwaitKind, bool, int]


def summarize_tasks(recording: TaskRecording) -> TaskSummary:
    snaps = recording.snapshots
    n = len(snaps)
    is_request, rule = request_filter(recording)
    counts: dict[_SiteKey, list[int]] = defaultdict(lambda: [0] * n)
    identities: dict[_SiteKey, set[int]] = defaultdict(set)
    frames: dict[_SiteKey, CoroFrame] = {}
    free: dict[_SiteKey, list[int]] = defaultdict(list)
    free_by_read: dict[_SiteKey, dict[int, int]] = defaultdict(dict)  # read index -> fewest free
    waiters: dict[_SiteKey, list[int]] = defaultdict(list)
    details: dict[_SiteKey, Counter[str]] = defaultdict(Counter)
    in_flight = [0] * n
    positions: list[list[tuple[CoroFrame, ...]]] = [[] for _ in range(n)]  # request tasks' frames
    for i, snap in enumerate(snaps):
        for task in snap.tasks:
            if task.done or not is_request(task):
                continue
            in_flight[i] += 1
            positions[i].append(task.frames)
            site = site_index(task)
            target = task.waits_on
            if site is None or target is None:
                continue
            local = is_local(task, site)
            if not local and not is_downstream(task, site):
                continue
            where = task.frames[site]
            shared = target.kind in SHARED_KINDS
            key = (where.file, where.line, where.function, target.kind, local,
                   target.identity if shared else 0)
            counts[key][i] += 1
            frames[key] = where
            if target.identity:
                identities[key].add(target.identity)
            if target.permits is not None:
                free[key].append(target.permits)
                read_free = free_by_read[key]
                read_free[i] = min(read_free.get(i, target.permits), target.permits)
            if target.waiters is not None:
                waiters[key].append(target.waiters)
            if target.detail:
                details[key][target.detail[:MAX_NAME]] += 1
    observed = sum(in_flight)
    sites = []
    trees: dict[str, ast.Module | None] = {}
    for key, per_read in counts.items():
        file, line, function, kind, local, _ = key
        holders_avg, capacity = None, None
        body = guarded_lines(file, line, trees) if local and kind in SHARED_KINDS else None
        if body is not None:
            holding = [sum(1 for chain in positions[i]
                           if any(f.file == file and f.function == function and f.line in body
                                  for f in chain))
                       for i in range(n)]
            holders_avg = sum(holding) / n if n else 0.0
            if free_by_read[key]:
                # A read's free permits beside the holders of that same read: the permits in all.
                # A read is not atomic (tasks move while it walks them: one that left the block
                # and one that entered can both be counted), so the median over reads, not the
                # most, is the capacity.
                permits = sorted(holding[i] + f for i, f in free_by_read[key].items())
                capacity = permits[len(permits) // 2]
        total = sum(per_read)
        sites.append(AwaitSite(
            function=function, file=file, line=line, kind=kind,
            name=primitive_name(source.getline(file, line), kind), local=local,
            primitives=max(1, len(identities[key])) if identities[key] else 1,
            waiting_avg=total / n if n else 0.0, waiting_max=max(per_read, default=0),
            share=total / observed if observed else 0.0, holders_avg=holders_avg,
            permits_free=min(free[key]) if free[key] else None, capacity=capacity,
            waiters_max=max(waiters[key]) if waiters[key] else None,
            detail=details[key].most_common(1)[0][0] if details[key] else ""))
    sites.sort(key=lambda s: (-s.share, s.file, s.line))
    local_share = sum(s.share for s in sites if s.local)
    downstream_share = sum(s.share for s in sites if not s.local)
    return TaskSummary(
        pid=recording.pid, python=recording.python, snapshots=n,
        torn=sum(1 for s in snaps if s.torn), reads=recording.reads,
        failed_reads=recording.failed_reads, read_seconds=recording.read_seconds,
        unreadable=recording.unreadable,
        tasks_avg=sum(len(s.tasks) for s in snaps) / n if n else 0.0,
        request_tasks_avg=observed / n if n else 0.0, request_tasks_max=max(in_flight, default=0),
        request_rule=rule, local_share=local_share, downstream_share=downstream_share,
        sites=tuple(sites[:MAX_SITES]), notes=tuple(recording.notes))
