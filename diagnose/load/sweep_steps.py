"""`diagnose sweep`: step the load up against a service, find where latency breaks (the knee), and
say whether the curve's top is the service's or the load generator's.

A step is a level of load: concurrent connections (the closed model: each sends its next request
when the last is answered) or requests per second (the open model: requests leave on schedule,
constant or Poisson, whether or not the service keeps up, and each latency counts from the
request's intended send time, so a stall shows in the percentiles instead of slowing the
generator down: no coordinated omission). See diagnose/load/loadgen.py.

Each step is a warm-up run that is discarded (thread pools, memory pools and connection set-up
lie for the first requests), then measurement windows until the step is *stable*: throughput
and p99 of the last three windows each within ±10% of their mean (Triton perf_analyzer's rule),
at most `max_windows`. A step that never settles is kept and marked unstable. Its percentiles
come from the HDR histograms of those windows added together (every request counted once), not
from an average of per-window percentiles. The sweep stops early when throughput has gained less
than 5% over the last `patience` steps (model_analyzer's rule), when more than 1% of requests
fail, when p99 passes the SLO, or when the sweep's time budget is spent.

The knee is the step after which p99 grows faster than throughput: from it to the next step,
latency's growth factor exceeds throughput's by more than 10% (below the knee more load buys
throughput at flat latency; beyond it, more load only queues). Capacity is the best throughput;
the operating point is 80% of it (the soak level of the load-testing notes).

The generator shares the cores with the service on one machine. Every window records the CPU
the generator used (its own accounting), the CPU of the service's process tree (with `pids`) and
the machine's busy cores. A step is *generator-limited* when the generator used at least 90% of
the cores it can use, or when the machine was out of cores and the generator held a large
share of them, or when the step's throughput reached 80% of the generator's measured ceiling
(`generator_ceiling_rps`, benchmarks/generator_ceiling.py), or (open model) when the generator
itself sent requests late (its schedule lag: dispatch time minus intended time, p99). When the best step is
generator-limited the sweep says so: its capacity is a lower bound.

`run_sweep` takes the measuring function and the CPU meter as arguments, so the policy is tested
on synthetic services (tests/unit/test_sweep.py) and the real run is the same code path.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import psutil

from diagnose.collect.procfs import cores_available, machine_idle_seconds, parse_stat, read_proc_text
from diagnose.load.loadgen import LoadResult
from diagnose.report.step_diagnosis import StepDiagnosis, StepVerdict
from diagnose.report.load_report import (GeneratorInfo, Machine, Percentiles, StepGenerator, StepRef,
                                 SummaryKnee, SweepKnee, SweepReport, SweepSettings, SweepStep,
                                 SweepSummary, SweepTarget, WindowFigures, Why)

# Judgement thresholds, named once (the docstring above explains each).
GENERATOR_SATURATED = 0.90      # of the generator's own capacity in cores
MACHINE_FULL = 0.90             # of the machine's cores busy ...
GENERATOR_SHARE = 0.35          # ... with at least this share of the busy cores the generator's
CEILING_SHARE = 0.80            # of the generator's measured ceiling (req/s)
OPERATING_SHARE = 0.80          # of capacity: the level to run or soak at
OTHER_LOAD = 0.25               # cores used by the rest of the machine worth a warning
GENERATOR_LAG_MS = 5.0          # open model: the generator's own p99 lateness that marks a step
KNEE_MARGIN = 0.10              # p99 must outgrow throughput by this much to be a knee


def doubling_levels(start: int, maximum: int) -> tuple[int, ...]:
    """start, 2·start, 4·start, ... up to `maximum` (which is included even off the doubling)."""
    if start < 1 or maximum < start:
        raise ValueError("need 1 <= start <= maximum")
    levels, c = [], start
    while c < maximum:
        levels.append(c)
        c *= 2
    return tuple(levels + [maximum])


def parse_levels(text: str, kind=int) -> tuple:
    """`"1,2,4,8"` -> (1, 2, 4, 8) (`kind=float` for rates); ValueError naming what is wrong."""
    what = "concurrency levels must be whole numbers" if kind is int else "rates must be numbers"
    try:
        levels = tuple(kind(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"{what} separated by commas: {text!r}")
    if not levels:
        raise ValueError("no level given")
    return levels


# -- CPU accounting -----------------------------------------------------------------------------

@dataclass(frozen=True)
class CpuReading:
    at: float                 # time.monotonic()
    service_cpu_s: float | None
    machine_idle_s: float | None


class CpuMeter:
    """The CPU of the service's process trees (each pid and its live descendants) and the
    machine's idle time, read at the start and end of each window."""

    def __init__(self, pids: Sequence[int] = ()):
        self.pids = list(pids)
        self.cores = cores_available(0)

    def _service_cpu(self) -> float | None:
        if not self.pids:
            return None
        seen, total = set(), 0.0
        for pid in self.pids:
            try:
                tree = [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]
            except psutil.Error:
                tree = [pid]
            for p in tree:
                if p in seen:
                    continue
                seen.add(p)
                stat = read_proc_text(f"/proc/{p}/stat")
                if stat:
                    total += parse_stat(stat)[2]
        return total

    def read(self) -> CpuReading:
        return CpuReading(time.monotonic(), self._service_cpu(), machine_idle_seconds())


