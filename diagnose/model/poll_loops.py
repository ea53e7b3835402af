"""Poll loops: request threads that sleep in a loop until another thread's work is done.

A request thread that hands its work to another thread (a batcher, a model thread) and then
checks for the result between sleeps (`while key not in results: time.sleep(0.02)`) waits, on
every request, up to the sleep's length after its result is ready. Its samples read as asleep in
`time.sleep`: the kernel sees a timer, and a timer looks like any wait outside the process. It is
not one: the process chose to sleep, and the thread that serves the wait (the one producing the
result) is inside it. The end of the chain is the sleep itself.

Found from the source: a sampled request-thread wait whose line calls `sleep(` (not `await`:
a coroutine's sleep is a request task's, model/async_polls.py) lexically inside a `while` loop
of the same function. A sleep on its own (a simulated call, a deliberate delay) or in a `for`
loop (a retry with backoff, a fixed number of steps) is not a poll. The files are read as the
analysis reads every source line (samples/source.py: regular files only, bounded, through a
live target's root).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection
from dataclasses import dataclass

import numpy as np
import pandas as pd

from diagnose.model.structure import is_entry
from diagnose.samples import source
from diagnose.samples.profile import Frame, Profile
from diagnose.vocab import ThreadState


@dataclass(frozen=True)
class PollLoop:
    """One line where request threads slept polling, over the window."""

    frame: int  # the sampled frame at the sleep (the sample table's site)
    function: str
    file: str
    line: int  # the sleep's line
    loop_line: int  # the `while` that repeats it
    samples: int  # request-thread samples asleep at the line
    share: float  # of the request threads' samples
    threads: int  # request threads seen asleep there


@dataclass(frozen=True)
class PollLoops:
    """The request threads' poll loops, most slept-in first."""

    loops: tuple[PollLoop, ...]
    request_samples: int
    request_threads: int  # the request threads and handler threads read, and the polling ones
    polling: frozenset[int] = frozenset()  # the threads seen polling (summary indices)

    @property
    def frames(self) -> list[int]:
        return [p.frame for p in self.loops]

    @property
    def share(self) -> float:
        """Of the request threads' samples, the share asleep in a poll loop."""
        return sum(p.share for p in self.loops)


@dataclass(frozen=True)
class AwaitedSleep:
    """An awaited sleep inside a `while` loop of its coroutine function (model/async_polls.py)."""

    loop_line: int  # the `while` that repeats it
    # The `while` sits inside another loop of the same function: a service loop (a connection's
    # `while True: read a request ...`) around the poll, not the coroutine's own pacing.
    nested: bool


@dataclass(frozen=True)
class _Sleeps:
    """A file's sleeps inside `while` loops: the threads' calls, and the coroutines' awaits."""

    called: dict[int, int]  # sleep line -> its `while` line
    awaited: dict[int, AwaitedSleep]  # each line of an awaited sleep -> its loop


# file -> (the source cache's lines it was parsed from, its sleeps in loops): parsed again when
# the source cache was cleared since (another target's files under the same names)
_loop_lines: dict[str, tuple[list[str], _Sleeps]] = {}


def _sleeps_in_while_loops(filename: str) -> dict[int, int]:
    """Each line of `filename` that calls a `sleep` lexically inside a `while` loop of its own
    function (not through a nested def), mapped to the loop's line; {} when unreadable."""
    return _sleeps_of(filename).called


def awaited_sleeps_in_while_loops(filename: str) -> dict[int, AwaitedSleep]:
    """Each line of an `await ...sleep(...)` (asyncio's, anyio's, trio's: any callable named
    `sleep`) lexically inside a `while` loop of its own coroutine function, mapped to the loop;
    {} when unreadable. `sleep(0)` yields to the event loop and waits for nothing: no poll."""
    return _sleeps_of(filename).awaited


def _sleeps_of(filename: str) -> _Sleeps:
    lines = source.lines(filename)
    cached = _loop_lines.get(filename)
    if cached is not None and cached[0] is lines:
        return cached[1]
    found = _Sleeps({}, {})
    try:
        tree = ast.parse("".join(lines)) if lines else None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    if tree is not None:
        _visit(tree, None, False, found)
    _loop_lines[filename] = (lines, found)
    return found


