"""pool_wait: request threads block acquiring a resource from a bounded pool."""

from __future__ import annotations

from diagnose.checks.base import (NotApplicable, ScoreBasis, make_finding, pct, ramp, serial_gain, short_path,
                                  sites_from_waits)
from diagnose.model.vocab import POOL_KINDS
from diagnose.model.waits import describe

ID = "pool_wait"
# A queue.get / semaphore acquire deep inside request handling: the thread waits for a
# connection, client or model instance another request holds. (A worker's own loop waiting on
# its work queue is idle, and never reaches this table.) The kinds: vocab.POOL_KINDS.


def run(analysis, settings):
    req = analysis.request_samples()
    if float(req["count"].sum()) == 0:
        return NotApplicable(ID, "no request threads were seen handling work")
    waits = [w for w in analysis.waits if w.kind in POOL_KINDS]
    share = sum(w.share for w in waits)
    evidence = {"pool_wait_share": share,
                "pool_wait_thread_seconds": sum(w.thread_seconds for w in waits),
                "request_threads": int(len(analysis.request_threads))}
    summary = f"{pct(share)} of request-thread time waits for a pooled resource"
    if waits:
        top = waits[0]
        evidence.update({
            "acquire_site": f"{short_path(top.file)}:{top.line}",
            "kind": top.label,
            "threads_waiting": top.threads,
            "max_concurrent_waiters": top.max_concurrent,
            # The most threads seen holding the resource at once bounds the pool size from below.
            "pool_size_estimate": top.max_holders or None,
            "holder": describe(top),
            "fix": {"knob": "pool_size", "value": max(top.max_concurrent + (top.max_holders or 0),
                                                      (top.max_holders or 0) + 1)},
        })
        size = f"; about {top.max_holders} held at once (the pool size?)" if top.max_holders else ""
        summary = (f"{pct(share)} of request-thread time waits for a pooled resource at "
                   f"{short_path(top.file)}:{top.line} ({top.function}, {top.label}){size}")
    return make_finding(ID, settings, ramp(share, settings["low"], settings["high"]), summary,
                        evidence, sites_from_waits(waits),
                        gain=serial_gain(share, analysis, "waiting for the pool"),
                        samples=req["count"].sum(),
                        basis=ScoreBasis("pool_wait_share", lambda s: ramp(s, settings["low"], settings["high"]),
                                         lambda s: serial_gain(s, analysis, "")[0]))
