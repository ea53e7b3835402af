"""logging_lock: request threads queue on a logging handler's lock."""

from __future__ import annotations

from diagnose.checks.base import (NotApplicable, ScoreBasis, make_finding, pct, ramp, serial_gain, short_path,
                                  sites_from_waits)
from diagnose.model.vocab import WaitKind
from diagnose.model.waits import describe

ID = "logging_lock"


def _handler(site) -> str:
    """The handler doing the slow work, from the holders' stacks (e.g. StreamHandler.emit)."""
    for holder in site.holders:
        for name in holder.stack:
            if name.rsplit(".", 1)[-1] == "emit":
                return name
    return ""


def run(analysis, settings):
    req = analysis.request_samples()
    if float(req["count"].sum()) == 0:
        return NotApplicable(ID, "no request threads were seen handling work")
    waits = [w for w in analysis.waits if w.kind == WaitKind.LOGGING]
    share = sum(w.share for w in waits)
    evidence = {"logging_wait_share": share,
                "logging_wait_thread_seconds": sum(w.thread_seconds for w in waits),
                "call_sites": len(waits)}
    summary = f"{pct(share)} of request-thread time waits on logging handler locks"
    if waits:
        top = waits[0]
        handler = _handler(top)
        evidence.update({"handler": handler or None, "threads_waiting": top.threads,
                         "max_concurrent_waiters": top.max_concurrent, "holder": describe(top),
                         "fix": {"knob": "queue_handler", "value": True}})
        summary = (f"{pct(share)} of request-thread time waits on a logging handler's lock"
                   + (f" ({handler})" if handler else "")
                   + f", most from {short_path(top.file)}:{top.line} ({top.function})")
    return make_finding(ID, settings, ramp(share, settings["low"], settings["high"]), summary,
                        evidence, sites_from_waits(waits),
                        gain=serial_gain(share, analysis, "waiting on the logging lock"),
                        samples=req["count"].sum(),
                        basis=ScoreBasis("logging_wait_share", lambda s: ramp(s, settings["low"], settings["high"]),
                                         lambda s: serial_gain(s, analysis, "")[0]))