def _visit(node: ast.AST, loop: AwaitedSleep | None, in_loop: bool, found: _Sleeps) -> None:
    """`loop`: the innermost `while` around `node` in its function (None outside one, or inside
    a `for` nearer than it); `in_loop`: any loop of the function is around `node`."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            _visit(child, None, False, found)  # a nested def's body runs elsewhere: no loop around it
        elif isinstance(child, ast.Await):
            # a coroutine's sleep is the event loop's, not a thread's: a task's poll, if any
            if loop is not None and isinstance(child.value, ast.Call) and _calls_sleep(child.value) \
                    and not _yields_only(child.value):
                for line in range(child.lineno, (child.end_lineno or child.lineno) + 1):
                    found.awaited.setdefault(line, loop)
        elif isinstance(child, ast.While):
            _visit(child, AwaitedSleep(child.lineno, in_loop), True, found)
        elif isinstance(child, (ast.For, ast.AsyncFor)):
            _visit(child, None, True, found)  # a retry or a fixed number of steps, not a poll
        else:
            if loop is not None and isinstance(child, ast.Call) and _calls_sleep(child):
                found.called.setdefault(child.lineno, loop.loop_line)
            _visit(child, loop, in_loop, found)


def _yields_only(call: ast.Call) -> bool:
    """`sleep(0)`: a yield to the event loop (a long computation letting others run)."""
    return (len(call.args) == 1 and isinstance(call.args[0], ast.Constant) and call.args[0].value == 0
            and not call.keywords)


def _calls_sleep(call: ast.Call) -> bool:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name == "sleep"


def poll_loops(profile: Profile, samples: pd.DataFrame, workers: Collection[int], main_threads: Collection[int],
               frame: Callable[[int], Frame]) -> PollLoops:
    """The threads' samples asleep at a sleep inside a `while` loop that the thread's own code
    called (not its outermost loop: a periodic thread's `while True: ...; sleep(10)` runs right
    under the thread's start, a supervisor's at the script's top), by line. The share is of the
    samples of `workers` (request threads, a server's handler threads: summary indices) and of
    the polling threads, which spend too little of the window busy to be called request threads;
    `main_threads`: the processes' main threads (summary indices); `frame` names a frame id."""
    # A process's main thread polls for requests only where it serves them (a worker already):
    # otherwise its loop is the process's supervision (waiting for its children, a deadline).
    thread = samples["thread"]
    candidates = thread.isin(list(workers)).to_numpy() | ~thread.isin(list(main_threads)).to_numpy()
    asleep = samples[(samples["state"] == ThreadState.IO).to_numpy() & (samples["site"].to_numpy() >= 0)
                     & candidates]
    polls: dict[int, int] = {}  # site frame -> its loop's line, for the sites that poll
    polling_stacks: set[int] = set()
    for stack, site in asleep[["stack", "site"]].drop_duplicates().itertuples(index=False):
        named = frame(int(site))
        loop = _sleeps_in_while_loops(named.file).get(named.line) if named.line else None
        if loop is not None and _called_by_its_own_code(profile, int(stack), int(site)):
            polls[int(site)] = loop
            polling_stacks.add(int(stack))
    polled = asleep[asleep["stack"].isin(list(polling_stacks)).to_numpy()]
    polling = frozenset(int(t) for t in polled["thread"].unique())
    threads = set(workers) | polling
    total = int(samples.loc[thread.isin(list(threads)).to_numpy(), "count"].sum())
    if not total or polled.empty:
        return PollLoops((), total, len(threads))
    loops = []
    for site, rows in polled.groupby("site", sort=False):
        named = frame(int(site))
        n = int(rows["count"].sum())
        loops.append(PollLoop(int(site), named.function, named.file, named.line, polls[int(site)], n,
                              n / total, int(np.unique(rows["thread"].to_numpy()).size)))
    return PollLoops(tuple(sorted(loops, key=lambda p: -p.samples)), total, len(threads), polling)


# Frames that start a thread's or a process's own work: where a thread or a script starts
# (structure.is_entry: a module body, runpy), a thread's bootstrap (threading.py), a
# multiprocessing child's start (a forked child's stack keeps its parent's frames under it: only
# those after its start are its own).
_STARTS = ("threading.py", "multiprocessing/process.py", "multiprocessing/popen_fork.py")


def _is_start(f: Frame) -> bool:
    return is_entry(f.function, f.file) or f.file.endswith(_STARTS)


def _called_by_its_own_code(profile: Profile, stack: int, site: int) -> bool:
    """A frame after the thread's (or the process's) last start called the site's function:
    the loop is a step of the thread's work, not the thread's own loop (a worker process's
    `while running: ...; sleep(0.1)` right under its start is its supervision)."""
    frames = profile.stacks[stack]  # root first
    at = max((i for i, f in enumerate(frames) if f == site), default=-1)
    start = max((i for i, f in enumerate(frames[:at]) if _is_start(profile.frames[f])), default=-1)
    return at - start > 1
