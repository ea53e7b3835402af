"""gc_pressure: the cyclic garbage collector holds the GIL a large share of the time.

What it finds:
    How much of the window CPython's cyclic collector held the GIL. Read from the process's
    memory where `attach` could (collect/gc_state.py): the interpreter's `collecting` flag fifty
    times a second (the share of the window a collection was in progress), and the collections
    of each generation over the window (young, middle, full); else from native frames: the share of the
    process's running samples that pass through the collector's functions (gc_collect_main,
    _PyGC_Collect, _Py_RunGC, ...: model/collector.py), whatever Python line is above them.
    Beside it, the Python lines where collections began (an allocation there tipped the young
    generation over its threshold), the share of the running samples applied to the Python
    threads' CPU by /proc (an estimate of the collector's core-seconds), and how much of it is
    gc.collect() called by code. Not applicable with neither (no native frames, a stripped
    build, a state not readable).

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
    Where most of the collector's samples are gc.collect() called by code, that call comes
    first: drop it from the request path (each is a full collection over the whole heap).

The gain is Amdahl on the collector's share of the process's CPU: the window's share scaled
(fitted where collections interleave with work on other cores), or the native samples' direct
measure where it rests on enough of them and says more. Past 75% of the CPU the figure is capped:
a floor where the advice drops a gc.collect() call (one per request, holding the GIL 99% of the
window, measured 251x where the cap said 4.00x), else a figure that says only "large".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from diagnose.checks.base import (MAX_CPU_SHARE, Finding, NotApplicable, ScoreBasis,
                                  busy_samples, cpu_share_capped, cpu_share_gain, cpu_share_lever, cpu_weight,
                                  floored_at_cpu_cap, make_finding, pct, ramp)
from diagnose.checks.spec import NOT_MEASURED, CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements
from diagnose.report.model.findings import Fix

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis
    from diagnose.model.collector import CollectorShare
    from diagnose.model.line_samples import LineSamples

ID = "gc_pressure"

# The young threshold the first advice names: the collector then runs about 70 times less often
# on the young generation (700 by default), and fewer objects in flight are promoted. The issue
# that asked for this check measured 1.42x from gc.freeze() with gc.set_threshold(50_000, 20, 100).
THRESHOLD = (50_000, 20, 100)
# The collector's share of the process's CPU per unit of its share of the window: a collecting
# thread holds the GIL while off a core (page faults, preemption), and the process runs more
# than one core's worth between collections (the GIL's hand-offs), so the window's share
# overstates what freeing it buys. Fitted on the gc_heavy fixture (checks/calibration.py):
# quiet, gc.callbacks measured 36% of its CPU where 48% of the window was collecting; the first
# advice measured 1.42x where the attach read 52% of the window (Amdahl on 0.30 of it) and
# 1.57-1.60x on a loaded machine (0.36-0.38 of shares near 0.55).
CPU_PER_WINDOW = 0.6
# Of the collector's samples, the share in gc.collect() called by code at which the call is the
# cause: each is a full collection over every tracked object, and dropping it removes that work
# whole. Measured on fixtures/servers/collect_per_request.py (a gc.collect() per request over a
# 1.2M-container catalogue): the call dropped 251x, gc.freeze() with the call kept 211x.
EXPLICIT_SHARE = 0.5


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "The garbage collector holds the GIL much of the time"
    what: str = ("Share of the window CPython's cyclic garbage collector was collecting, read from the process's "
                 "memory; else the share of its running samples (native frames) inside the collector, whatever "
                 "Python line is above it.")
    advice: tuple[str, ...] = (
        ("Keep fewer containers alive across requests: cache bytes or tuples of numbers rather than dicts and "
         "lists, use __slots__ classes; gc.disable() on the request path is the upper bound, safe only when "
         "nothing makes reference cycles."),
    )
    # the collector's share (of the window, or of the running samples)
    low: float = 0.10
    high: float = 0.40
    # reads of the collector's state needed before their share is the score's basis
    min_polls: int = 50
    # native samples of the Python threads running, at least, for their share to score: CI's
    # attach of the gil_contention fixture on CPython 3.10 caught 2 of 6 inside the collector
    # (33%, known only to 10-70%) and led with gc_pressure over a GIL convoy scored on 864 samples
    min_running_samples: int = 20
    # the process's CPU, in cores, under which the collector costs latency rather than throughput
    busy_cores: float = 0.2
    # the request threads' busy share under which a gain in throughput is not predicted
    saturated_share: float = 0.5


@dataclass(frozen=True, kw_only=True)
class GcEvidence(Measurements):
    collector_held_share: float | None = key(
        "share of the window a collection was in progress (read from memory)", U.PERCENT, none=NOT_MEASURED)
    collector_polls: int | None = key(
        "reads of the collector's state from the process's memory", U.NUMBER, none=NOT_MEASURED)
    collections: dict[str, int] | None = key(
        "collections per generation over the window (read from memory)", U.NUMBER, none=NOT_MEASURED)
    collector_share: float | None = key(
        "share of the running samples inside the garbage collector (native frames)", U.PERCENT, none=NOT_MEASURED)
    collector_samples: int | None = key(
        "running samples inside the garbage collector", U.SAMPLES, none=NOT_MEASURED)
    collector_running_samples: int | None = key(
        "running native samples of the process's Python threads", U.SAMPLES, none=NOT_MEASURED)
    collector_cpu_s: float | None = key(
        "collector CPU over the window (share x the Python threads' CPU by /proc), an estimate", U.SECONDS,
        none=NOT_MEASURED)
    collector_cores: float | None = key(
        "cores the collector kept busy, an estimate", U.CORES, none=NOT_MEASURED)
    collector_share_of_process_cpu: float | None = key(
        "share of the process's CPU in the collector, an estimate", U.PERCENT, none=NOT_MEASURED)
    explicit_collect_share: float = key(
        "share of the collector's samples in gc.collect() called by code", U.PERCENT)
    collector_functions: dict[str, int] = key("the collector's innermost functions (samples)", U.NUMBER)
    # where collections began (an allocation there tipped the young generation over): not the
    # code the advice changes, so not the finding's sites
    collection_sites: dict[str, float] | None = key(
        "where collections began (share of the collector's samples)", U.PERCENT, none=NOT_MEASURED)
    # both knobs, applied together
    fix: tuple[Fix, ...] = shared_key()


EVIDENCE = declarations(GcEvidence)


def _score(share: float, cores: float | None, settings: Settings) -> float:
    """The collector's share, ramped; scaled down for a process that used next to no CPU (the
    collector then costs its requests latency, not the service throughput)."""
    return ramp(share, settings.low, settings.high) * cpu_weight(cores, settings.busy_cores)


def _cpu_share(basis_key: str, share: float, direct: float | None = None) -> float:
    """The collector's share of the CPU a basis share stands for: the native samples' is one
    already, the window's is scaled (CPU_PER_WINDOW), unless the native samples' `direct` measure
    says more: the scale cannot exceed 0.6 of the CPU even with a collection in progress all the
    window, when nearly all the process's CPU is the collector's."""
    scaled = share * CPU_PER_WINDOW if basis_key == "collector_held_share" else share
    return max(scaled, direct) if direct is not None else scaled


def _direct_share(measured: CollectorShare, settings: Settings) -> float | None:
    """The collector's share of the process's CPU by its native samples and the counters, where
    enough running samples stand behind it."""
    if not measured.readable or measured.running_samples < max(1, settings.min_running_samples):
        return None
    return measured.share_of_cpu


def _busy_share(analysis: Analysis) -> float | None:
    """The request threads' share of time running or runnable (None without request threads)."""
    req = analysis.request_samples()
    total = float(req["count"].sum())
    return float(busy_samples(req)["count"].sum()) / total if total else None


