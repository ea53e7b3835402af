"""cpu_bound: busy threads saturate their CPU share in code no frame category claims.

What it finds:
    Request or stage threads busy most of the time (running or waiting for the GIL) in code no
    frame category claims. Names the hottest functions by self time (the innermost Python
    frame) and total time (anywhere on the stack), and whether they hold the GIL. Where the
    hottest function mostly runs its own bytecode (native frames tell it from calls into numpy),
    the first advice's figure is that function's self time, its user-time part, vectorised 20x
    cheaper (calibrated, checks/vectorise_gain.py).

Why it matters:
    A thread busy nearly all the time is a bottleneck whatever its code is called: a one-thread
    gunicorn worker running a pure-Python feature extractor is saturated even if no pattern
    names its function.

What to do instead:
    Pure Python holding the GIL: vectorise it (numpy), move it to native code that releases the
    GIL, or run it in processes (more worker processes, a ProcessPoolExecutor); threads will not
    add throughput to GIL-bound code. Native code on every busy core: a faster implementation or
    more cores (workers or replicas) are the levers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from diagnose.checks.spec import CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements, Omitted
from diagnose.checks.base import (Finding, NotApplicable, ScoreBasis, Site, busy_samples, core_room, make_finding,
                                  more_cores_lever, pct, ramp, remove_work_lever, short_path)
from diagnose.classify.state import gil_waits_leaving_a_wait
from diagnose.model.bootstrap import is_bootstrap
from diagnose.model.counters import holder_agreement, running_agreement, wanted_cores
from diagnose.model.gil_holder import HELD_ASLEEP_SHARE, blocked_share
from diagnose.model.pool_transfer import is_transport_file
from diagnose.checks.vectorise_gain import Vectorised, function_self_share, hot_loop_share
from diagnose.vocab import GIL_BOUND, ThreadState

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis

ID = "cpu_bound"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "Busy threads saturate the CPU in unclassified code"
    what: str = ("Request or stage threads busy most of the time (running or waiting for the GIL) in code no frame "
                 "category claims; names the hottest functions.")
    advice: tuple[str, ...] = ()
    low: float = 0.5
    high: float = 0.85


@dataclass(frozen=True, kw_only=True)
class CpuEvidence(Measurements):
    busy_share_of_request_time: float = shared_key()
    unclassified_share_of_busy: float = key("share of busy time in code no category names", U.PERCENT)
    python_share_of_busy: float = key(
        "share of busy time running Python (holding or wanting the GIL)", U.PERCENT)
    busy_samples: int = shared_key()
    self_time: dict[str, float] = key("hottest functions by self time (share of busy time)", U.PERCENT)
    total_time: dict[str, float] = key("hottest functions by total time (share of busy time)", U.PERCENT)
    sampled_cores: float = shared_key()
    measured_cores: float | None = shared_key()
    counters_note: str | Omitted = shared_key(optional=True)


EVIDENCE = declarations(CpuEvidence)


def run(analysis: Analysis, settings: Settings) -> Finding | NotApplicable:
    """Request threads busy in code no category names, as far as the process's CPU bears the samples out."""
    req = analysis.request_samples()
    total = float(req["count"].sum())
    busy = busy_samples(req)
    if _gil_held_asleep(analysis):
        # waiting behind a holder that sleeps holding the GIL is waiting, not busy (gil_contention
        # names it): only what ran counts
        busy = busy[busy["state"] != ThreadState.GIL]
    busy = _without_wait_exits(analysis, busy)
    busy_total = float(busy["count"].sum())
    if not busy_total:
        return NotApplicable(ID, "the request threads only waited for a GIL held by a sleeping thread")
    busy_share = busy_total / total
    other = busy[busy["phase"] == "other"]
    other_share = float(other["count"].sum()) / busy_total
    python_share = float(busy[busy["state"].isin(GIL_BOUND)]["count"].sum()) / busy_total
    # Saturated threads, scaled by how much of their work no other finding explains.
    score = ramp(busy_share, settings.low, settings.high) * min(1.0, other_share / 0.6)
    # Busy means running on a core: /proc's CPU time has the last word on it. A thread waiting
    # for the GIL is busy only while a holder runs: that too needs the process's CPU (a GIL held
    # by a thread asleep in a C call keeps every waiter "busy" at next to no CPU).
    counters = running_agreement(analysis, req)
    gil_share = float(busy[busy["state"] == ThreadState.GIL]["count"].sum()) / total if total else 0.0
    holder = holder_agreement(analysis, gil_share)
    if not holder.agrees and holder.factor < counters.factor:
        counters = holder
    score *= counters.factor
    # Where the CPU went: the lines the threads ran, not where they queued for the GIL (a thread
    # re-taking it after a socket send waits at the send's line: a thread-per-request HTTP
    # server's hottest "self time" read as its _SocketWriter.write, 181 of 277 samples there waits)
    self_sites = _self_time(analysis, other[other["state"] != ThreadState.GIL], busy_total)
    total_sites = _total_time(analysis, other, busy_total)
    evidence = CpuEvidence(busy_share_of_request_time=busy_share, unclassified_share_of_busy=other_share,
                           python_share_of_busy=python_share, busy_samples=int(busy_total),
                           self_time={f"{s.function} ({s.file.rsplit('/', 1)[-1]}:{s.line})": s.share
                      for s in self_sites},
                           total_time={s.function: s.share for s in total_sites}, sampled_cores=counters.sampled,
                           measured_cores=counters.measured)
    # No self site: no busy sample was in code no category names (the score is 0 then too)
    hottest = self_sites[0].function if self_sites else "The request threads' busy code"
    holds = "running pure Python (holding the GIL)" if python_share > 0.5 else "running native code"
    summary = (f"request threads are busy {pct(busy_share)} of the time, {pct(other_share)} of it in "
               f"code no category names, {holds}" + (f"; hottest: {hottest}" if self_sites else ""))
    if not counters.agrees:
        summary += f" — {counters.note()}"
        evidence = replace(evidence, counters_note=counters.note())
    at = f"{hottest} ({short_path(self_sites[0].file)}:{self_sites[0].line})" if self_sites else hottest
    transport = bool(self_sites) and is_transport_file(self_sites[0].file)
    if transport:
        # A process pool's worker taking in its tasks (reading the pipe under the call queue's
        # lock, unpickling): no faster code of the service's, nor more processes, shrinks that;
        # what it is sent does (pool_transfer, judged across the pool's processes)
        advice = [f"{at} is a process pool's transport: the busy time is taking in the tasks the process is "
                  f"sent (the pipe, the call queue's lock, unpickling), not code to make faster. Send it less "
                  f"with each task, or fewer, larger tasks."]
    elif python_share > 0.5:
        advice = [f"Vectorise {at} with numpy, move it to native code that releases the GIL, or run it in "
                  "processes (more worker processes, a ProcessPoolExecutor): it is pure Python and holds "
                  "the GIL.",
                  "Threads will not add throughput to GIL-bound code: size the pool to the cores."]
    else:
        advice = [f"{hottest} runs native code on every busy core: a faster implementation or "
                  "more cores (workers or replicas) are the levers; threads beyond the cores only "
                  "queue."]
    room = core_room(analysis)
    if transport:
        gain = (1.0, "estimate: the busy time is the pool's transport; its processes' own code buys nothing")
    elif python_share > 0.5 and room is not None:
        gain = (max(1.0, room), f"estimate: GIL-bound Python run in processes can use every usable "
                                f"core: {room:.2f}x the CPU it gets now")
    else:
        gain = (1.0, "estimate: the code already runs on the cores it has")
    # The first advice makes the hottest function cheaper (vectorise it, a faster
    # implementation): the bound if its self time were free, beside the cores' gain (the ranking's).
    levers = [more_cores_lever(*gain)]
    if self_sites:
        own = function_self_share(analysis, busy, hottest, busy_total, self_sites[0].file,
                                  (ThreadState.PYTHON, ThreadState.NATIVE))
        levers.insert(0, remove_work_lever(own, hottest, "the threads' busy time by self time"))
    vectorised = _vectorised(analysis, busy, self_sites[0]) if self_sites and not transport else None
    if vectorised is not None:
        levers.insert(0, vectorised.lever())
        if vectorised.gain > gain[0]:  # the first advice's figure ranks where it buys more
            gain = (vectorised.gain, vectorised.basis())
    return make_finding(ID, settings, score, summary, evidence, self_sites[:3] + total_sites[:2],
                        advice=advice, gain=gain, samples=busy_total, levers=levers,
                        share_samples={"busy_share_of_request_time": total},
                        basis=ScoreBasis("busy_share_of_request_time", lambda s: ramp(
                            s, settings.low, settings.high) * min(1.0, other_share / 0.6)
                            * counters.factor))


