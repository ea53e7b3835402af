"""gil_contention: threads are runnable but wait for the GIL; names who holds it.

What it finds:
    The share of request-thread time runnable but waiting for the GIL, from native frames (or a
    calibration), or estimated from Python-active time beyond the CPU time the threads got; and
    what the holder was running: Python, or C code that keeps the GIL (a stack whose running
    thread the interpreter's own state named the holder at the kernel's ticks with a waiter:
    json's decoder, a regex). Only between threads: a one-thread process is not contended.

Why it matters:
    Pure-Python code, and C code that never releases it, holds the GIL while the other threads
    queue for it. More threads make GIL contention worse, not better.

What to do instead:
    Vectorise the holder's line, move it into a native extension that releases the GIL, or run
    it in a process pool. A library's C code holding it: call it less at the service's line that
    calls it (parse a file once, not per request). Where no line holds it long (the top holder line under a tenth of the
    instants threads waited), the threads hand it over at every call that releases it: make
    fewer such calls per request, or run the work in processes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from diagnose.checks.spec import CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements, Omitted
from diagnose.report.model.findings import Fix
from diagnose.model.confidence import calibrated_samples
from diagnose.checks.base import (Finding, Lever, LeverKind, NotApplicable, ScoreBasis, Site,
                                  busy_samples,
                                  amdahl, make_finding, more_cores_lever, pct, ramp, remove_work_lever,
                                  serial_gain, short_path)
from diagnose.checks.pipeline_gain import bound_by_bottleneck
from diagnose.checks.vectorise_gain import Vectorised, function_self_share, hot_loop_share
from diagnose.model.counters import holder_agreement, wanted_cores
from diagnose.model.chains import Hop, gil_holder_wait
from diagnose.model.gil_holder import HELD_ASLEEP_SHARE, LOCK_RESOURCES, GilHolding, blocked_share
from diagnose.model.kernel_waits import Blocking
from diagnose.model.syscall_sites import in_library, service_caller
from diagnose.report.model.sections import Holder
from diagnose.samples.profile import Frame, sums_by_code
from diagnose.vocab import BUSY, RUNNING, ThreadState, WaitKind
from diagnose.model.waits import describe

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis
    from diagnose.report.model.sections import Stage

ID = "gil_contention"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "Threads wait for the GIL"
    what: str = ("Share of request-thread time runnable but waiting for the GIL (native frames), or estimated from "
                 "Python-active time beyond the CPU time the threads got.")
    advice: tuple[str, ...] = (
        ("Pure-Python code holds the GIL while the other threads queue for it: the sites are the Python hot spots "
         "the holders were running."),
        ("Vectorize those loops (numpy), move them into a native extension that releases the GIL, or run them in a "
         "process pool."),
        "More threads make GIL contention worse, not better: size the thread pool to the GIL-free share of the work.",
    )
    low: float = 0.1
    high: float = 0.45


@dataclass(frozen=True, kw_only=True)
class _GilWait(Measurements):
    """What every finding of the check writes first (its score's share)."""

    gil_wait_share: float = key("share of request-thread time waiting for the GIL", U.PERCENT, estimable=True)


@dataclass(frozen=True, kw_only=True)
class NoHolderEvidence(_GilWait):
    """The counters' veto: nothing ran to hold the GIL."""

    counters_note: str = shared_key()
    measured_cores: float = shared_key()


@dataclass(frozen=True, kw_only=True)
class GilEvidence(_GilWait):
    estimated: bool = shared_key()
    # The GIL held by a thread asleep in a call that keeps it (the kernel):
    gil_holder_blocked_share: float | Omitted = key(
        "of the instants a thread waited for the GIL, the share no thread ran (the holder blocked, holding it; "
        "kernel)", U.PERCENT, optional=True)
    gil_holder_wait: str | Omitted = key(
        "what the GIL's holder slept on then (kernel)", U.TEXT, optional=True)
    # Estimated from the CPU time the threads got:
    python_active_thread_seconds: float | Omitted = key(
        "request-thread time in Python, from the samples", U.SECONDS, optional=True)
    cpu_seconds: float | Omitted = key("CPU time the request threads got (OS)", U.SECONDS, optional=True)
    # Measured, from native frames or the kernel:
    gil_wait_thread_seconds: float | Omitted = key(
        "time waiting for the GIL, summed over threads", U.SECONDS, estimable=True, optional=True)
    max_concurrent_waiters: int | Omitted = shared_key(optional=True)
    gil_wait_share_per_thread: dict[str, float] | Omitted = key(
        "share of each request thread's time waiting for the GIL", U.PERCENT, estimable=True, optional=True)
    sampled_cores: float | Omitted = shared_key(optional=True)
    measured_cores: float | None | Omitted = shared_key(optional=True)
    counters_note: str | Omitted = shared_key(optional=True)
    holder_phase_shares: dict[str, float] | Omitted = key(
        "what the running Python did, by phase (share of its samples)", U.PERCENT, optional=True)
    runnable_per_core: float | Omitted = shared_key(optional=True)
    holder: str | Omitted = shared_key(optional=True)
    fix: Fix | Omitted = shared_key(optional=True)


EVIDENCE = declarations(GilEvidence, NoHolderEvidence)


def _per_thread_share(analysis: Analysis, column: str) -> dict[str, float]:
    req = analysis.request_threads
    shares = (req[column] / req["samples"].where(req["samples"] > 0, 1)).sort_values(ascending=False)
    return {str(req.loc[i, "name"]): round(float(v), 4) for i, v in shares.head(8).items()}


def run(analysis: Analysis, settings: Settings) -> Finding | NotApplicable:
    req = analysis.request_samples()
    total = float(req["count"].sum())
    # The GIL is only contended between threads: a one-thread worker process (a gunicorn sync
    # worker) caught while re-taking it after a syscall is not waiting for anyone.
    running = analysis.samples[analysis.samples["state"].isin(BUSY)]
    if running["thread"].nunique() < 2:
        return NotApplicable(ID, "only one thread of this process ran Python: nothing to contend "
                                 "with for the GIL")
    held = _held_asleep(analysis, settings)
    if held is not None:
        return held
    idle = _nothing_ran(analysis, settings)
    if idle is not None:
        return idle
    if analysis.profile.native or analysis.profile.calibrated:
        return _from_native_frames(analysis, settings, total)
    if _kernel_saw_gil(analysis):
        return _from_kernel(analysis, settings, req, total)
    return _estimated_from_cpu_time(analysis, settings, req, total)


# A process using less than this many cores over the window had no thread running Python to
# hold the GIL: whatever the samples say, nobody waited for it.
MIN_HOLDER_CORES = 0.02


def _nothing_ran(analysis: Analysis, settings: Settings) -> Finding | None:
    """The counters' veto: GIL contention needs a thread that holds the GIL and runs."""
    os_ = analysis.os
    if os_ is None or os_.window_s <= 0:
        return None
    cores = os_.cpu_s / os_.window_s
    if cores >= MIN_HOLDER_CORES:
        return None
    note = (f"the process used {cores:.3f} cores over the window (/proc): no thread ran to hold "
            f"the GIL, so none waited for it")
    return make_finding(ID, settings, 0.0, f"no GIL contention: {note}",
                        NoHolderEvidence(gil_wait_share=0.0, counters_note=note, measured_cores=round(cores, 4)))


def _held_asleep(analysis: Analysis, settings: Settings) -> Finding | None:
    """The GIL held by a thread asleep in a C call that keeps it (model/gil_holder.py): at most
    instants a thread sleeps on the GIL's futex, no thread of the process is on a CPU. The
    waiters queue behind a sleep: the counters show next to no CPU, and that is the point, not a
    veto. None where the kernel did not see that."""
    if not _kernel_saw_gil(analysis):
        return None
    kernel = analysis.kernel
    assert kernel is not None
    tids = [int(t) for t in analysis.request_threads["tid"]]
    holding = analysis.gil_holding
    if holding is None or not tids:
        return None
    cores = analysis.os.cpu_s / analysis.os.window_s if analysis.os is not None and analysis.os.window_s else None
    # A holder runnable but kept off a core by other tenants computes all the same: the counters'
    # reading counts its run-queue time as running (CI: a busy machine read the gil_contention
    # fixture's computing holder as asleep by its CPU alone)
    blocked = blocked_share(holding, wanted_cores(analysis.os))
    if blocked < HELD_ASLEEP_SHARE:
        return None
    req = analysis.request_samples()
    total = float(req["count"].sum())
    asleep_share = sum(kernel.blocked_share(t, Blocking.GIL) for t in tids) / len(tids)
    share = asleep_share
    if (analysis.profile.native or analysis.profile.calibrated) and total:
        # A waiter woken in the GIL's wait (its timed wait ran out, or the GIL was handed to it)
        # is runnable, not asleep on the futex, until a core takes it: on a busy machine most of
        # its wait. The native frames see it inside the GIL's wait all the same.
        share = max(share, float(req.loc[req["state"] == ThreadState.GIL, "count"].sum()) / total)
    if share < settings.low:
        return None
    # the holder's code: the line the request threads' samples sit at, waiting or in the call
    calls = req[(req["state"] != ThreadState.IDLE) & (req["site"] >= 0)]
    top = calls.groupby("site")["count"].sum().sort_values(ascending=False).head(3)
    sites = [Site(analysis.frame(int(f)).function, analysis.frame(int(f)).file, analysis.frame(int(f)).line,
                  round(float(c) / total, 4) if total else 0.0) for f, c in top.items()]
    where = f" in {sites[0].function} ({sites[0].file.rsplit('/', 1)[-1]}:{sites[0].line})" if sites else ""
    # what the holder slept on holding the GIL, and who ran meanwhile: the hop past the GIL the
    # chains follow (model/chains.py), asked of the same holding and blocked share as here
    waited = gil_holder_wait(analysis.chain_context)
    on_a_lock = waited is not None and waited.resource in LOCK_RESOURCES
    runner = _lock_runner(analysis, waited.thread if waited is not None else None)
    waits = ("asleep on the GIL's futex (the kernel)" if share == asleep_share else
             f"waiting for the GIL ({pct(asleep_share)} asleep on its futex, the kernel; the rest runnable "
             f"in its wait, the native frames)")
    summary = (f"request threads spend {pct(share)} of their time {waits}; "
               + _holder_phrase(holding, waited, cores, where)
               + (f", a lock held by {runner} without the GIL: the {len(tids)} threads queue on that lock "
                  f"through the GIL" if runner else ""))
    # Released around the call, the threads' calls overlap: up to one per thread at once, until the
    # Python between the calls (the holder's running share, at most 1 - blocked) holds the GIL always.
    gain = min(float(len(tids)), 1.0 / max(1e-3, 1.0 - blocked))
    how = "with an instance per thread" if on_a_lock else "released around its call"
    basis = (f"estimate: the GIL's holder was blocked {pct(blocked)} of the time it held it; {how}, "
             f"the {len(tids)} threads' calls overlap: at most {len(tids)}x (one per "
             f"thread), and at most {1.0 / max(1e-3, 1.0 - blocked):.1f}x while the Python between the "
             f"calls holds the GIL")
    if runner and cores and analysis.os is not None:
        # the lock's holder computes (it runs while the others wait): its work spreads over the
        # cores once each thread has its own, and no further
        free = analysis.os.usable_cores / cores
        if free < gain:
            gain = max(1.0, free)
            basis += (f"; the lock's holder runs while it holds it, so the threads' work spreads over the "
                      f"{analysis.os.usable_cores:g} usable cores, {cores:.2f} in use: at most {gain:.1f}x")
    if on_a_lock:
        # a native lock taken with the GIL held, held by a thread running with the GIL released
        # (one SQLite connection shared by the threads: its mutex)
        advice = [f"The GIL's holder waits{where} for a native lock another thread holds while it runs "
                  f"without the GIL: an object the threads share serialises them through the GIL (a "
                  f"database connection, a client, a model handle). Give each thread its own (a "
                  f"connection per thread, a pool of them), or take a Python lock around the shared "
                  f"object's calls so waiters wait on it without holding the GIL.",
                  "More cores, vectorising or more threads do not help: the threads queue on that lock."]
    else:
        advice = [f"The GIL is held across a blocking call{where}: release it around that call (ctypes.CDLL, "
                  f"not ctypes.PyDLL; Py_BEGIN_ALLOW_THREADS / Py_END_ALLOW_THREADS in a C extension; `with "
                  f"nogil:` in Cython; the driver's GIL-releasing or async API). The threads then wait in "
                  f"parallel instead of one at a time.",
                  "More cores, vectorising or fewer threads do not help: the holder sleeps, it does not compute."]
    evidence = GilEvidence(
        gil_wait_share=share, estimated=False, gil_holder_blocked_share=round(blocked, 4),
        gil_holder_wait=(f"{waited.label} ({pct(holding.holder_wait_share)} of those instants)"
                         if waited is not None else "not seen"),
        measured_cores=round(cores, 4) if cores is not None else None)
    if sites:
        # a lock the holder waits for with the GIL: an instance per thread; else release the GIL
        evidence = replace(evidence,
                           fix=Fix("per_thread_instance" if on_a_lock else "release_gil", sites[0].function))
    ticks = sum(kernel.ticks.get(t, 0) for t in tids)
    lever = Lever(LeverKind.REMOVE_WORK, round(gain, 2),
                  "with an instance per thread" if on_a_lock else "if the call released the GIL", basis,
                  upper_bound=True)
    return make_finding(ID, settings, ramp(share, settings.low, settings.high), summary, evidence, sites,
                        advice=advice, gain=(gain, basis), samples=ticks, levers=[lever],
                        basis=ScoreBasis("gil_wait_share", lambda s: ramp(s, settings.low, settings.high)))


def _holder_phrase(holding: GilHolding, waited: Hop | None, cores: float | None, where: str) -> str:
    """What the holder did (`waited`: what it slept on, gil_holder_wait) and how it was seen:
    named by the interpreter at each tick, or inferred from the instants no thread of the
    process was on a CPU (and the CPU it used)."""
    on_a_lock = waited is not None and waited.resource in LOCK_RESOURCES
    label = waited.label if waited is not None else ""
    if on_a_lock and label.startswith("lock at "):
        label = f"a native lock (futex {label.removeprefix('lock at ')})"
    doing = ((f"blocked on {label}" if on_a_lock else f"asleep in {label}") if label else "blocked")
    if holding.holder_read:
        return (f"its holder, read from the interpreter at {holding.contended_ticks} of those instants, was "
                f"{doing}{where} at {pct(holding.blocked_share)} of them, holding the GIL")
    return (f"at {pct(holding.blocked_share)} of those instants no thread of the process was on a CPU"
            + (f", and the process ran {cores:.2f} cores (/proc): the holder ran at most "
               f"{pct(1 - holding.blocked_by_cpu(cores))} of the time" if cores is not None else "")
            + f"; the GIL's holder was {doing}{where}, holding the GIL")


def _lock_runner(analysis: Analysis, tid: int | None) -> str:
    """The thread that ran while the GIL's holder waited for a lock: by name and where its
    samples ran most ("" when unknown)."""
    if tid is None:
        return ""
    threads = analysis.threads[analysis.threads["tid"] == tid]
    if threads.empty:
        return f"thread {tid}"
    name = str(threads["name"].iloc[0]) or f"thread {tid}"
    own = analysis.samples[analysis.samples["thread"].isin(threads.index)
                           & analysis.samples["state"].isin(BUSY) & (analysis.samples["site"] >= 0)]
    if own.empty:
        return f"{name} (thread {tid})"
    frame = analysis.frame(int(own.groupby("site")["count"].sum().idxmax()))
    return f"{name} running {frame.function} ({frame.file.rsplit('/', 1)[-1]}:{frame.line})"


def _kernel_saw_gil(analysis: Analysis) -> bool:
    """The kernel read the threads' syscalls and knew the GIL's futex (model/kernel_waits.py):
    the GIL waits in the samples are measured, not estimated from CPU time."""
    kernel = analysis.kernel
    return kernel is not None and kernel.knows_gil and kernel.observations > 0


def _from_native_frames(analysis: Analysis, settings: Settings, total: float) -> Finding:
    gil = next((w for w in analysis.waits if w.kind == WaitKind.GIL), None)
    share = gil.share if gil else 0.0
    sites = [Site(h.function, h.file, h.line, h.share) for h in gil.holders] if gil else []
    evidence = GilEvidence(gil_wait_share=share, estimated=False,
                           gil_wait_thread_seconds=gil.thread_seconds if gil else 0.0,
                           max_concurrent_waiters=gil.max_concurrent if gil else 0,
                           gil_wait_share_per_thread=_per_thread_share(analysis, ThreadState.GIL))
    summary = f"request threads spend {pct(share)} of their time waiting for the GIL"
    score = ramp(share, settings.low, settings.high)
    # A contended GIL has a holder running on a core: the process's /proc CPU must show it.
    counters = holder_agreement(analysis, share)
    score *= counters.factor
    evidence = replace(evidence, sampled_cores=counters.sampled, measured_cores=counters.measured)
    if not counters.agrees:
        summary += f" — {counters.note()}"
        evidence = replace(evidence, counters_note=counters.note())
    # Who holds the GIL, by phase: the arbiter ranks a preprocessing finding first when
    # preprocessing is what the waiters wait behind.
    evidence = replace(evidence, holder_phase_shares=_holder_phase_shares(analysis))
    if analysis.os is not None and analysis.os.usable_cores:
        evidence = replace(evidence,
                           runnable_per_core=round(analysis.os.mean_runnable / analysis.os.usable_cores, 4))
    if gil and gil.holders:
        top = gil.holders[0]
        evidence = replace(evidence, holder=describe(gil), fix=Fix("vectorize", top.function))
        if top.share < DIFFUSE_HOLDER_SHARE:
            summary += (f"; no line held it long: the holder was spread over many lines, most often "
                        f"{top.function} ({top.file.rsplit('/', 1)[-1]}:{top.line}) at {pct(top.share)} of "
                        f"the instants threads waited")
        else:
            summary += (f"; the holder was most often running {top.function} "
                        f"({top.file.rsplit('/', 1)[-1]}:{top.line})")
    gain = serial_gain(share, analysis, "waiting for the GIL")
    holder = gil.holders[0].function if gil and gil.holders else None
    # In a calibrated profile the GIL wait is drawn from a few native samples per stack: the
    # share's interval rests on those, not on the many Python samples they label.
    calibrated = analysis.profile.calibrated
    share_samples = ({"gil_wait_share": calibrated_samples(analysis.request_samples())}
                     if calibrated else None)
    behind = _waits_behind(analysis, gil.holders[0].share) if gil and gil.holders else 0.0
    vectorised = _vectorised(analysis, holder, behind,
                             share_samples["gil_wait_share"] if share_samples else total)
    caller = library_holders_caller(analysis, gil.holders[0]) if gil and gil.holders else None
    levers = _levers(analysis, holder, gain, behind, vectorised)
    ranked = _ranked_gain(gain, vectorised)
    if caller is not None:
        evidence = replace(evidence, fix=Fix("call_less", f"{caller.function}:{caller.line}"))
        # the advice removes the calls at the caller's line: their running time and the GIL
        # waits behind the holder, at least what removing the holder's own work buys
        held = min(1.0, (_self_share(analysis, holder) if holder else 0.0) + behind)
        through = max(min(1.0, _through_share(analysis, caller) + behind), held)
        called = _calls_lever(through, caller)
        levers.insert(0, called)
        if called.gain > ranked[0]:
            ranked = (called.gain, called.basis)
    found = make_finding(ID, settings, score, summary, evidence, sites,
                         gain=ranked, samples=total,
                         levers=levers,
                         share_samples=share_samples,
                         calibrated_of={"gil_wait_share": int(total)} if calibrated else None,
                         basis=ScoreBasis("gil_wait_share",
                                          lambda s: ramp(s, settings.low, settings.high) * counters.factor,
                                          lambda s: serial_gain(s, analysis, "")[0]))
    return _finished(found, gain, vectorised, caller)


def _holder_phase_shares(analysis: Analysis) -> dict[str, float]:
    req = analysis.request_samples()
    # by the columns' codes (no copy of the running rows): a sum per phase present, in the
    # phases' declared order, as a group-by over the categorical gives
    running = (req["state"] == ThreadState.PYTHON).to_numpy()
    counts = req["count"].to_numpy()[running]
    total = float(counts.sum())
    if not total:
        return {}
    phase = req["phase"].array
    codes = np.asarray(phase.codes)[running]
    counts = counts[codes >= 0]  # a row of no phase (-1) is in the total, in no group
    codes = codes[codes >= 0]
    return {str(phase.categories[k]): round(summed / total, 4)
            for k, summed in sums_by_code(codes, counts, len(phase.categories))}


def _from_kernel(analysis: Analysis, settings: Settings, req: pd.DataFrame, total: float) -> Finding:
    """Without native frames, the kernel measured it: each request thread's /proc ticks asleep
    on the GIL's futex (model/kernel_waits.py). The samples cannot say which of them waited
    (threads hand the GIL over every few ms, faster than py-spy samples), so the share is the
    kernel's and the code is what the running Python samples ran."""
    kernel = analysis.kernel
    assert kernel is not None
    tids = [int(t) for t in analysis.request_threads["tid"]]
    shares = {tid: kernel.blocked_share(tid, Blocking.GIL) for tid in tids}
    share = sum(shares.values()) / len(shares) if shares else 0.0
    window = analysis.os.window_s if analysis.os is not None else 0.0
    running = req[req["state"] == ThreadState.PYTHON]
    top = (running[running["site"] >= 0].groupby("site")["count"].sum()
           .sort_values(ascending=False).head(5))
    running_total = float(running["count"].sum()) or 1.0
    sites = [Site(analysis.frame(int(f)).function, analysis.frame(int(f)).file,
                  analysis.frame(int(f)).line, round(float(c) / running_total, 4)) for f, c in top.items()]
    names = dict(zip(analysis.request_threads["tid"].astype(int), analysis.request_threads["name"]))
    ticks = sum(kernel.ticks.get(t, 0) for t in tids)
    evidence = GilEvidence(gil_wait_share=share, estimated=False,
                           gil_wait_thread_seconds=round(share * window * len(tids), 3),
                           gil_wait_share_per_thread={str(names.get(t, t)): round(v, 4) for t, v in
                                                      sorted(shares.items(), key=lambda p: -p[1])[:8]})
    summary = (f"request threads spend {pct(share)} of their time waiting for the GIL (the kernel: "
               f"asleep on the GIL's futex in {pct(share)} of their {ticks} /proc ticks)")
    counters = holder_agreement(analysis, share)
    score = ramp(share, settings.low, settings.high) * counters.factor
    evidence = replace(evidence, sampled_cores=counters.sampled, measured_cores=counters.measured)
    if not counters.agrees:
        summary += f" — {counters.note()}"
        evidence = replace(evidence, counters_note=counters.note())
    if sites:
        summary += (f"; the running Python was most often {sites[0].function} "
                    f"({sites[0].file.rsplit('/', 1)[-1]}:{sites[0].line})")
        evidence = replace(evidence, fix=Fix("vectorize", sites[0].function))
    gain = serial_gain(share, analysis, "waiting for the GIL (the kernel)")
    holder = sites[0].function if sites else None
    vectorised = _vectorised(analysis, holder, 0.0, running_total)
    found = make_finding(ID, settings, score, summary, evidence, sites, gain=_ranked_gain(gain, vectorised),
                         samples=ticks, levers=_levers(analysis, holder, gain, 0.0, vectorised),
                         basis=ScoreBasis("gil_wait_share",
                                          lambda s: ramp(s, settings.low, settings.high) * counters.factor,
                                          lambda s: serial_gain(s, analysis, "")[0]))
    return _finished(found, gain, vectorised)


def _estimated_from_cpu_time(analysis: Analysis, settings: Settings, req: pd.DataFrame,
                             total: float) -> Finding | NotApplicable:
    """Without native frames a GIL wait looks like running Python. Threads 'running Python'
    longer than the CPU they got were waiting for the GIL for the difference."""
    if analysis.os is None:
        return NotApplicable(ID, "without native frames the GIL wait is estimated from OS CPU "
                                 "time, which only `attach` records")
    interval = analysis.profile.interval_s or 0.01
    python_samples = req[req["state"] == ThreadState.PYTHON]
    python_thread_s = float(python_samples["count"].sum()) * interval
    cpu_s = sum(analysis.os.threads[int(t)].cpu_s for t in analysis.request_threads["tid"]
                if int(t) in analysis.os.threads)
    waited = max(0.0, python_thread_s - cpu_s)
    share = waited / (total * interval)
    sampled = req[req["state"] == ThreadState.PYTHON]
    top = (sampled[sampled["site"] >= 0].groupby("site")["count"].sum()
           .sort_values(ascending=False).head(5))
    sites = [Site(analysis.frame(int(f)).function, analysis.frame(int(f)).file,
                  analysis.frame(int(f)).line, round(float(c) / total, 4)) for f, c in top.items()]
    evidence = GilEvidence(gil_wait_share=share, estimated=True, python_active_thread_seconds=python_thread_s,
                           cpu_seconds=cpu_s)
    summary = (f"an estimated {pct(share)} of request-thread time waits for the GIL "
               f"(Python-active time beyond the CPU time the threads got; no native frames)")
    gain = serial_gain(share, analysis, "waiting for the GIL (estimated)")
    holder = sites[0].function if sites else None
    vectorised = _vectorised(analysis, holder, 0.0, total)
    found = make_finding(ID, settings, ramp(share, settings.low, settings.high), summary,
                         evidence, sites, gain=_ranked_gain(gain, vectorised), samples=total,
                         levers=_levers(analysis, holder, gain, 0.0, vectorised))
    return _finished(found, gain, vectorised)


def _holder_of(behind: float) -> str:
    return ("the request threads' busy time, by its self time and the GIL waits behind it"
            if behind > 0 else "the request threads' busy time by self time")


def _vectorised(analysis: Analysis, holder: str | None, behind: float,
                samples: float) -> Vectorised | None:
    """The calibrated figure of the first advice, vectorising the holder: its GIL-bound time (running
    its bytecode, or queueing for the GIL to) and the waits behind it. None without a holder,
    without native frames (its bytecode and the native calls under it look alike), for a holder
    that mostly runs native code, and in a pipeline, whose bottleneck stage bounds the gain by its
    own GIL waits (pipeline_gain), a measure of the waits, not of the holder's code."""
    if not holder or analysis.structure.pipeline:
        return None
    own = hot_loop_share(analysis, busy_samples(analysis.request_samples()), holder)
    if own is None:
        return None
    share = min(1.0, own + behind)
    return Vectorised(holder, share, int(samples), _holder_of(behind))


# A holder line seen at fewer than this share of the instants threads waited is one of many: the
# GIL changed hands among many lines, none holding it long (a statsd client's threads re-taking
# it after each of 400 sendto calls a request: the top holder, the server's selector, 6%). No
# line is a loop to vectorise; the handoffs are the calls that release it.
DIFFUSE_HOLDER_SHARE = 0.1
DIFFUSE_ADVICE = ("No one line holds the GIL long: the threads hand it over at every call that releases it "
                  "(system calls, short C calls) and queue to take it back. Make fewer such calls per request "
                  "(batch them), or run the work in processes.")


def _ranked_gain(waits: tuple[float, str], vectorised: Vectorised | None) -> tuple[float, str]:
    """The ranking's figure: vectorising the holder where it buys more than the waiters running
    on the cores (it removes their waits and the holder's work)."""
    if vectorised is None or vectorised.gain <= waits[0]:
        return waits
    return vectorised.gain, vectorised.basis()


def _finished(found: Finding, waits: tuple[float, str], vectorised: Vectorised | None,
              caller: Frame | None = None) -> Finding:
    """`found` with the vectorised figure's interval (over the holder's share) where that figure
    ranks; else its gain marked as the floor of what vectorising buys (the waits' figure). Its
    first advice names the holder's line (and the service's line calling it: `caller`)."""
    found = _holder_named(found, caller)
    if caller is not None:
        return found  # ranked by the calls' removal (a floor of it), not by the waits alone
    if vectorised is None or _ranked_gain(waits, vectorised) is waits:
        return replace(found, gain_floor=FLOOR)
    return replace(found, gain_interval=vectorised.interval)


def library_holders_caller(analysis: Analysis, holder: Holder) -> Frame | None:
    """The service's line that called the library C code holding the GIL (`holder`: a path the
    interpreter named the holder in, model/gil_holder.py): in the holding stacks whose innermost
    Python frame is the holder's, the innermost frame outside the standard library and the
    installed packages, most often. None for a holder in the service's own code, or Python."""
    if holder.state != ThreadState.NATIVE or not in_library(Frame(holder.function, holder.file, holder.line)):
        return None
    callers: Counter[Frame] = Counter()
    for stack in analysis.gil_holding_stacks:
        frames = analysis.stack_frames(stack)
        leaf = next((f for f in reversed(frames) if not f.native), None)
        if leaf is None or (leaf.function, leaf.file, leaf.line) != (holder.function, holder.file, holder.line):
            continue
        own = service_caller(frames)
        if own is not None:
            callers[own] += 1
    return callers.most_common(1)[0][0] if callers else None


def _calls_lever(share: float, caller: Frame) -> Lever:
    """Amdahl on the calls' share of the busy time (`share`: their running time and the GIL
    waits behind the top holder, at least the holder's own lever). Not an upper bound: the waits
    behind the calls' other GIL holders (the file read before the parse) and the threads queued
    elsewhere while they hold it are not counted (json.load of a vocabulary per request: 4.13x
    figured, 43.7x measured)."""
    gain = amdahl(share)
    what = f"the calls at {caller.function}:{caller.line}"
    return Lever(LeverKind.REMOVE_WORK, round(gain, 2), f"if {what} cost nothing",
                 f"estimate: {what} are {pct(share)} of the request threads' busy time, by their running time "
                 f"and the GIL waits behind their top holder (at least the holder's own share); if they cost "
                 f"nothing, {gain:.2f}x (Amdahl), a floor: the other waits they cause are not counted")


def _through_share(analysis: Analysis, caller: Frame) -> float:
    """The share of the request threads' busy samples running (not waiting for the GIL) in
    stacks that pass through the line `caller`: the calls' own time, which calling it less
    removes beside the GIL waits behind it (_waits_behind)."""
    busy = busy_samples(analysis.request_samples())
    total = float(busy["count"].sum())
    if not total:
        return 0.0
    running = busy[busy["state"].isin(RUNNING)]
    stacks = analysis.profile.stacks
    through = [sid for sid in np.unique(running["stack"].to_numpy()).tolist()
               if any(analysis.frame(f) == caller for f in stacks[int(sid)])]
    return float(running.loc[running["stack"].isin(through), "count"].sum()) / total


def _holder_named(found: Finding, caller: Frame | None = None) -> Finding:
    """The default advice's first two lines (what holds the GIL, then what to do with "those
    loops") as one that says what to do at the holder's line, the first thing the report's
    reader sees; advice a user's rules set stays as written. `caller`: the service's line that
    calls the library C code holding the GIL (library_holders_caller), which the advice names."""
    default = Settings().advice
    if not found.sites or tuple(found.advice[:2]) != default[:2]:
        return found
    top = found.sites[0]
    if top.share < DIFFUSE_HOLDER_SHARE:
        return replace(found, advice=(DIFFUSE_ADVICE, *found.advice[2:]))
    if caller is not None:
        first = (f"Call {top.function} ({short_path(top.file)}:{top.line}) less at {caller.function} "
                 f"({short_path(caller.file)}:{caller.line}): it is a library's C code that keeps the GIL while "
                 f"it runs (the interpreter named it the GIL's holder), so the other threads queue behind every "
                 f"call. Where its input repeats (a file parsed on every request), do it once and keep the "
                 f"result; else give it less to do per call, use a library that releases the GIL, or run it in "
                 f"a process pool.")
        return replace(found, advice=(first, *found.advice[2:]))
    first = (f"Vectorize {top.function} ({short_path(top.file)}:{top.line}) with numpy, move it into a native "
             f"extension that releases the GIL, or run it in a process pool: its pure Python holds the GIL "
             f"while the other threads queue for it.")
    return replace(found, advice=(first, *found.advice[2:]))


def _levers(analysis: Analysis, holder: str | None, gain: tuple[float, str],
            behind: float = 0.0, vectorised: Vectorised | None = None) -> list[Lever]:
    """The first advice vectorises the holder: its calibrated figure, then the bound if its self
    time and the GIL waits behind it (their share of the request threads' busy time) were free,
    beside the gain of the waiters running on the cores. Without the waits the bound was no
    bound: a vectorised holder measured 29x where its self time alone allowed 5x."""
    levers = [more_cores_lever(*gain)]
    share = min(1.0, (_self_share(analysis, holder) if holder else 0.0) + behind)
    if holder and share > 0:
        levers.insert(0, remove_work_lever(share, holder, _holder_of(behind)))
    if vectorised is not None:
        levers.insert(0, vectorised.lever())
    return levers


def _waits_behind(analysis: Analysis, holder_share: float) -> float:
    """The share of the request threads' busy samples spent waiting for the GIL while the top
    holder held it (`holder_share`: its share of the wait's holders)."""
    busy = busy_samples(analysis.request_samples())
    total = float(busy["count"].sum())
    if not total:
        return 0.0
    waiting = float(busy.loc[busy["state"] == ThreadState.GIL, "count"].sum())
    return holder_share * waiting / total


def _self_share(analysis: Analysis, function: str,
                states: tuple[ThreadState, ...] | None = None) -> float:
    """The share of the request threads' busy samples whose innermost Python frame is in
    `function` (its self time); with `states`, only its samples in those states."""
    busy = busy_samples(analysis.request_samples())
    return function_self_share(analysis, busy, function, float(busy["count"].sum()), states=states)


# Where no vectorised figure ranks (no holder, a pipeline), the ranked figure counts the GIL waits
# alone (the waiters run on the cores); the first advice, vectorising the holder, removes its work
# too: a floor of what the advice buys (a vectorised holder measured 10-15x it).
FLOOR = ("it counts the GIL waits alone; vectorising the holder also removes its work, which "
         "the figure does not count")


# The holders' phase names the code vectorising changes when it holds this much of their time.
PHASE_MAJORITY = 0.5


def run_with_floor(analysis: Analysis, settings: Settings) -> Finding | NotApplicable:
    """The finding, its gain bounded by a pipeline's bottleneck stage, and the phase whose code
    the holders mostly ran (what vectorising them makes cheaper)."""
    found = run(analysis, settings)
    if isinstance(found, NotApplicable):
        return found
    # Only where one thread runs every phase is the holders' phase the same threads' work as a
    # phase finding's; a pipeline's stages are other threads (its GIL is between stages).
    phases = {} if analysis.structure.pipeline else _holder_phase_shares(analysis)
    top = max(phases, key=lambda p: phases[p], default=None)
    acts_on = top if top is not None and phases[top] >= PHASE_MAJORITY else None
    found = bound_by_bottleneck(found, analysis, lambda stage, rows: _stage_gil_share(analysis, stage, rows),
                                lambda s: serial_gain(s, analysis, "")[0], "waiting for the GIL")
    return replace(found, acts_on=acts_on)


def _stage_gil_share(analysis: Analysis, stage: Stage, rows: pd.DataFrame) -> tuple[float, int] | None:
    """The share of a stage's thread time waiting for the GIL, measured as the finding's own share
    is (sampled states, else the kernel's futex waits), and the samples it rests on."""
    total = float(rows["count"].sum())
    if analysis.profile.native or analysis.profile.calibrated:
        if not total:
            return None
        waiting = float(rows.loc[rows["state"] == ThreadState.GIL, "count"].sum())
        samples = calibrated_samples(rows) if analysis.profile.calibrated else int(total)
        return waiting / total, samples
    kernel = analysis.kernel
    if _kernel_saw_gil(analysis) and kernel is not None and stage.tids:
        share = sum(kernel.blocked_share(t, Blocking.GIL) for t in stage.tids) / len(stage.tids)
        return share, sum(kernel.ticks.get(t, 0) for t in stage.tids)
    return None  # estimated from CPU time: no per-stage measure to bound by


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run_with_floor,
                 needs=(Input.REQUEST_SAMPLES,), uses=(Input.NATIVE_FRAMES, Input.OS_COUNTERS))