# -- one window, one step -----------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    rps: float
    requests: int                 # answered (any status)
    errors: int                   # socket errors + answers outside 2xx/3xx
    attempts: int                 # answered + socket errors
    duration_s: float
    p50_ms: float | None
    p90_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    generator_cores: float | None
    generator_capacity_cores: float
    service_cores: float | None
    machine_busy_cores: float | None
    max_ms: float | None = None
    errors_by_kind: dict = field(default_factory=dict)
    lag_ms: float | None = None   # open model: the generator's own lateness, p99
    histogram: object = None      # HDR histogram of the window's latencies (µs), when recorded
    histogram_source: str | None = None

    @classmethod
    def from_load(cls, result: LoadResult, before: CpuReading | None, after: CpuReading | None,
                  cores: int) -> Window:
        service = busy = None
        if before is not None and after is not None and after.at > before.at:
            wall = after.at - before.at
            if before.service_cpu_s is not None and after.service_cpu_s is not None:
                service = max(0.0, after.service_cpu_s - before.service_cpu_s) / wall
            if before.machine_idle_s is not None and after.machine_idle_s is not None:
                idle = max(0.0, after.machine_idle_s - before.machine_idle_s) / wall
                busy = min(float(cores), max(0.0, cores - idle))
        kinds = getattr(result, "errors_by_kind", None)
        if kinds is None:
            kinds = dict(result.socket_errors, non_2xx=result.non_2xx)
        return cls(rps=result.requests_per_second, requests=result.requests,
                   errors=result.errors,
                   attempts=result.requests + sum(result.socket_errors.values()),
                   duration_s=result.duration_s,
                   p50_ms=result.latency_p50_ms, p90_ms=result.latency_p90_ms,
                   p95_ms=result.latency_p95_ms, p99_ms=result.latency_p99_ms,
                   generator_cores=result.generator_cores,
                   generator_capacity_cores=result.generator_capacity_cores,
                   service_cores=service, machine_busy_cores=busy,
                   max_ms=result.latency_max_ms,
                   errors_by_kind={k: int(v) for k, v in kinds.items() if v},
                   lag_ms=getattr(result, "schedule_lag_ms", None),
                   histogram=getattr(result, "histogram", None),
                   histogram_source=getattr(result, "histogram_source", None))


def _mean(values):
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def within(values: Sequence[float | None], tolerance: float) -> bool:
    """Every value within ±tolerance of their mean (False when one is missing or all are 0)."""
    present = [v for v in values if v is not None]
    if not values or len(present) < len(values):
        return False
    mean = statistics.fmean(present)
    if mean <= 0:
        return False
    return all(abs(v - mean) <= tolerance * mean for v in present)


PERCENTILES = ("p50", "p90", "p95", "p99", "max")


