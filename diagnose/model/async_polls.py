"""Async poll loops: request tasks that await a sleep in a loop until another task's or thread's
work is done.

The asyncio form of model/poll_loops.py: a request coroutine hands its job to a batcher or a
model thread, then looks for the result between sleeps (`while key not in results: await
asyncio.sleep(0.02)`). Every request waits up to the sleep's length after its result is ready;
the event loop, meanwhile, sits idle in its selector, and the tasks' await site reads as a sleep:
a wait outside the process, or a service waiting for work. It is the process's own wait.

Found from the tasks read in flight (collect/task_recording.py) and the source: a request task
(model/await_sites.py's notion: under a server framework's request handling, else any task
running the application's code) whose await site is an awaited sleep lexically inside a `while`
loop of the same coroutine function (poll_loops.awaited_sleeps_in_while_loops). Not a poll: the
task's own pacing loop, a periodic task's `while True: ...; await asyncio.sleep(1)` right at
the task's outermost coroutine. A loop there is a poll only inside another loop of the function
(a connection handler's `while True:` reading requests, polling for each one's result).

Shares are of request-task time, as await_sites' are (Little's law over the reads), less the
tasks parked all window: a task seen in every read at one line of its outermost coroutine (the
service's main coroutine awaiting its tasks or a stop event, a periodic task between rounds, an
idle connection waiting for its next request) is not a request in flight, as a thread parked all
window in one wait is not a request thread (model/analysis.py). Without a server framework
await_sites counts those as requests; here they would dilute each request's share of its time.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from diagnose.collect.task_recording import TaskRecording, TaskState
from diagnose.model.await_sites import request_filter, site_index
from diagnose.model.poll_loops import AwaitedSleep, awaited_sleeps_in_while_loops


@dataclass(frozen=True)
class AsyncPoll:
    """One line where request tasks awaited a sleep polling, over the window."""

    function: str
    file: str
    line: int  # the awaited sleep's line
    loop_line: int  # the `while` that repeats it
    share: float  # of request-task time
    waiting_avg: float  # request tasks there, on average over the reads
    waiting_max: int
    tasks: int  # request tasks seen there


@dataclass(frozen=True)
class AsyncPolls:
    """A process's request tasks' poll loops, most awaited-in first."""

    loops: tuple[AsyncPoll, ...] = ()
    reads: int = 0
    request_tasks_avg: float = 0.0

    @property
    def share(self) -> float:
        """Of request-task time, the share awaiting a poll's sleep."""
        return sum(p.share for p in self.loops)

    @property
    def sites(self) -> frozenset[tuple[str, int]]:
        """(file, line) of each poll's sleep."""
        return frozenset((p.file, p.line) for p in self.loops)


# asyncio's own coroutines: above a task's first coroutine only where the task wraps another.
_ASYNCIO = re.compile(r"/asyncio/[^/]+\.py$")


def async_polls(recording: TaskRecording | None) -> AsyncPolls:
    """The request tasks of every read standing at a poll's awaited sleep (_poll_of), by line,
    of the request tasks in flight (_Tally: those parked all window left out)."""
    if recording is None or not recording.snapshots:
        return AsyncPolls()
    is_request, _ = request_filter(recording)
    n = len(recording.snapshots)
    tally = _Tally(n)
    for i, snap in enumerate(recording.snapshots):
        for task in snap.tasks:
            if not task.done and is_request(task):
                tally.add(i, task)
    observed = tally.in_flight()
    if not observed:
        return AsyncPolls(reads=n)
    loops = [AsyncPoll(function, file, line, loop_line, sum(counts) / observed, sum(counts) / n,
                       max(counts), len(tally.tasks[(file, line, function, loop_line)]))
             for (file, line, function, loop_line), counts in tally.per_read.items()]
    loops.sort(key=lambda p: (-p.share, p.file, p.line))
    return AsyncPolls(tuple(loops), n, observed / n)


_Poll = tuple[str, int, str, int]  # (file, line, function, the loop's line)


class _Tally:
    """Request tasks over the reads: those at each poll per read, and where each stood."""

    def __init__(self, reads: int) -> None:
        self.reads = reads
        self.per_read: dict[_Poll, list[int]] = defaultdict(lambda: [0] * reads)
        self.tasks: dict[_Poll, set[int]] = defaultdict(set)
        self.seen: dict[int, int] = defaultdict(int)  # task -> reads it was seen in
        # task -> the lines of its outermost coroutine it stood at, None once seen elsewhere
        self.outermost: dict[int, set[tuple[str, int]] | None] = {}

    def add(self, read: int, task: TaskState) -> None:
        self.seen[task.task_id] += 1
        poll = _poll_of(task)
        if poll is not None:
            self.per_read[poll][read] += 1
            self.tasks[poll].add(task.task_id)
        lines = self.outermost.setdefault(task.task_id, set())
        if lines is not None:
            if poll is None and site_index(task) == 0:
                lines.add((task.frames[0].file, task.frames[0].line))
            else:
                self.outermost[task.task_id] = None

    def in_flight(self) -> int:
        """Observations of request tasks, less those of the tasks parked all window: seen in
        every read, always at the same line of their outermost coroutine."""
        parked = sum(seen for task, seen in self.seen.items()
                     if seen == self.reads and len(self.outermost.get(task) or ()) == 1)
        return sum(self.seen.values()) - parked


def _poll_of(task: TaskState) -> tuple[str, int, str, int] | None:
    """(file, line, function, the loop's line) of the poll the task stands in, else None."""
    site = site_index(task)
    if site is None:
        return None
    frame = task.frames[site]
    sleep: AwaitedSleep | None = awaited_sleeps_in_while_loops(frame.file).get(frame.line)
    if sleep is None:
        return None
    if not sleep.nested and not _awaited_by_the_task(task, site):
        return None  # the task's own pacing loop: a periodic task, not a request's poll
    return frame.file, frame.line, frame.function, sleep.loop_line


def _awaited_by_the_task(task: TaskState, site: int) -> bool:
    """A coroutine of the task (a framework's request cycle, the application's own) awaited the
    site's: it is a step of the task's work, not the task's outermost coroutine."""
    return any(not _ASYNCIO.search(f.file.replace("\\", "/")) for f in task.frames[:site])
