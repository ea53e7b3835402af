"""poll_loop: request threads sleep in a loop, polling for a result another thread produces.

What it finds:
    The share of request-thread time asleep at a `sleep(...)` call inside a `while` loop of the
    service's own code (model/poll_loops.py: read from the source at the sampled line), e.g.
    `while key not in results: time.sleep(0.02)` after handing the request to a model thread.
    A sleep on its own (a simulated call, a deliberate delay) or in a `for` loop (a retry with
    backoff) is not a poll.

Why it matters:
    The kernel sees a timer, and a profile a thread "waiting on IO": it reads like a call outside
    the process, and the service like one waiting for work. It is the process's own wait: every
    request sleeps up to the poll's length after its result is ready, and its thread is held
    that long. With a fixed number of request threads, the sleep caps the throughput.

What to do instead:
    Wait on the result itself: a `threading.Event` or `Condition` set by the producer, a
    `concurrent.futures.Future` it completes (`future.result()`), or a `queue.Queue` per request
    it puts to. The thread then wakes when the result is ready, not at the next poll.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from diagnose.checks.base import Finding, ScoreBasis, Site, make_finding, pct, ramp, serial_gain, short_path
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements, Omitted
from diagnose.checks.spec import CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.report.model.findings import Fix

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis

ID = "poll_loop"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "Requests poll for their result in a sleep loop"
    what: str = ("Share of request-thread time asleep at a sleep() inside a while loop of the service's own code: "
                 "polling for a result another thread produces.")
    advice: tuple[str, ...] = (
        ("A poll's sleep is the process's own wait, not a call outside it: each request sleeps up to the poll's "
         "length after its result is ready, and holds its thread that long."),
    )
    low: float = 0.1
    high: float = 0.4


@dataclass(frozen=True, kw_only=True)
class PollLoopEvidence(Measurements):
    poll_share: float = key("share of request-thread time asleep in poll loops", U.PERCENT, estimable=True)
    request_threads: int = shared_key()
    # The most slept-in poll's, where there is one.
    poll_site: str | Omitted = key("the poll's sleep (the `while` loop's line)", U.TEXT, optional=True)
    poll_threads: int | Omitted = key("request threads seen asleep in the poll", U.THREADS, optional=True)
    fix: Fix | Omitted = shared_key(optional=True)


EVIDENCE = declarations(PollLoopEvidence)


def run(analysis: Analysis, settings: Settings) -> Finding:
    found = analysis.poll_loops
    share = found.share
    score_of = lambda s: ramp(s, settings.low, settings.high)  # noqa: E731
    request_threads = found.request_threads
    if not found.loops:
        return make_finding(ID, settings, 0.0, "no request thread slept in a poll loop",
                            PollLoopEvidence(poll_share=0.0, request_threads=request_threads),
                            samples=found.request_samples)
    top = found.loops[0]
    at = f"{top.function} ({short_path(top.file)}:{top.line})"
    gain, basis = serial_gain(share, analysis, "sleeping in the poll")
    summary = (f"request threads slept {pct(share)} of their time polling at {at}, in the while loop "
               f"at line {top.loop_line} ({top.threads} of {request_threads} threads)")
    advice = [f"Stop polling at {at}: wait on the result itself — a threading.Event or Condition the "
              f"producer sets, a Future it completes (future.result()), or a queue it puts the result "
              f"to — so each request wakes when its result is ready, not at the next poll."]
    evidence = PollLoopEvidence(poll_share=share, poll_site=f"{at}, loop at line {top.loop_line}",
                                poll_threads=top.threads, request_threads=request_threads,
                                fix=Fix("wait_on_result", f"{top.function}:{top.line}"))
    sites = [Site(p.function, p.file, p.line, round(p.share, 4)) for p in found.loops[:3]]
    return make_finding(ID, settings, score_of(share), summary, evidence, sites,
                        advice=advice + list(settings.advice), gain=(gain, basis),
                        samples=found.request_samples,
                        basis=ScoreBasis("poll_share", score_of,
                                         lambda s: serial_gain(s, analysis, "sleeping in the poll")[0]))


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 needs=(), uses=(Input.OS_COUNTERS,))
