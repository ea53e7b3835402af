"""poll_loop: requests sleep in a loop, polling for a result another thread or task produces.

What it finds:
    The share of request-thread time asleep at a `sleep(...)` call inside a `while` loop of the
    service's own code (model/poll_loops.py: read from the source at the sampled line), e.g.
    `while key not in results: time.sleep(0.02)` after handing the request to a model thread.
    A sleep on its own (a simulated call, a deliberate delay) or in a `for` loop (a retry with
    backoff) is not a poll. Where the asyncio tasks were read (`attach`), the same in a request
    coroutine: the share of request-task time awaiting a sleep (`await asyncio.sleep(0.02)`,
    anyio's, trio's) inside a `while` loop of the same coroutine (model/async_polls.py); a
    periodic task's own `while True: ...; await asyncio.sleep(1)` is not a poll. The evidence
    says which polled, threads or tasks; where both did, the larger share leads.

Why it matters:
    The kernel sees a timer, and a profile a thread "waiting on IO" or an event loop idle in its
    selector: it reads like a call outside the process, and the service like one waiting for
    work. It is the process's own wait: every request sleeps up to the poll's length after its
    result is ready, and its thread (or its task, and the connection it serves) is held that
    long. With a fixed number of requests in flight, the sleep caps the throughput.

What to do instead:
    Wait on the result itself: a `threading.Event` or `Condition` set by the producer, a
    `concurrent.futures.Future` it completes (`future.result()`), or a `queue.Queue` per request
    it puts to. In a coroutine, await it: an `asyncio.Future` the producer resolves (from a
    thread through `loop.call_soon_threadsafe`), the future `loop.run_in_executor` returns, an
    `asyncio.Event` or `asyncio.Queue`. The request then wakes when its result is ready, not at
    the next poll.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from diagnose.checks import async_wait
from diagnose.checks.base import (Finding, ScoreBasis, Site, make_finding, pct, ramp, serial_gain,
                                  short_path)
from diagnose.checks.declare import declarations, key, same_as, shared_key
from diagnose.checks.measurements import Measurements, Omitted
from diagnose.checks.spec import CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.report.model.findings import Fix

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis
    from diagnose.model.async_polls import AsyncPolls

ID = "poll_loop"
THREADS, TASKS = "request threads", "request tasks"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "Requests poll for their result in a sleep loop"
    what: str = ("Share of request time asleep at a sleep() inside a while loop of the service's own code (request "
                 "threads' samples, or request tasks awaiting the sleep): polling for a result another thread or "
                 "task produces.")
    advice: tuple[str, ...] = (
        ("A poll's sleep is the process's own wait, not a call outside it: each request sleeps up to the poll's "
         "length after its result is ready, and holds its thread or task that long."),
    )
    low: float = 0.1
    high: float = 0.4


@dataclass(frozen=True, kw_only=True)
class PollLoopEvidence(Measurements):
    poll_share: float = key("share of request time asleep in poll loops (of the pollers')", U.PERCENT,
                            estimable=True)
    request_threads: int = shared_key()
    # The most slept-in poll's, where there is one.
    pollers: str | Omitted = key("what polls: request threads or request tasks", U.TEXT, optional=True)
    poll_site: str | Omitted = key("the poll's sleep (the `while` loop's line)", U.TEXT, optional=True)
    poll_threads: int | Omitted = key("request threads seen asleep in the poll", U.THREADS, optional=True)
    # Request tasks polling (the asyncio tasks read in flight):
    poll_tasks_avg: float | Omitted = key("request tasks awaiting the poll's sleep, on average", U.NUMBER,
                                          optional=True)
    tasks_in_flight_avg: float | Omitted = key(
        "request tasks in flight, on average (tasks parked all window in their outermost coroutine left out)",
        U.NUMBER, optional=True)
    task_reads: int | Omitted = same_as(async_wait.EVIDENCE["task_reads"], optional=True)
    fix: Fix | Omitted = shared_key(optional=True)


EVIDENCE = declarations(PollLoopEvidence)


def run(analysis: Analysis, settings: Settings) -> Finding:
    """The pollers with the larger share lead: the request threads (_threads) or the request
    tasks (_tasks)."""
    found, tasks = analysis.poll_loops, analysis.async_polls
    if tasks.loops and tasks.share > found.share:
        return _tasks(analysis, settings, tasks)
    if found.loops:
        return _threads(analysis, settings, tasks)
    return make_finding(ID, settings, 0.0, "no request thread or task slept in a poll loop",
                        PollLoopEvidence(poll_share=0.0, request_threads=found.request_threads),
                        samples=found.request_samples)


def _basis(settings: Settings, gain_of: Callable[[float], float]) -> ScoreBasis:
    """The score is a ramp on the poll's share; its gain as the pollers' case estimates it."""
    return ScoreBasis("poll_share", lambda s: ramp(s, settings.low, settings.high), gain_of)


def _advice(at: str, tasks: bool) -> str:
    if tasks:
        return (f"Stop polling at {at}: await the result itself — an asyncio.Future the producer "
                f"resolves (from a thread: loop.call_soon_threadsafe(future.set_result, result)), "
                f"the future loop.run_in_executor returns, or an asyncio.Event or Queue it sets or "
                f"puts the result to — so each request resumes when its result is ready, not at "
                f"the next poll.")
    return (f"Stop polling at {at}: wait on the result itself — a threading.Event or Condition the "
            f"producer sets, a Future it completes (future.result()), or a queue it puts the result "
            f"to — so each request wakes when its result is ready, not at the next poll.")


def _threads(analysis: Analysis, settings: Settings, tasks: AsyncPolls) -> Finding:
    """Request threads asleep in a poll (model/poll_loops.py)."""
    found = analysis.poll_loops
    share = found.share
    basis = _basis(settings, lambda s: serial_gain(s, analysis, "sleeping in the poll")[0])
    request_threads = found.request_threads
    top = found.loops[0]
    at = f"{top.function} ({short_path(top.file)}:{top.line})"
    gain, gain_basis = serial_gain(share, analysis, "sleeping in the poll")
    summary = (f"request threads slept {pct(share)} of their time polling at {at}, in the while loop "
               f"at line {top.loop_line} ({top.threads} of {request_threads} threads)")
    if tasks.loops:
        summary += f"; request tasks also awaited a poll's sleep {pct(tasks.share)} of their time"
    evidence = PollLoopEvidence(poll_share=share, poll_site=f"{at}, loop at line {top.loop_line}",
                                pollers=THREADS, poll_threads=top.threads, request_threads=request_threads,
                                fix=Fix("wait_on_result", f"{top.function}:{top.line}"))
    sites = [Site(p.function, p.file, p.line, round(p.share, 4)) for p in found.loops[:3]]
    return make_finding(ID, settings, basis.score_of(share), summary, evidence, sites,
                        advice=[_advice(at, tasks=False), *settings.advice], gain=(gain, gain_basis),
                        samples=found.request_samples, basis=basis)


def _tasks(analysis: Analysis, settings: Settings, tasks: AsyncPolls) -> Finding:
    """Request tasks awaiting a poll's sleep (model/async_polls.py)."""
    share = tasks.share
    top = tasks.loops[0]
    at = f"{top.function} ({short_path(top.file)}:{top.line})"
    load = async_wait.loop_load(analysis)
    serving = load.serving if load is not None else None
    basis = _basis(settings, lambda s: _task_gain(s, analysis, tasks, serving)[0])
    gain, gain_basis = _task_gain(share, analysis, tasks, serving)
    summary = (f"request tasks awaited a sleep {pct(share)} of their time polling at {at}, in the "
               f"while loop at line {top.loop_line} ({top.waiting_avg:.1f} of "
               f"{tasks.request_tasks_avg:.1f} tasks in flight on average, {tasks.reads} reads)")
    if analysis.poll_loops.loops:
        summary += f"; request threads also slept in a poll {pct(analysis.poll_loops.share)} of their time"
    evidence = PollLoopEvidence(poll_share=share, poll_site=f"{at}, loop at line {top.loop_line}",
                                pollers=TASKS, request_threads=analysis.poll_loops.request_threads,
                                poll_tasks_avg=round(top.waiting_avg, 2),
                                tasks_in_flight_avg=round(tasks.request_tasks_avg, 2), task_reads=tasks.reads,
                                fix=Fix("wait_on_result", f"{top.function}:{top.line}"))
    sites = [Site(p.function, p.file, p.line, round(p.share, 4)) for p in tasks.loops[:3]]
    # The shares are of request-task observations (a task in one read), as async_wait's are.
    observations = int(round(tasks.request_tasks_avg * tasks.reads))
    return make_finding(ID, settings, basis.score_of(share), summary, evidence, sites,
                        advice=[_advice(at, tasks=True), *settings.advice], gain=(gain, gain_basis),
                        samples=observations, basis=basis)


def _task_gain(share: float, analysis: Analysis, tasks: AsyncPolls, serving: float | None) -> tuple[float, str]:
    """The thread case's estimate (Amdahl on the poll's share, capped by the cores), on request
    tasks' time by Little's law, and capped by the event loop: one loop runs on one core, so it
    serves at most 1 / (its share out of the selector) times as many."""
    gain, basis = serial_gain(share, analysis, "awaiting the poll's sleep")
    basis += (f"; from {tasks.reads} reads of the asyncio tasks (Little's law: "
              f"{tasks.request_tasks_avg:.1f} in flight on average, the same concurrency after)")
    if serving:
        cap = max(1.0, 1.0 / serving)
        basis += (f"; the event loop was busy serving {pct(serving)} of the window, so it can serve at "
                  f"most {cap:.2f}x more")
        gain = min(gain, cap)
    return max(1.0, gain), basis


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 needs=(), uses=(Input.OS_COUNTERS, Input.ASYNC_TASKS))
