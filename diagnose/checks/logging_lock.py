"""logging_lock: request threads queue on a logging handler's lock.

What it finds:
    The share of request-thread time blocked on a logging Handler's lock (taken on every
    record), and the handler doing the slow work (its emit, from the holders' stacks).

Why it matters:
    Every log record takes the handler's lock and does the handler's IO while holding it: the
    request threads serialize on logging.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import OMITTED, Measurements, Omitted
from diagnose.checks.spec import CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.base import Finding, pct, serial_gain
from diagnose.checks.wait_share import WaitShare, wait_finding, where
from diagnose.vocab import WaitKind
from diagnose.model.waits import describe
from diagnose.report.model.findings import Fix
from diagnose.report.model.sections import WaitSite

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis

ID = "logging_lock"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "Request threads queue on a logging handler's lock"
    what: str = "Share of request-thread time blocked on a logging Handler's lock (taken on every record)."
    advice: tuple[str, ...] = (
        ("Every log record takes the handler's lock and does the handler's IO while holding it: the request threads "
         "serialize on logging."),
        ("Log through a logging.handlers.QueueHandler with a QueueListener on its own thread (async logging), so "
         "request threads only enqueue."),
        "Lower the log level on the hot path, or log a summary per batch instead of per item.",
    )
    low: float = 0.05
    high: float = 0.4


@dataclass(frozen=True, kw_only=True)
class LoggingEvidence(Measurements):
    logging_wait_share: float = key("share of request-thread time waiting on logging handler locks",
                                    U.PERCENT, estimable=True)
    logging_wait_thread_seconds: float = key("time waiting on logging locks, summed over threads",
                                             U.SECONDS, estimable=True)
    call_sites: int = key("logging call sites waited at", U.SITES)
    # The top site's, where there is one.
    handler: str | None | Omitted = key("handler doing the slow work", U.TEXT, none="not seen", optional=True)
    threads_waiting: int | Omitted = shared_key(optional=True)
    max_concurrent_waiters: int | Omitted = shared_key(optional=True)
    holder: str | Omitted = shared_key(optional=True)
    fix: Fix | Omitted = shared_key(optional=True)
    in_handler_share: float = key("share of request-thread time inside logging handlers (waiting or working)",
                                  U.PERCENT)
    mean_waiters: float | Omitted = key("request threads waiting on logging handler locks at once, on average",
                                        U.NUMBER, optional=True)


EVIDENCE = declarations(LoggingEvidence)


def _handler(site: WaitSite) -> str:
    """The handler doing the slow work, from the holders' stacks (e.g. StreamHandler.emit)."""
    for holder in site.holders:
        for name in holder.stack:
            if name.rsplit(".", 1)[-1] == "emit":
                return name
    return ""


def run(analysis: Analysis, settings: Settings) -> Finding:
    measured = WaitShare.of(analysis, (WaitKind.LOGGING,))
    share, top = measured.share, measured.top
    summary = f"{pct(share)} of request-thread time waits on logging handler locks"
    # A QueueHandler takes the handler's whole call off the request path: the wait for its lock
    # and the formatting and write under it, one thread at a time. The wait alone predicted
    # 7.2x where the fix measured 13.9x (checks/calibration.py).
    in_handler = max(share, _in_handler_share(analysis))
    waiters = _mean_waiters(analysis, measured.thread_seconds) if top is not None else None
    evidence = LoggingEvidence(logging_wait_share=share, logging_wait_thread_seconds=measured.thread_seconds,
                               call_sites=len(measured.waits), in_handler_share=in_handler,
                               mean_waiters=round(waiters, 2) if waiters is not None else OMITTED)
    if top is not None:
        handler = _handler(top)
        evidence = replace(evidence, handler=handler or None, threads_waiting=top.threads,
                           max_concurrent_waiters=top.max_concurrent, holder=describe(top),
                           fix=Fix("queue_handler", True))
        summary = (f"{pct(share)} of request-thread time waits on a logging handler's lock"
                   + (f" ({handler})" if handler else "")
                   + f", most from {where(top)}")
    advice = None
    if waiters is not None and waiters >= SATURATED_WAITERS:
        summary += f"; its sink is at capacity ({waiters:.1f} threads waited for it on average)"
        advice = (*settings.advice, SATURATED_ADVICE)
    gain = serial_gain(in_handler, analysis, "in logging handlers (waiting for the lock, and the "
                                             "handler's work under it)")
    return wait_finding(ID, settings, analysis, measured, "logging_wait_share", summary, evidence,
                        "waiting on the logging lock", gain=gain, advice=advice)


# On average at least this many request threads waited for a handler's lock: it was held back to
# back, so the handler served records as fast as its sink takes them. Moving the handler to a
# QueueListener does not make the sink faster: the logging_lock fixture's QueueHandler measured
# 39x with 97% of its records dropped by a full queue.
SATURATED_WAITERS = 1.0
SATURATED_ADVICE = ("The handler ran back to back, so its sink writes as fast as it can: a QueueListener "
                    "writes no faster, and its queue grows unless it is bounded and drops records when "
                    "full, or fewer records are logged.")


def _mean_waiters(analysis: Analysis, thread_seconds: float) -> float | None:
    """Request threads waiting on logging locks at once, on average over the window."""
    window = analysis.os.window_s if analysis.os is not None else analysis.profile.window_s
    return thread_seconds / window if window else None


def _in_handler_share(analysis: Analysis) -> float:
    """The share of request-thread samples inside a logging handler's call (Handler.handle and
    below: the lock, the formatting, the write), waiting or working."""
    frames = analysis.profile.frames
    marks = np.array([f.file.endswith(_LOGGING_FILES) and f.function.rsplit(".", 1)[-1] in _HANDLER_CALLS
                      for f in frames], dtype=bool)
    req = analysis.request_samples()
    total = float(req["count"].sum())
    if not total or not marks.any():
        return 0.0
    inside = analysis.profile.stacks_with_any(marks)[req["stack"].to_numpy()]
    return float(req["count"].to_numpy()[inside].sum()) / total


_LOGGING_FILES = ("logging/__init__.py", "logging/handlers.py")
_HANDLER_CALLS = frozenset({"handle", "emit", "callHandlers"})


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 needs=(Input.REQUEST_SAMPLES,), uses=(Input.OS_COUNTERS,),
                 floor_without=(Input.OS_COUNTERS,))
