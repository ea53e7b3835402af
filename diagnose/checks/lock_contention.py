"""lock_contention: request threads spend their time blocked acquiring a lock."""

from __future__ import annotations

from diagnose.checks.base import NotApplicable, make_finding, pct, ramp, short_path, top_sites

ID = "lock_contention"
# Waits that are contention on a lock-like object. Queues and semaphores deep inside request
# handling count too: the thread waits for something another request thread holds.
LOCK_KINDS = ("lock", "rlock", "condition", "semaphore", "queue", "event", "barrier", "logging")


def run(analysis, settings):
    req = analysis.request_samples()
    total = float(req["count"].sum())
    if total == 0:
        return NotApplicable(ID, "no request threads were seen handling work")
    locked = req[(req["state"] == "lock") & (req["wait_kind"].isin(LOCK_KINDS))]
    waited = float(locked["count"].sum())
    share = waited / total
    sites = top_sites(analysis, locked, total)
    threads_waiting = int(locked["thread"].nunique())
    evidence = {
        "lock_wait_share": share,
        "lock_wait_samples": int(waited),
        "request_samples": int(total),
        "request_threads": int(len(analysis.request_threads)),
        "threads_waiting": threads_waiting,
        "estimated": bool(locked["estimated"].any()) if waited else False,
    }
    if sites:
        top = sites[0]
        summary = (f"{pct(share)} of request-thread time waits on the lock at "
                   f"{short_path(top.file)}:{top.line} ({top.function})")
    else:
        summary = f"{pct(share)} of request-thread time waits on locks"
    return make_finding(ID, settings, ramp(share, settings["low"], settings["high"]), summary,
                        evidence, sites)