def _vectorised(analysis: Analysis, busy: pd.DataFrame, hottest: Site) -> Vectorised | None:
    """The calibrated figure of the first advice, vectorising the hottest function: its GIL-bound
    self time made SPEEDUP times cheaper (checks/vectorise_gain.py), where that is a loop to
    vectorise (hot_loop_share). The kernel's time for the thread (page faults, calls) shows as the
    line running its bytecode; vectorising removes only the interpreter's part: the user time's
    share of it."""
    share = hot_loop_share(analysis, busy, hottest.function, hottest.file, scale=_user_fraction(analysis))
    if share is None:
        return None
    return Vectorised(hottest.function, share, int(float(busy["count"].sum())),
                      "the request threads' busy time by self time", check=ID)


def _user_fraction(analysis: Analysis) -> float:
    """The process's user time over its CPU by its counters; 1 without them."""
    os_ = analysis.os
    if os_ is None or os_.process_user_s is None or os_.process_system_s is None:
        return 1.0
    cpu = os_.process_user_s + os_.process_system_s
    return os_.process_user_s / cpu if cpu > 0 else 1.0


def _gil_held_asleep(analysis: Analysis) -> bool:
    """The kernel and the counters say the GIL's holder was blocked most of the time threads
    waited for it (model/gil_holder.py)."""
    return blocked_share(analysis.gil_holding, wanted_cores(analysis.os)) >= HELD_ASLEEP_SHARE