@dataclass
class Step:
    level: float                  # connections (closed model) or requests/s (open model)
    model: str = "closed"
    windows: list[Window] = field(default_factory=list)
    warmup: Window | None = None
    stable: bool = False
    judged_on: int = 3
    diagnosis: StepDiagnosis | None = None  # the verdict under this step's load (with --pid)

    @property
    def concurrency(self) -> int | None:
        return int(self.level) if self.model == "closed" else None

    @property
    def rate(self) -> float | None:
        return float(self.level) if self.model == "open" else None

    @property
    def label(self) -> str:
        return (f"concurrency {int(self.level)}" if self.model == "closed"
                else f"{self.level:g} req/s")

    @property
    def last(self) -> list[Window]:
        return self.windows[-self.judged_on:]

    @property
    def rps(self) -> float:
        return _mean(w.rps for w in self.last) or 0.0

    @property
    def pooled(self) -> bool:
        """The step's percentiles come from its windows' histograms added together."""
        return bool(self.last) and all(w.histogram is not None for w in self.last)

    def latency(self, name: str) -> float | None:
        """Percentile `name` ("p50" ... "p99", "max"; a trailing "_ms" is accepted) in ms of
        every request of the judged windows: from their HDR histograms pooled when recorded,
        else the mean of each window's percentile (the max of the maxima)."""
        name = name.removesuffix("_ms")
        if self.pooled:
            return self._pooled_percentiles().get(name)
        if name == "max":
            values = [w.max_ms for w in self.last if w.max_ms is not None]
            return max(values) if values else None
        return _mean(getattr(w, f"{name}_ms") for w in self.last)

    def _pooled_percentiles(self) -> dict:
        from diagnose.load.latency import merge, percentiles_ms

        key = tuple(id(w) for w in self.last)
        cached = getattr(self, "_pooled_cache", None)
        if cached is None or cached[0] != key:
            cached = (key, percentiles_ms(merge([w.histogram for w in self.last])))
            self._pooled_cache = cached
        return cached[1]

    def latencies(self) -> Percentiles:
        """Every percentile in ms, rounded as the report writes them."""
        return Percentiles(p50=_r(self.latency("p50")), p90=_r(self.latency("p90")),
                           p95=_r(self.latency("p95")), p99=_r(self.latency("p99")),
                           max=_r(self.latency("max")))

    @property
    def requests(self) -> int:
        return sum(w.requests for w in self.last)

    @property
    def error_count(self) -> int:
        return sum(w.errors for w in self.last)

    @property
    def errors_by_kind(self) -> dict:
        kinds: dict = {}
        for w in self.last:
            for kind, count in w.errors_by_kind.items():
                kinds[kind] = kinds.get(kind, 0) + count
        return kinds

    @property
    def error_rate(self) -> float:
        total = sum(w.attempts for w in self.last)
        return sum(w.errors for w in self.last) / total if total else 0.0

    @property
    def lag_ms(self) -> float | None:
        """Open model: the generator's worst p99 lateness over the judged windows."""
        values = [w.lag_ms for w in self.last if w.lag_ms is not None]
        return max(values) if values else None

    @property
    def generator_cores(self) -> float | None:
        return _mean(w.generator_cores for w in self.last)

    @property
    def service_cores(self) -> float | None:
        return _mean(w.service_cores for w in self.last)

    @property
    def machine_busy_cores(self) -> float | None:
        return _mean(w.machine_busy_cores for w in self.last)

    @property
    def other_cores(self) -> float | None:
        """Cores the rest of the machine used meanwhile (busy - service - generator); known only
        with the service's pids."""
        busy, service, generator = self.machine_busy_cores, self.service_cores, self.generator_cores
        if busy is None or service is None or generator is None:
            return None
        return max(0.0, busy - service - generator)

    def generator_limits(self, cores: int, ceiling_rps: float | None) -> list[str]:
        """Why this step's throughput may be the generator's limit, not the service's."""
        reasons = []
        gen = self.generator_cores
        capacity = self.last[-1].generator_capacity_cores if self.windows else 1.0
        if gen is not None and gen >= GENERATOR_SATURATED * capacity:
            reasons.append(f"the load generator used {gen:.2f} of the {capacity:g} cores it can "
                           f"use")
        busy = self.machine_busy_cores
        if (gen is not None and busy is not None and busy >= MACHINE_FULL * cores
                and gen >= GENERATOR_SHARE * busy):
            reasons.append(f"the machine's {cores} cores were busy ({busy:.2f}) and the load "
                           f"generator held {gen:.2f} of them")
        if ceiling_rps and self.rps >= CEILING_SHARE * ceiling_rps:
            reasons.append(f"{self.rps:,.0f} req/s is {self.rps / ceiling_rps:.0%} of the load "
                           f"generator's measured ceiling ({ceiling_rps:,.0f} req/s)")
        lag = self.lag_ms
        if lag is not None and lag > GENERATOR_LAG_MS:
            reasons.append(f"the load generator sent requests up to {lag:,.1f} ms behind "
                           f"schedule (p99): it could not keep the rate")
        return reasons


