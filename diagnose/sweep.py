"""`diagnose sweep`: step the concurrency up against a service, find where throughput stops growing
(the knee), and say whether the curve's top is the service's or the load generator's.

Each level of concurrency is one closed-loop load (diagnose/loadgen.py): a warm-up run that is
discarded (thread pools, memory pools and connection set-up lie for the first requests), then
measurement windows until the step is *stable*: throughput and p99 of the last three windows
each within ±10% of their mean (Triton perf_analyzer's rule), at most `max_windows`. A step that
never settles is kept and marked unstable. The sweep stops early when throughput has gained less
than 5% over the last `patience` steps (model_analyzer's rule), when more than 1% of requests
fail, or when p99 passes a latency budget.

The knee is the lowest concurrency whose throughput is within 5% of the best measured:
beyond it, more concurrency only queues (latency grows, throughput does not). Capacity is the
best throughput; the operating point is 80% of it (the soak level of the load-testing notes).

The generator shares the cores with the service on one machine. Every window records the CPU
the generator used (its own accounting), the CPU of the service's process tree (with `pids`) and
the machine's busy cores. A step is *generator-limited* when the generator used at least 90% of
the cores it can use, or when the machine was out of cores and the generator held a large
share of them, or when the step's throughput reached 80% of the generator's measured ceiling
(`generator_ceiling_rps`, benchmarks/generator_ceiling.py). When the best step is
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

from diagnose.collect.procfs import _read, cores_available, machine_idle_seconds, parse_stat
from diagnose.loadgen import LoadResult

SCHEMA_VERSION = 1

# Judgement thresholds, named once (the docstring above explains each).
GENERATOR_SATURATED = 0.90      # of the generator's own capacity in cores
MACHINE_FULL = 0.90             # of the machine's cores busy ...
GENERATOR_SHARE = 0.35          # ... with at least this share of the busy cores the generator's
CEILING_SHARE = 0.80            # of the generator's measured ceiling (req/s)
OPERATING_SHARE = 0.80          # of capacity: the level to run or soak at
OTHER_LOAD = 0.25               # cores used by the rest of the machine worth a warning


@dataclass(frozen=True)
class SweepSettings:
    levels: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    window_s: int = 3
    warmup_s: int = 2
    stable_windows: int = 3       # the last N windows judged for stability, and averaged
    max_windows: int = 6
    stability: float = 0.10       # each of throughput and p99 within ±10% of the mean
    plateau_gain: float = 0.05    # less than 5% more throughput ...
    patience: int = 4             # ... over this many steps: stop
    max_error_rate: float = 0.01
    latency_budget_ms: float | None = None
    generator_ceiling_rps: float | None = None

    def __post_init__(self):
        if not self.levels or any(c < 1 for c in self.levels):
            raise ValueError("concurrency levels must be positive")
        if list(self.levels) != sorted(set(self.levels)):
            raise ValueError("concurrency levels must be strictly increasing")
        if self.window_s < 1 or self.warmup_s < 0:
            raise ValueError("the window is at least 1 s and the warm-up not negative")
        if not 1 <= self.stable_windows <= self.max_windows:
            raise ValueError("need 1 <= stable windows <= max windows")
        if self.patience < 1:
            raise ValueError("patience is at least one step")


def doubling_levels(start: int, maximum: int) -> tuple[int, ...]:
    """start, 2·start, 4·start, ... up to `maximum` (which is included even off the doubling)."""
    if start < 1 or maximum < start:
        raise ValueError("need 1 <= start <= maximum")
    levels, c = [], start
    while c < maximum:
        levels.append(c)
        c *= 2
    return tuple(levels + [maximum])


def parse_levels(text: str) -> tuple[int, ...]:
    """`"1,2,4,8"` -> (1, 2, 4, 8); ValueError naming what is wrong."""
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"concurrency levels must be whole numbers separated by commas: {text!r}")
    if not levels:
        raise ValueError("no concurrency level given")
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
                stat = _read(f"/proc/{p}/stat")
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
        return cls(rps=result.requests_per_second, requests=result.requests,
                   errors=result.errors,
                   attempts=result.requests + sum(result.socket_errors.values()),
                   duration_s=result.duration_s,
                   p50_ms=result.latency_p50_ms, p90_ms=result.latency_p90_ms,
                   p95_ms=result.latency_p95_ms, p99_ms=result.latency_p99_ms,
                   generator_cores=result.generator_cores,
                   generator_capacity_cores=result.generator_capacity_cores,
                   service_cores=service, machine_busy_cores=busy)


def _mean(values):
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def within(values: Sequence[float | None], tolerance: float) -> bool:
    """Every value within ±tolerance of their mean (False when one is missing or all are 0)."""
    if not values or any(v is None for v in values):
        return False
    mean = statistics.fmean(values)
    if mean <= 0:
        return False
    return all(abs(v - mean) <= tolerance * mean for v in values)


@dataclass
class Step:
    concurrency: int
    windows: list[Window] = field(default_factory=list)
    warmup: Window | None = None
    stable: bool = False
    judged_on: int = 3

    @property
    def last(self) -> list[Window]:
        return self.windows[-self.judged_on:]

    @property
    def rps(self) -> float:
        return _mean(w.rps for w in self.last) or 0.0

    def latency(self, name: str) -> float | None:
        """The mean over the judged windows of each window's percentile `name` ("p99_ms")."""
        return _mean(getattr(w, name) for w in self.last)

    @property
    def requests(self) -> int:
        return sum(w.requests for w in self.last)

    @property
    def error_rate(self) -> float:
        total = sum(w.attempts for w in self.last)
        return sum(w.errors for w in self.last) / total if total else 0.0

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
        parts = (self.machine_busy_cores, self.service_cores, self.generator_cores)
        if any(p is None for p in parts):
            return None
        return max(0.0, parts[0] - parts[1] - parts[2])

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
        return reasons