@dataclass(frozen=True)
class _Basis:
    """The share the score rests on: the polled share of the window a collection was in
    progress (from memory) where there are enough polls, else the share of the running native
    samples; its evidence key, its count and its words."""

    key: str
    share: float
    count: int
    words: str  # "of the window (412 polls of the collector's state)"


def _basis(measured: CollectorShare, settings: Settings) -> _Basis | None:
    """The share of the window a collection was in progress, read from memory, where there are
    enough reads; else the native samples' share."""
    held = measured.held
    if held is not None and held.polls >= settings.min_polls and held.collecting_share is not None:
        return _Basis("collector_held_share", held.collecting_share, held.polls,
                      f"of the window ({held.polls} reads of the collector's state)")
    if measured.readable and measured.running_samples >= max(1, settings.min_running_samples):
        return _Basis("collector_share", measured.share, measured.running_samples,
                      f"of the running samples ({measured.collector_samples} of {measured.running_samples}, "
                      f"native frames)")
    return None


def run(analysis: Analysis, settings: Settings) -> Finding | NotApplicable:
    """The collector's share of the window (read from memory) or of the running samples, weighed by the CPU used."""
    measured = analysis.collector
    if measured is None:
        return NotApplicable(ID, "needs native samples of the process's Python threads (py-spy --native, or "
                                 "the sparse native calibration `attach` takes), or the collector's state read "
                                 "from its memory (`attach`): the collector runs in C, under whichever Python "
                                 "line allocated")
    basis = _basis(measured, settings)
    if basis is None:
        why = (measured.held.unreadable if measured.held is not None and measured.held.unreadable
               else "its state was not read")
        if measured.samples and not measured.readable:
            return NotApplicable(ID, "the interpreter's symbols do not name the collector's functions (a build "
                                     f"stripped of its static symbols), and {why}: its time cannot be told "
                                     "from the code's")
        if measured.readable and measured.running_samples:
            return NotApplicable(ID, f"only {measured.running_samples} native samples caught a Python thread of the "
                                     f"process running (fewer than {settings.min_running_samples}: too few to tell "
                                     f"the collector's share), and {why}")
        return NotApplicable(ID, f"no native sample caught a Python thread of the process running, and {why}")
    os_ = analysis.os
    cores = os_.cpu_s / os_.window_s if os_ is not None and os_.window_s else None
    share = basis.share
    score = _score(share, cores, settings)
    busy = _busy_share(analysis)
    saturated = busy is None or busy >= settings.saturated_share
    # the native samples' own measure, beside a basis read from memory (a native basis is it)
    direct = _direct_share(measured, settings) if basis.key == "collector_held_share" else None
    cpu_share = _cpu_share(basis.key, share, direct)
    top = measured.sites[0] if measured.collector_samples and measured.sites else None
    # the line calling gc.collect() most (the collections' top line may be an allocation's)
    explicit = (measured.explicit_sites[0] if measured.explicit_share >= EXPLICIT_SHARE and measured.explicit_sites
                else None)
    gain, gain_words = _predicted(basis, cpu_share, saturated, busy, explicit is not None)
    counts = measured.held.collections if measured.held is not None else None
    polls = measured.held.polls if measured.held is not None else 0
    evidence = GcEvidence(
        collector_held_share=measured.held_share,
        collector_polls=measured.held.polls if measured.held is not None else None,
        collections=dict(zip(("young", "middle", "full"), counts)) if counts is not None else None,
        collector_share=share if basis.key == "collector_share" else (
            measured.share if measured.running_samples and measured.readable else None),
        collector_samples=measured.collector_samples if measured.readable else None,
        collector_running_samples=measured.running_samples if measured.readable else None,
        collector_cpu_s=measured.cpu_s if measured.readable else None,
        collector_cores=(measured.cpu_s / os_.window_s if measured.readable and measured.cpu_s is not None
                         and os_ is not None and os_.window_s else None),
        collector_share_of_process_cpu=measured.share_of_cpu if measured.readable else None,
        explicit_collect_share=measured.explicit_share,
        collector_functions=dict(measured.functions),
        collection_sites={_line_words(s): round(s.samples / measured.collector_samples, 4)
                          for s in measured.sites} if measured.collector_samples else None,
        fix=((Fix("drop_gc_collect", f"{explicit.function}:{explicit.line}"),) if explicit is not None
             else (Fix("gc_freeze", True), Fix("gc_threshold", list(THRESHOLD)))))
    where = f"; collections began most under {_line_words(top)}" if top is not None else ""
    if explicit is not None:
        where = (f"; {pct(measured.explicit_share)} of the collector's samples in gc.collect() called at "
                 f"{_line_words(explicit)}")
    generations = (f" ({counts[0]} young, {counts[1]} middle, {counts[2]} full collections)"
                   if counts is not None else "")
    summary = f"a collection was in progress {pct(share)} {basis.words}{generations}{where}"
    if basis.key == "collector_share":
        summary = f"{pct(share)} {basis.words} were inside the collector{generations}{where}"
    threshold = ", ".join(f"{n:_}" for n in THRESHOLD)
    freeze = (f"Call gc.freeze() once the long-lived objects are loaded (gc.disable() before loading, "
              f"gc.freeze() then gc.enable() after; in a pre-fork server, in the master before forking), and raise "
              f"the young threshold with gc.set_threshold({threshold}): the collector held the GIL {pct(share)} "
              f"{basis.words}, traversing objects that reference counting frees anyway.")
    advice = [freeze]
    if explicit is not None:
        full = f" ({counts[2]} full collections in the window)" if counts is not None else ""
        advice = [f"Drop the gc.collect() call at {_line_words(explicit)} from the request path: "
                  f"{pct(measured.explicit_share)} of the collector's "
                  f"samples are gc.collect() called by code, each a full collection over every tracked "
                  f"object{full}, while the collector held the GIL {pct(share)} {basis.words}. Where memory must "
                  f"go back, collect between batches or in a maintenance thread.",
                  "Then, or where the call must stay: " + freeze[0].lower() + freeze[1:]]
    advice += list(settings.advice)
    detail = (f" ({pct(share)} {basis.words}"
              + (f", x{CPU_PER_WINDOW:g}" if cpu_share == share * CPU_PER_WINDOW != share
                 else ", by its native samples" if cpu_share != share else "") + ")")
    levers = [cpu_share_lever("if the collector cost nothing", "the collector is", cpu_share, detail,
                              "its work went away")]
    found = make_finding(ID, settings, score, summary, evidence, advice=advice,
                         gain=(gain, gain_words), samples=basis.count, levers=levers,
                         share_samples={"collector_share": measured.running_samples,
                                        "collector_held_share": polls},
                         basis=ScoreBasis(basis.key, lambda s: _score(s, cores, settings),
                                          (lambda s: cpu_share_gain(_cpu_share(basis.key, s, direct)))
                                          if saturated else None))
    # dropping the gc.collect() call removes the collector's work whole: past the cap the figure
    # is a floor (251x measured where it said 4.00x); freezing the heap removes most of it only
    return floored_at_cpu_cap(found, "the collector", cpu_share) if saturated and explicit is not None else found