# -- the sweep ----------------------------------------------------------------------------------

Measure = Callable[[float, int], LoadResult]  # (level, seconds) -> one load run


@dataclass
class SweepResult:
    settings: SweepSettings
    steps: list[Step]
    stop_reason: str
    cores: int
    started_at: float
    ended_at: float
    interrupted: str | None = None  # the signal's name when one ended the sweep


def measure_step(level: float, settings: SweepSettings, measure: Measure,
                 meter: CpuMeter | None, log: Callable[[str], None] = lambda _m: None) -> Step:
    cores = meter.cores if meter is not None else cores_available(0)
    step = Step(level, settings.model, judged_on=settings.stable_windows)
    if settings.warmup_s:
        step.warmup = Window.from_load(measure(level, settings.warmup_s), None, None, cores)
    while len(step.windows) < settings.max_windows:
        before = meter.read() if meter is not None else None
        result = measure(level, settings.window_s)
        after = meter.read() if meter is not None else None
        step.windows.append(Window.from_load(result, before, after, cores))
        if len(step.windows) >= settings.stable_windows:
            last = step.last
            if (within([w.rps for w in last], settings.stability)
                    and within([w.p99_ms for w in last], settings.stability)):
                step.stable = True
                break
    log(f"  {step.label}: {step.rps:,.1f} req/s, p99 {_fmt_ms(step.latency('p99'))}, "
        f"{len(step.windows)} windows" + ("" if step.stable else " (not stable)"))
    return step


def _fmt_ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f} ms"


def plateaued(steps: Sequence[Step], gain: float, patience: int) -> bool:
    """Throughput gained less than `gain` over the last `patience` steps: the best of them is
    below (1 + gain) × the best before them."""
    if len(steps) <= patience:
        return False
    before = max(s.rps for s in steps[:-patience])
    recent = max(s.rps for s in steps[-patience:])
    return recent < (1 + gain) * before


def run_sweep(settings: SweepSettings, measure: Measure, meter: CpuMeter | None = None,
              log: Callable[[str], None] = lambda _m: None,
              steps: list[Step] | None = None,
              after_step: Callable[[Step], None] | None = None) -> SweepResult:
    """Measures each level in turn until a stop rule fires. `steps` (optional) is filled in as
    the sweep goes, so a caller interrupted mid-sweep still holds the steps measured;
    `after_step` runs after each step is measured (the diagnosis under that step's load)."""
    steps = steps if steps is not None else []
    started = time.time()
    clock = time.monotonic()
    reason = "levels exhausted"
    for level in settings.levels:
        step = measure_step(level, settings, measure, meter, log)
        steps.append(step)
        if after_step is not None:
            after_step(step)
        if step.error_rate > settings.max_error_rate:
            reason = f"errors: {step.error_rate:.1%} of requests failed at {step.label}"
            break
        p99 = step.latency("p99")
        if settings.slo_p99_ms is not None and p99 is not None and p99 > settings.slo_p99_ms:
            reason = (f"SLO: p99 {p99:,.1f} ms passed {settings.slo_p99_ms:g} ms at "
                      f"{step.label}")
            break
        if plateaued(steps, settings.plateau_gain, settings.patience):
            reason = (f"plateau: less than {settings.plateau_gain:.0%} more throughput over the "
                      f"last {settings.patience} steps")
            break
        if (settings.max_duration_s is not None
                and time.monotonic() - clock >= settings.max_duration_s):
            reason = f"time budget: the sweep's {settings.max_duration_s:g} s are spent"
            break
    cores = meter.cores if meter is not None else cores_available(0)
    return SweepResult(settings, steps, reason, cores, started, time.time())


# -- the summary --------------------------------------------------------------------------------