# -- the sweep ----------------------------------------------------------------------------------

Measure = Callable[[int, int], LoadResult]  # (connections, seconds) -> one load run


@dataclass
class SweepResult:
    settings: SweepSettings
    steps: list[Step]
    stop_reason: str
    cores: int
    started_at: float
    ended_at: float
    interrupted: str | None = None  # the signal's name when one ended the sweep


def measure_step(concurrency: int, settings: SweepSettings, measure: Measure,
                 meter: CpuMeter | None, log: Callable[[str], None] = lambda _m: None) -> Step:
    cores = meter.cores if meter is not None else cores_available(0)
    step = Step(concurrency, judged_on=settings.stable_windows)
    if settings.warmup_s:
        step.warmup = Window.from_load(measure(concurrency, settings.warmup_s), None, None, cores)
    while len(step.windows) < settings.max_windows:
        before = meter.read() if meter is not None else None
        result = measure(concurrency, settings.window_s)
        after = meter.read() if meter is not None else None
        step.windows.append(Window.from_load(result, before, after, cores))
        if len(step.windows) >= settings.stable_windows:
            last = step.last
            if (within([w.rps for w in last], settings.stability)
                    and within([w.p99_ms for w in last], settings.stability)):
                step.stable = True
                break
    log(f"  concurrency {concurrency}: {step.rps:,.1f} req/s, p99 "
        f"{_fmt_ms(step.latency('p99_ms'))}, {len(step.windows)} windows"
        + ("" if step.stable else " (not stable)"))
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
              steps: list[Step] | None = None) -> SweepResult:
    """Measures each level in turn until a stop rule fires. `steps` (optional) is filled in as
    the sweep goes, so a caller interrupted mid-sweep still holds the steps measured."""
    steps = steps if steps is not None else []
    started = time.time()
    reason = "levels exhausted"
    for concurrency in settings.levels:
        step = measure_step(concurrency, settings, measure, meter, log)
        steps.append(step)
        if step.error_rate > settings.max_error_rate:
            reason = (f"errors: {step.error_rate:.1%} of requests failed at concurrency "
                      f"{concurrency}")
            break
        p99 = step.latency("p99_ms")
        if settings.latency_budget_ms is not None and p99 is not None \
                and p99 > settings.latency_budget_ms:
            reason = (f"latency budget: p99 {p99:,.1f} ms passed {settings.latency_budget_ms:g} "
                      f"ms at concurrency {concurrency}")
            break
        if plateaued(steps, settings.plateau_gain, settings.patience):
            reason = (f"plateau: less than {settings.plateau_gain:.0%} more throughput over the "
                      f"last {settings.patience} steps")
            break
    cores = meter.cores if meter is not None else cores_available(0)
    return SweepResult(settings, steps, reason, cores, started, time.time())


