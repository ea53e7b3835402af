"""The run: what was profiled and how it was sampled (the report's `target` and `sampling`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from diagnose.report.model.codec import OPTIONAL


@dataclass(frozen=True)
class Target:
    """The profiled process (the root of a tree). `cmdline` is already redacted."""

    pid: int | None = None
    python: str | None = None
    cmdline: str = ""
    threads: int | None = None
    cores: float | None = None
    # Only `attach` knows these.
    pids: tuple[int, ...] | None = field(default=None, metadata=OPTIONAL)
    cpu_quota_cores: float | None = field(default=None, metadata=OPTIONAL)
    children: bool | None = field(default=None, metadata=OPTIONAL)


@dataclass(frozen=True)
class PlannedProcess:
    """One process's recorders in the sampling plan (collect/plan.py): its own non-blocking rate,
    and native calibration or none."""

    pid: int
    rate_hz: int
    native_rate_hz: int  # 0: not calibrated natively (idle, or a sibling's calibration covers it)
    busy: bool


@dataclass(frozen=True)
class StateSources:
    """Samples by where their thread state came from, and the support of the calibrated ones."""

    measured: int = 0
    calibrated: int = 0
    estimated: int = 0
    calibration_min_support: int | None = None
    calibration_median_support: float | None = None


@dataclass(frozen=True)
class Observer:
    """What sampling cost the target, and whether it is large enough to distort the verdict."""

    paused_share: float | None = None
    pyspy_cpu_s: float | None = None
    pyspy_cpu_share_of_cores: float | None = None
    requested_rate_hz: float | None = None
    achieved_rate_hz: float | None = None
    errors: int = 0
    error_rate: float | None = None
    torn_stacks_possible: bool = False
    plan: str | None = None
    warning: str | None = None
    # The CPU the observer used over the window, measured from /proc at its start and end
    # (collect/observer_cpu.py): diagnose's process (every thread) and every process it started
    # (py-spy's recorders, a helper interpreter), beside the target tree's CPU over the same
    # window (the /proc sampler's). Only `attach` measures them: left out offline.
    observer_cpu_s: float | None = field(default=None, metadata=OPTIONAL)
    observer_cores: float | None = field(default=None, metadata=OPTIONAL)  # cpu_s / the window
    observer_own_cpu_s: float | None = field(default=None, metadata=OPTIONAL)  # diagnose's process
    observer_children_cpu_s: float | None = field(default=None, metadata=OPTIONAL)  # its children
    cpu_window_s: float | None = field(default=None, metadata=OPTIONAL)  # the span measured over
    target_cpu_s: float | None = field(default=None, metadata=OPTIONAL)
    target_cores: float | None = field(default=None, metadata=OPTIONAL)


@dataclass(frozen=True)
class Sampling:
    """How the window was sampled. Fields marked OPTIONAL are only written when known: `attach`
    knows the plan and py-spy's own cost, `analyze` (offline) does not."""

    duration_s: float | None = None
    rate_hz: float | None = None
    samples: int | None = None
    errors: int | None = None
    mode: str = ""
    # The window's length is unknown (no time stamps, no waiting samples): at least this.
    duration_at_least_s: float | None = field(default=None, metadata=OPTIONAL)
    thread_samples: int = 0
    # "measured" | "reconstructed" | "none": how sample instants are known.
    instants: str = "none"
    achieved_rate_hz: float | None = None
    native: bool = False
    states_calibrated: bool = False
    state_estimated: bool = False
    state_sources: StateSources = StateSources()
    # Share of /proc observations that found a thread stopped by py-spy (with a /proc record).
    paused_share: float | None = field(default=None, metadata=OPTIONAL)
    observer: Observer = Observer()
    partial: bool = False
    notes: tuple[str, ...] = ()
    # Only some reports have these.
    requested_duration_s: float | None = field(default=None, metadata=OPTIONAL)
    plan: str | None = field(default=None, metadata=OPTIONAL)
    proc_interval_s: float | None = field(default=None, metadata=OPTIONAL)
    samples_taken: int | None = field(default=None, metadata=OPTIONAL)
    native_rate_hz: int | None = field(default=None, metadata=OPTIONAL)
    native_samples: int | None = field(default=None, metadata=OPTIONAL)
    native_errors: int | None = field(default=None, metadata=OPTIONAL)
    processes_planned: tuple[PlannedProcess, ...] | None = field(default=None, metadata=OPTIONAL)
    processes_sampled: int | None = field(default=None, metadata=OPTIONAL)
    pyspy_version: str | None = field(default=None, metadata=OPTIONAL)
    pyspy_cpu_s: float | None = field(default=None, metadata=OPTIONAL)
    pyspy_cpu_share_of_cores: float | None = field(default=None, metadata=OPTIONAL)
    # The window's wall-clock start (a live capture): pprof's time_nanos, a push's span.
    started_at: float | None = field(default=None, metadata=OPTIONAL)


@dataclass(frozen=True)
class Load:
    """The load the service was under while sampled, when a sweep or an experiment generated it:
    `diagnose diff` then compares per request. One of `concurrency` (closed loop) and `rate`
    (open loop)."""

    throughput_rps: float | None = None
    concurrency: int | None = field(default=None, metadata=OPTIONAL)
    rate: float | None = field(default=None, metadata=OPTIONAL)
