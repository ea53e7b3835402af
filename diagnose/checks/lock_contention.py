"""lock_contention: request threads spend their time blocked acquiring a lock."""

from __future__ import annotations

from diagnose.checks.base import (NotApplicable, ScoreBasis, amdahl, make_finding, pct, ramp, serial_gain,
                                  short_path,
                                  sites_from_waits)
from diagnose.model.native_pools import SERIALIZES_CALLERS
from diagnose.model.vocab import LOCK_KINDS, ThreadState
from diagnose.model.waits import describe

ID = "lock_contention"
# Waits on a lock-like object that another request thread holds. Pools (queue, semaphore) and
# logging handler locks have their own checks, with their own advice. An Event, a Future or a
# The waits scored here are vocab.LOCK_KINDS. join is not a lock: its waiter waits for the thread
# that produces the result (the service structure follows it to that producer), so it is never
# lock contention.


SERIALIZING_MIN_SAMPLES = 3  # holders seen inside the library: enough to know where they are


def run(analysis, settings):
    req = analysis.request_samples()
    total = float(req["count"].sum())
    if total == 0:
        return NotApplicable(ID, "no request threads were seen handling work")
    waits = [w for w in analysis.waits if w.kind in LOCK_KINDS]
    share = sum(w.share for w in waits)
    evidence = {
        "lock_wait_share": share,
        "lock_wait_thread_seconds": sum(w.thread_seconds for w in waits),
        "request_threads": int(len(analysis.request_threads)),
        "threads_waiting": max((w.threads for w in waits), default=0),
        "estimated": bool(req[req["state"] == ThreadState.LOCK]["estimated"].any()),
    }
    if waits:
        top = waits[0]
        evidence["top_site_max_concurrent_waiters"] = top.max_concurrent
        evidence["holder"] = describe(top)
        summary = (f"{pct(share)} of request-thread time waits on the lock at "
                   f"{short_path(top.file)}:{top.line} ({top.function})")
    else:
        summary = f"{pct(share)} of request-thread time waits on locks"
    gain = serial_gain(share, analysis, "waiting on locks")
    # A threaded pool only: a library pinned to one thread (no pool threads) serializes nothing.
    serializing = next((sp for sp in analysis.pool_splits
                        if sp.samples >= SERIALIZING_MIN_SAMPLES and sp.library in SERIALIZES_CALLERS),
                       None) if analysis.native_threads else None
    if serializing is not None:
        # The next resource: the critical section runs in a library pool that admits one caller
        # at a time, so without the lock the callers queue inside the library instead.
        # What the first advice (a one-thread pool) buys: each call sheds the pool's
        # synchronisation, judged on the low end of its 95% interval.
        sure = serializing.sync_share_low
        pool_gain = amdahl(sure)
        gain = (pool_gain, f"estimate: the lock holders run in {serializing.library}'s thread pool, "
                           f"which admits one caller at a time, so removing the lock alone buys "
                           f"nothing; {serializing.knob}=1 sheds the pool's synchronisation, "
                           f"{100 * serializing.sync_share:.0f}% of its {serializing.samples} native "
                           f"samples (at least {100 * sure:.0f}% at 95% confidence): about "
                           f"{pool_gain:.2f}x")
        evidence["critical_section_library"] = serializing.library
        evidence["fix"] = {"knob": serializing.knob, "value": 1}
    elif waits:
        evidence["fix"] = {"knob": "model_instances", "value": max(2, int(len(analysis.request_threads)) // 2)}
    advice = list(settings.get("advice", []))
    if serializing is not None:
        advice.insert(0, f"The critical section runs in {serializing.library}'s thread pool, which "
                         f"admits one caller at a time: removing the lock alone will not help (the "
                         f"threads would queue inside {serializing.library}). First size the pool to "
                         f"the work: start the service with {serializing.knob}=1 and re-measure; then "
                         f"shrink the critical section or use a pool of model instances.")
    return make_finding(ID, settings, ramp(share, settings["low"], settings["high"]), summary,
                        evidence, sites_from_waits(waits), advice=advice, gain=gain, samples=total,
                        basis=ScoreBasis("lock_wait_share", lambda s: ramp(s, settings["low"], settings["high"]),
                                         None if serializing is not None else
                                         lambda s: serial_gain(s, analysis, "")[0]))