# -- the summary --------------------------------------------------------------------------------

def knee_index(steps: Sequence[Step], gain: float) -> int | None:
    """The lowest step whose throughput is within `gain` of the best (None without steps)."""
    if not steps:
        return None
    best = max(s.rps for s in steps)
    if best <= 0:
        return None
    return next(i for i, s in enumerate(steps) if s.rps >= (1 - gain) * best)


def summarize(result: SweepResult) -> dict:
    """The sweep's verdict: capacity, knee, what limited it, and what to run at."""
    settings = result.settings
    # A level where requests failed is no capacity (fast errors are not service).
    steps = [s for s in result.steps if s.error_rate <= settings.max_error_rate]
    knee = knee_index(steps, settings.plateau_gain)
    if knee is None:
        if not result.steps:
            headline = "no level was measured"
        elif len(steps) < len(result.steps):
            headline = (f"every level measured failed more than "
                        f"{settings.max_error_rate:.0%} of its requests")
        else:
            headline = "no request completed: the service did not answer under load"
        return {"limited_by": "no throughput", "capacity_rps": None, "knee": None,
                "headline": headline, "generator_limits": [], "operating_point_rps": None,
                "saturated": False, "unstable_levels": []}
    peak = max(range(len(steps)), key=lambda i: steps[i].rps)
    k, top = steps[knee], steps[peak]
    limits = top.generator_limits(result.cores, settings.generator_ceiling_rps)
    saturated = knee < len(steps) - 1  # a higher level measured no more throughput
    first = steps[0]
    p99_first, p99_knee = first.latency("p99_ms"), k.latency("p99_ms")
    beyond = steps[-1] if saturated else None
    if limits:
        limited_by = "generator"
        headline = (f"the load generator, not the service, set the top of this curve: "
                    f"{top.rps:,.0f} req/s at concurrency {top.concurrency} is a lower bound "
                    f"of the service's capacity ({limits[0]})")
    elif result.stop_reason.startswith(("errors", "latency budget")) and not saturated:
        limited_by = result.stop_reason.split(":", 1)[0]
        headline = (f"stopped by {result.stop_reason}; best {top.rps:,.0f} req/s at "
                    f"concurrency {top.concurrency}")
    elif saturated:
        limited_by = "service"
        headline = (f"capacity {top.rps:,.0f} req/s, reached at concurrency {k.concurrency} "
                    f"(the knee): beyond it throughput grows less than "
                    f"{settings.plateau_gain:.0%} while p99 goes from {_fmt_ms(p99_knee)} to "
                    f"{_fmt_ms(beyond.latency('p99_ms'))} at concurrency {beyond.concurrency}")
    else:
        limited_by = "not reached"
        headline = (f"throughput still grew at the highest concurrency measured "
                    f"({k.concurrency}: {k.rps:,.0f} req/s): "
                    + ("the sweep was interrupted before the knee" if result.interrupted
                       else "sweep higher to find the knee"))
    unstable = [s.concurrency for s in result.steps if not s.stable]
    others = [s.other_cores for s in result.steps if s.other_cores is not None]
    shared = max(others) if others and max(others) >= OTHER_LOAD else None
    return {
        "limited_by": limited_by,
        "headline": headline,
        "capacity_rps": round(top.rps, 2),
        "peak_concurrency": top.concurrency,
        "knee": {"concurrency": k.concurrency, "rps": round(k.rps, 2),
                 "p50_ms": k.latency("p50_ms"), "p95_ms": k.latency("p95_ms"),
                 "p99_ms": p99_knee},
        "saturated": saturated,
        "latency_growth_to_knee": (round(p99_knee / p99_first, 2)
                                   if p99_first and p99_knee else None),
        "operating_point_rps": round(OPERATING_SHARE * top.rps, 2),
        "generator_limits": limits,
        "unstable_levels": unstable,
        # Other processes used this many cores at some level: the figures are those of a
        # shared machine (None: below OTHER_LOAD, or unknown without --pid).
        "other_load_cores": None if shared is None else round(shared, 2),
    }


