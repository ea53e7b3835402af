"""gc_pressure: the cyclic garbage collector takes a large share of the process's CPU.

What it finds:
    The share of the process's running samples (native frames) that pass through CPython's
    collector (gc_collect_main, _PyGC_Collect, _Py_RunGC, ...: model/collector.py), whatever
    Python line is above it, with its 95% interval; that share applied to the Python threads'
    CPU by /proc (an estimate of the collector's core-seconds); the Python lines where
    collections started (an allocation there tipped the young generation over its threshold);
    and how much of it is gc.collect() called by code. Not applicable without native frames, or
    where the interpreter's symbols do not name the collector (a stripped build). The share per
    generation is not readable from outside: gc.callbacks inside the process gives it.

Why it matters:
    The collector holds the GIL while it traverses every container of the generations it
    collects. A service holding millions of long-lived containers (a catalog, an index, a
    vocabulary) whose requests leave objects alive across young collections (a response cache,
    objects in flight) gets middle and full collections that traverse the whole heap, and finds
    no garbage: reference counting already frees what dies. In a profile without native frames
    the collector's time lands on whichever line allocated, smeared over the flame graph as
    running Python, and the other threads wait for the GIL behind it: it reads as GIL contention
    or a busy pure-Python function, whose advice (vectorise it, more processes) leaves the
    collector's work as it was.

What to do instead:
    Freeze the long-lived heap after loading it: gc.freeze() moves every object tracked so far
    to a permanent generation no collection traverses (call gc.disable() before loading and
    gc.enable() after the freeze; in a pre-fork server, freeze in the master before forking,
    which also keeps the pages shared). Raise the young threshold (gc.set_threshold) so fewer
    young collections run with requests in flight and fewer of their objects are promoted.
    Where most of the collector's samples are gc.collect() called by code, drop that call from
    the request path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from diagnose.checks.base import (Finding, Lever, LeverKind, NotApplicable, ScoreBasis, Site,
                                  amdahl, busy_samples, make_finding, pct, ramp)
from diagnose.checks.evidence import shared
from diagnose.checks.spec import NOT_MEASURED, CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Evidence as E
from diagnose.checks.spec import Unit as U

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis
    from diagnose.model.collector import CollectorShare

ID = "gc_pressure"

# The young threshold the first advice names: the collector then runs about 70 times less often
# on the young generation (700 by default), and fewer objects in flight are promoted. The issue
# that asked for this check measured 1.42x from gc.freeze() with gc.set_threshold(50_000, 20, 100).
THRESHOLD = (50_000, 20, 100)
# A share this large says "large", not a figure to trust: the gain is capped there.
MAX_SHARE = 0.75


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "The garbage collector takes a large share of the CPU"
    what: str = ("Share of the process's running samples (native frames) inside CPython's cyclic garbage "
                 "collector, whatever Python line is above it.")
    advice: tuple[str, ...] = (
        ("Keep fewer containers alive across requests: cache bytes or tuples of numbers rather than dicts and "
         "lists, use __slots__ classes; gc.disable() on the request path is the upper bound, safe only when "
         "nothing makes reference cycles."),
    )
    # the collector's share of the running samples
    low: float = 0.05
    high: float = 0.35
    # the process's CPU, in cores, under which the collector costs latency rather than throughput
    busy_cores: float = 0.2
    # the request threads' busy share under which a gain in throughput is not predicted
    saturated_share: float = 0.5


EVIDENCE = {
    **shared("fix"),
    "collector_share": E("share of the running samples inside the garbage collector (native frames)",
                         U.PERCENT),
    "collector_samples": E("running samples inside the garbage collector", U.SAMPLES),
    "collector_running_samples": E("running native samples of the process's Python threads", U.SAMPLES),
    "collector_cpu_s": E("collector CPU over the window (share x the Python threads' CPU by /proc), an estimate",
                         U.SECONDS, none=NOT_MEASURED),
    "collector_cores": E("cores the collector kept busy, an estimate", U.CORES, none=NOT_MEASURED),
    "collector_share_of_process_cpu": E("share of the process's CPU in the collector, an estimate",
                                        U.PERCENT, none=NOT_MEASURED),
    "explicit_collect_share": E("share of the collector's samples in gc.collect() called by code",
                                U.PERCENT),
    "collector_functions": E("the collector's innermost functions (samples)", U.NUMBER),
    "generations": E("collections per generation", U.TEXT),
}


def _score(share: float, cores: float | None, settings: Settings) -> float:
    """The collector's share, ramped; scaled down for a process that used next to no CPU (the
    collector then costs its requests latency, not the service throughput)."""
    factor = 1.0 if cores is None else min(1.0, cores / settings.busy_cores)
    return ramp(share, settings.low, settings.high) * factor


def _gain(share: float) -> float:
    """Throughput if the collector's work went away: Amdahl on its share of the busy CPU,
    capped (MAX_SHARE)."""
    return amdahl(min(share, MAX_SHARE))


def _busy_share(analysis: Analysis) -> float | None:
    """The request threads' share of time running or runnable (None without request threads)."""
    req = analysis.request_samples()
    total = float(req["count"].sum())
    return float(busy_samples(req)["count"].sum()) / total if total else None