def _line_words(site: LineSamples) -> str:
    """"app (app.py:49)": a line as the summary, the advice and the evidence name it."""
    return f"{site.function} ({site.file.rsplit('/', 1)[-1]}:{site.line})"


def _predicted(basis: _Basis, cpu_share: float, saturated: bool, busy: float | None,
               explicit: bool) -> tuple[float, str]:
    share = basis.share
    if not saturated:
        return 1.0, (f"estimate: the request threads were busy {pct(busy or 0.0)} of the time, so the "
                     f"collector's {pct(share)} {basis.words} costs their requests latency, not the "
                     f"service throughput")
    gain = cpu_share_gain(cpu_share)
    capped = cpu_share_capped(cpu_share)
    scaled = (f", about {pct(cpu_share)} of the CPU (x{CPU_PER_WINDOW:g}: a collecting thread holds the GIL "
              f"off a core too; calibrated on the gc_heavy fixture)" if cpu_share == share * CPU_PER_WINDOW != share
              else f", {pct(cpu_share)} of the process's CPU by its native samples" if cpu_share != share else "")
    remedy = ("dropping the gc.collect() call removes its work" if explicit
              else "freezing the long-lived heap and fewer young collections remove most of its work")
    bound = (f"at most {gain:.2f}x (Amdahl)" if not capped
             else f"at least {gain:.2f}x (Amdahl, its share capped at {pct(MAX_CPU_SHARE)})" if explicit
             else f"about {gain:.2f}x (Amdahl, its share capped at {pct(MAX_CPU_SHARE)}, where a share says only "
                  f"'large')")
    return gain, (f"estimate: the collector held the GIL {pct(share)} {basis.words}{scaled}, which the "
                  f"threads busy running or waiting for the GIL wait behind; {remedy}: {bound}")


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 uses=(Input.NATIVE_FRAMES, Input.OS_COUNTERS))