def _r(value, digits=3):
    return None if value is None else round(value, digits)


def _window_dict(w: Window) -> dict:
    return {"rps": _r(w.rps, 2), "requests": w.requests, "errors": w.errors,
            "duration_s": _r(w.duration_s), "p50_ms": _r(w.p50_ms), "p90_ms": _r(w.p90_ms),
            "p95_ms": _r(w.p95_ms), "p99_ms": _r(w.p99_ms),
            "generator_cores": _r(w.generator_cores),
            "generator_capacity_cores": w.generator_capacity_cores,
            "service_cores": _r(w.service_cores), "machine_busy_cores": _r(w.machine_busy_cores)}


def step_dict(step: Step, cores: int, ceiling_rps: float | None) -> dict:
    return {
        "concurrency": step.concurrency, "rps": _r(step.rps, 2), "requests": step.requests,
        "error_rate": _r(step.error_rate, 4),
        "p50_ms": _r(step.latency("p50_ms")), "p90_ms": _r(step.latency("p90_ms")),
        "p95_ms": _r(step.latency("p95_ms")), "p99_ms": _r(step.latency("p99_ms")),
        "stable": step.stable, "windows_measured": len(step.windows),
        "generator_cores": _r(step.generator_cores), "service_cores": _r(step.service_cores),
        "machine_busy_cores": _r(step.machine_busy_cores),
        "other_cores": _r(step.other_cores),
        "generator_limits": step.generator_limits(cores, ceiling_rps),
        "windows": [_window_dict(w) for w in step.windows],
        "warmup": _window_dict(step.warmup) if step.warmup is not None else None,
    }


def sweep_report(result: SweepResult, target: dict, generator: dict,
                 diagnosis: dict | None = None) -> dict:
    """The JSON report of a sweep (`kind: "sweep"`)."""
    s = result.settings
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "sweep",
        "target": target,
        "generator": generator,
        "settings": {"levels": list(s.levels), "window_s": s.window_s, "warmup_s": s.warmup_s,
                     "stable_windows": s.stable_windows, "max_windows": s.max_windows,
                     "stability": s.stability, "plateau_gain": s.plateau_gain,
                     "patience": s.patience, "max_error_rate": s.max_error_rate,
                     "latency_budget_ms": s.latency_budget_ms,
                     "generator_ceiling_rps": s.generator_ceiling_rps},
        "machine": {"cores": result.cores},
        "started_at": result.started_at, "ended_at": result.ended_at,
        "stop_reason": result.stop_reason,
        "interrupted": result.interrupted,
        "partial": result.interrupted is not None,
        "summary": summarize(result),
        "steps": [step_dict(st, result.cores, s.generator_ceiling_rps) for st in result.steps],
        "diagnosis": diagnosis,
    }