def run(analysis: Analysis, settings: Settings) -> Finding | NotApplicable:
    measured = analysis.collector
    if measured is None:
        return NotApplicable(ID, "needs native samples of the process's Python threads (py-spy --native, or "
                                 "the sparse native calibration `attach` takes): the collector runs in C, "
                                 "under whichever Python line allocated")
    if not measured.readable:
        return NotApplicable(ID, "the interpreter's symbols do not name the collector's functions (a build "
                                 "stripped of its static symbols): its time cannot be told from the code's")
    if not measured.running_samples:
        return NotApplicable(ID, "no native sample caught a Python thread of the process running")
    os_ = analysis.os
    cores = os_.cpu_s / os_.window_s if os_ is not None and os_.window_s else None
    share = measured.share
    score = _score(share, cores, settings)
    busy = _busy_share(analysis)
    saturated = busy is None or busy >= settings.saturated_share
    gain, basis = _predicted(measured, saturated, busy)
    evidence: dict[str, object] = {
        "collector_share": share,
        "collector_samples": measured.collector_samples,
        "collector_running_samples": measured.running_samples,
        "collector_cpu_s": measured.cpu_s,
        "collector_cores": (measured.cpu_s / os_.window_s
                            if measured.cpu_s is not None and os_ is not None and os_.window_s else None),
        "collector_share_of_process_cpu": measured.share_of_cpu,
        "explicit_collect_share": measured.explicit_share,
        "collector_functions": dict(measured.functions),
        "generations": "not readable from outside (gc.callbacks inside the process counts them)",
        "fix": [{"knob": "gc_freeze", "value": True},
                {"knob": "gc_threshold", "value": list(THRESHOLD)}],
    }
    sites = [Site(s.function, s.file, s.line, round(s.samples / measured.collector_samples, 4))
             for s in measured.sites] if measured.collector_samples else []
    where = (f"; collections started most under {sites[0].function} "
             f"({sites[0].file.rsplit('/', 1)[-1]}:{sites[0].line})") if sites else ""
    cpu_words = (f" ({measured.cpu_s:.2f} s of CPU, an estimate)" if measured.cpu_s is not None
                 and measured.collector_samples else "")
    summary = (f"{pct(share)} of the running samples ({measured.collector_samples} of "
               f"{measured.running_samples}) were inside the collector{cpu_words}{where}")
    threshold = ", ".join(f"{n:_}" for n in THRESHOLD)
    advice = [
        f"Call gc.freeze() once the long-lived objects are loaded (gc.disable() before loading, gc.freeze() "
        f"then gc.enable() after; in a pre-fork server, in the master before forking), and raise the young "
        f"threshold with gc.set_threshold({threshold}): the collector ran in {pct(share)} of the running "
        f"samples, traversing objects that reference counting frees anyway.",
    ]
    if measured.explicit_share >= 0.5 and sites:
        advice.append(f"{pct(measured.explicit_share)} of the collector's samples are gc.collect() called by "
                      f"code, most under {sites[0].function}: drop the call from the request path.")
    advice += list(settings.advice)
    levers = [Lever(LeverKind.REMOVE_WORK, round(_gain(share), 2), "if the collector cost nothing",
                    f"estimate: the collector is {pct(share)} of the running samples; if its work went away, "
                    f"at most {_gain(share):.2f}x (Amdahl), an upper bound", upper_bound=True)]
    return make_finding(ID, settings, score, summary, evidence, sites, advice=advice,
                        gain=(gain, basis), samples=measured.running_samples, levers=levers,
                        basis=ScoreBasis("collector_share", lambda s: _score(s, cores, settings),
                                         (lambda s: _gain(s)) if saturated else None))


def _predicted(measured: CollectorShare, saturated: bool, busy: float | None) -> tuple[float, str]:
    share = measured.share
    if not saturated:
        return 1.0, (f"estimate: the request threads were busy {pct(busy or 0.0)} of the time, so the "
                     f"collector's {pct(share)} of the running samples costs their requests latency, "
                     f"not the service throughput")
    gain = _gain(share)
    capped = f" (its share capped at {pct(MAX_SHARE)})" if share > MAX_SHARE else ""
    return gain, (f"estimate: the collector is {pct(share)} of the running samples "
                  f"({measured.collector_samples} of {measured.running_samples}, native frames) of threads "
                  f"busy running or waiting for the GIL it holds; freezing the long-lived heap and fewer "
                  f"young collections remove most of its work: at most {gain:.2f}x{capped} (Amdahl)")


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 uses=(Input.NATIVE_FRAMES, Input.OS_COUNTERS))