def find_knee(steps: Sequence[Step], margin: float = KNEE_MARGIN) -> tuple[int, str] | None:
    """The step after which p99 grows faster than throughput, with the reason: the first i
    where p99(i+1)/p99(i) > (1 + margin) × rps(i+1)/rps(i). None when latency never outgrew
    throughput over the steps measured."""
    for i in range(len(steps) - 1):
        here, there = steps[i], steps[i + 1]
        p_here, p_there = here.latency("p99"), there.latency("p99")
        if not (here.rps > 0 and p_here and p_there):
            continue
        rps_growth, p99_growth = there.rps / here.rps, p_there / p_here
        if p99_growth > (1 + margin) * rps_growth:
            return i, (f"from {here.label} to {there.label} p99 grew ×{p99_growth:.2f} "
                       f"({_fmt_ms(p_here)} → {_fmt_ms(p_there)}) while throughput grew "
                       f"×{rps_growth:.2f} ({here.rps:,.0f} → {there.rps:,.0f} req/s)")
    return None


# Verdicts that name no bottleneck inside the service.
NO_BOTTLENECK = ("underloaded", "none", "inconclusive")


def why_it_stops(steps: Sequence[Step], knee: int | None) -> Why | None:
    """The verdict that explains the knee: the first step at or past it whose verdict names a
    bottleneck (a resource used to its limit shows as waiting only once requests queue for it,
    one step past the knee), else the knee's own verdict; None without diagnoses."""
    if knee is None:
        return None
    candidates = [(i, s, verdict) for i, s in enumerate(steps)
                  if i >= knee and (verdict := _verdict(s.diagnosis))]
    if not candidates:
        return None
    index, step, verdict = next(((i, s, v) for i, s, v in candidates
                                 if v.primary not in NO_BOTTLENECK), candidates[0])
    return Why(concurrency=step.concurrency, rate=step.rate, index=index,
               primary=verdict.primary, headline=verdict.headline, severity=verdict.severity)


def summarize(result: SweepResult) -> SweepSummary:
    """The sweep's verdict: capacity, knee, what limited it, and what to run at."""
    settings = result.settings
    # A level where requests failed is no capacity (fast errors are not service).
    steps = [s for s in result.steps if s.error_rate <= settings.max_error_rate]
    if not steps or max(s.rps for s in steps) <= 0:
        if not result.steps:
            headline = "no level was measured"
        elif len(steps) < len(result.steps):
            headline = (f"every level measured failed more than "
                        f"{settings.max_error_rate:.0%} of its requests")
        else:
            headline = "no request completed: the service did not answer under load"
        return SweepSummary(limited_by="no throughput", headline=headline)
    found = find_knee(steps)
    peak = max(range(len(steps)), key=lambda i: steps[i].rps)
    top = steps[peak]
    limits = top.generator_limits(result.cores, settings.generator_ceiling_rps)
    knee_limits = steps[found[0]].generator_limits(result.cores, settings.generator_ceiling_rps) \
        if found else []
    saturated = found is not None
    first = steps[0]
    k = steps[found[0]] if found else top
    p99_first, p99_knee = first.latency("p99"), k.latency("p99")
    beyond = steps[-1]
    if limits or knee_limits:
        limited_by = "generator"
        reasons = knee_limits or limits
        headline = (f"the load generator, not the service, set this curve: "
                    f"{top.rps:,.0f} req/s at {top.label} is a lower bound of the service's "
                    f"capacity ({reasons[0]})")
        limits = limits or knee_limits
    elif result.stop_reason.startswith(("errors", "SLO")) and not saturated:
        limited_by = result.stop_reason.split(":", 1)[0]
        headline = f"stopped by {result.stop_reason}; best {top.rps:,.0f} req/s at {top.label}"
    elif saturated:
        limited_by = "service"
        headline = (f"the knee is at {k.label} ({k.rps:,.0f} req/s, p99 {_fmt_ms(p99_knee)}): "
                    f"beyond it latency grows faster than throughput, p99 reaching "
                    f"{_fmt_ms(beyond.latency('p99'))} at {beyond.label}; capacity "
                    f"{top.rps:,.0f} req/s")
    else:
        limited_by = "not reached"
        headline = (f"latency never outgrew throughput up to {beyond.label} "
                    f"({beyond.rps:,.0f} req/s): "
                    + ("the sweep was interrupted before the knee" if result.interrupted
                       else "sweep higher to find the knee"))
    unstable = tuple(s.label for s in result.steps if not s.stable)
    others = [s.other_cores for s in result.steps if s.other_cores is not None]
    shared = max(others) if others and max(others) >= OTHER_LOAD else None
    knee = None
    if found:
        knee = SummaryKnee(concurrency=k.concurrency, rate=k.rate, index=result.steps.index(k),
                           rps=round(k.rps, 2), p50_ms=_r(k.latency("p50")),
                           p95_ms=_r(k.latency("p95")), p99_ms=_r(p99_knee), reason=found[1])
    return SweepSummary(
        limited_by=limited_by,
        headline=headline,
        capacity_rps=round(top.rps, 2),
        peak=StepRef(concurrency=top.concurrency, rate=top.rate,
                     index=result.steps.index(top)),
        knee=knee,
        saturated=saturated,
        latency_growth_to_knee=(round(p99_knee / p99_first, 2)
                                if found and p99_first and p99_knee else None),
        operating_point_rps=round(OPERATING_SHARE * top.rps, 2),
        generator_limits=tuple(limits),
        unstable_levels=unstable,
        # Other processes used this many cores at some level: the figures are those of a
        # shared machine (None: below OTHER_LOAD, or unknown without --pid).
        other_load_cores=None if shared is None else round(shared, 2),
        why=why_it_stops(result.steps, knee.index if knee else None),
    )


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def window_figures(w: Window) -> WindowFigures:
    return WindowFigures(
        rps=_r(w.rps, 2), requests=w.requests, errors=w.errors, duration_s=_r(w.duration_s),
        p50_ms=_r(w.p50_ms), p90_ms=_r(w.p90_ms), p95_ms=_r(w.p95_ms), p99_ms=_r(w.p99_ms),
        max_ms=_r(w.max_ms), lag_ms=_r(w.lag_ms), generator_cores=_r(w.generator_cores),
        generator_capacity_cores=w.generator_capacity_cores,
        service_cores=_r(w.service_cores), machine_busy_cores=_r(w.machine_busy_cores))