def _without_wait_exits(analysis: Analysis, busy: pd.DataFrame) -> pd.DataFrame:
    """The busy rows but GIL waits inside a stdlib blocking call: a thread woken from Queue.get
    or Condition.wait re-takes the GIL before the call returns, so it waits its way out of a
    wait there, running none of its code (a pipeline's stages queueing to leave their gets read
    as pure Python "hottest in Condition.wait" and outranked the stage that held the GIL)."""
    leaving = gil_waits_leaving_a_wait(analysis.profile, busy["stack"].to_numpy(dtype=np.int64),
                                       (busy["state"] == ThreadState.GIL).to_numpy())
    return busy[~leaving] if leaving.any() else busy


def _self_time(analysis: Analysis, samples: pd.DataFrame, reference: float, limit: int = 5) -> list[Site]:
    grouped = samples[samples["site"] >= 0].groupby("site")["count"].sum().sort_values(ascending=False)
    return [Site(analysis.frame(int(f)).function, analysis.frame(int(f)).file,
                 analysis.frame(int(f)).line, round(float(c) / reference, 4))
            for f, c in grouped.head(limit).items()]


def _total_time(analysis: Analysis, samples: pd.DataFrame, reference: float, limit: int = 5
                ) -> list[Site]:
    """Inclusive time per function: each Python frame of a stack counted once per sample.
    Bootstrap frames (runpy, `<module>`, a thread's or a server's run loop) are left out: on
    nearly every stack, they do not say where the time goes."""
    per_stack = samples.groupby("stack")["count"].sum()
    totals: dict[tuple[str, str], int] = {}
    for sid, count in per_stack.items():
        seen = set()
        for fid in analysis.profile.stacks[int(sid)]:
            frame = analysis.frame(fid)
            key = (frame.function, frame.file)
            if frame.native or key in seen or is_bootstrap(frame):
                continue
            seen.add(key)
            totals[key] = totals.get(key, 0) + int(count)
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])[:limit]
    return [Site(fn, file, 0, round(c / reference, 4)) for (fn, file), c in ranked]


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 needs=(Input.REQUEST_SAMPLES, Input.BUSY_REQUEST_SAMPLES), uses=(Input.OS_COUNTERS,))