def _verdict(diagnosis: StepDiagnosis | None) -> StepVerdict | None:
    return diagnosis.verdict if diagnosis is not None else None


def step_record(step: Step, cores: int, ceiling_rps: float | None) -> SweepStep:
    """One step in the report: its load, what was measured, the generator's self-check and,
    with --pid, the verdict under that load and its report."""
    limits = step.generator_limits(cores, ceiling_rps)
    gen = step.generator_cores
    source = "hdr" if step.pooled else "window means"
    if step.pooled and step.last[-1].histogram_source:
        source = f"hdr ({step.last[-1].histogram_source})"
    diagnosis = step.diagnosis
    return SweepStep(
        concurrency=step.concurrency, rate=step.rate,
        requests=step.requests,
        throughput_rps=round(step.rps, 2),
        latency_ms=step.latencies(),
        latency_source=source,
        errors=step.errors_by_kind,
        error_count=step.error_count,
        error_rate=round(step.error_rate, 4),
        stable=step.stable,
        windows_measured=len(step.windows),
        generator=StepGenerator(cpu_share=_r(gen / cores if gen is not None and cores else None),
                                cores=_r(gen), lag_ms=_r(step.lag_ms), limited=bool(limits),
                                reasons=tuple(limits)),
        service_cores=_r(step.service_cores),
        machine_busy_cores=_r(step.machine_busy_cores),
        other_cores=_r(step.other_cores),
        verdict=_verdict(diagnosis),
        report=diagnosis.html_name if diagnosis is not None else None,
        diagnosis=diagnosis,
        windows=tuple(window_figures(w) for w in step.windows),
        warmup=window_figures(step.warmup) if step.warmup is not None else None,
    )


def sweep_report(result: SweepResult, target: SweepTarget, generator: GeneratorInfo
                 ) -> SweepReport:
    """The report of a sweep (`kind: "sweep"`, docs/report-data.md)."""
    s = result.settings
    summary = summarize(result)
    knee = summary.knee
    return SweepReport(
        target=target,
        generator=generator,
        settings=s,
        machine=Machine(cores=result.cores),
        started_at=result.started_at, ended_at=result.ended_at,
        stop_reason=result.stop_reason,
        interrupted=result.interrupted,
        partial=result.interrupted is not None,
        summary=summary,
        steps=tuple(step_record(st, result.cores, s.generator_ceiling_rps)
                    for st in result.steps),
        knee=SweepKnee(index=knee.index, reason=knee.reason) if knee else None,
    )
