"""What a run knows beside its samples: the profiled target, how its window was sampled, and
the load it was under. `attach` knows all of it; a recorded file only its name and what its
/proc record says. Frozen: a fact learnt later (an offline window's length) is a new context
(`dataclasses.replace`), handed as a whole to the report builder."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from diagnose.report.model.run import Load, PlannedProcess, Target


@dataclass(frozen=True)
class WindowCpu:
    """The CPU the observer and the target used over the sampling window, measured from /proc
    (collect/observer_cpu.py): diagnose's own process (every thread) and every process it
    started (the py-spy recorders, a helper interpreter), beside the target tree's threads as
    the /proc sampler read them. Each figure over its own measured span, both the window."""

    own_cpu_s: float  # diagnose's process
    children_cpu_s: float  # the processes it started: running at the end, or exited and reaped
    window_s: float  # the span the two were measured over
    target_cpu_s: float | None = None  # every process of the target tree (None: not read)
    target_window_s: float | None = None

    @property
    def cpu_s(self) -> float:
        return self.own_cpu_s + self.children_cpu_s


@dataclass(frozen=True)
class CaptureSampling:
    """How `attach` sampled the window, as the report's `sampling` section starts from (the
    report adds what the analysis measured: instants, achieved rate, state sources, observer
    cost)."""

    duration_s: float  # the window as sampled (shorter when cut short)
    requested_duration_s: float
    rate_hz: int
    plan: str  # the sampling plan's reason, in words
    proc_interval_s: float
    samples: int | None  # py-spy's own counts, when its summary said them
    samples_taken: int | None
    errors: int | None
    native: bool
    native_rate_hz: int | None
    native_samples: int | None
    native_errors: int | None
    mode: str
    processes_planned: tuple[PlannedProcess, ...]
    processes_sampled: int
    pyspy_version: str
    pyspy_cpu_s: float
    pyspy_cpu_share_of_cores: float
    # What diagnose and its recorders used of the CPU over the window, beside the target's.
    cpu: WindowCpu | None = None


@dataclass(frozen=True)
class LiveSampling:
    """A live capture's sampling and its window's wall-clock start (unix seconds, to the ms):
    pprof's time_nanos, and the span a push files it under."""

    capture: CaptureSampling
    started_at: float

    @property
    def rate_hz(self) -> int:
        return self.capture.rate_hz

    @property
    def samples(self) -> int | None:
        return self.capture.samples


@dataclass(frozen=True)
class RecordedSampling:
    """What a recorded file tells of its window. `duration_s` None: unknown (then
    `duration_at_least_s` may bound it); `rate_hz` None: not yet read off the profile."""

    mode: str = ""
    duration_s: float | None = None
    duration_at_least_s: float | None = None
    rate_hz: float | None = None

    @property
    def samples(self) -> None:
        return None  # no sampler counted them: the report counts the samples read


@dataclass(frozen=True)
class RunContext:
    """The run's facts the checks and the report read: the target, the sampling, whether the
    window was cut short, the notes to show beside the verdict, the load (or None), and the
    target's command line as read."""

    target: Target = field(default_factory=Target)  # as the report states it: cmdline redacted
    sampling: LiveSampling | RecordedSampling = field(default_factory=RecordedSampling)
    partial: bool = False
    notes: tuple[str, ...] = ()
    load: Load | None = None  # as the report states it
    # The target's command line as read, its secrets masked (collect/procfs.py kept_argv): the
    # analysis tells a server's role from its program names and flags (model/service.py).
    argv: tuple[str, ...] = ()

    def with_note(self, note: str) -> RunContext:
        return replace(self, notes=(*self.notes, note))


@dataclass(frozen=True)
class LiveRun:
    """A live run's context as `attach --keep-raw` keeps it (<base>.sampling.json), as the
    analysis started from (before it added its notes): `analyze --sampling` replays a kept
    recording with the rate, py-spy's counts and the plan the live analysis had, not ones
    estimated from the samples. `argv` is redacted as read, like the kept /proc record's
    cmdlines: the kept file holds no secret of the target's."""

    sampling: LiveSampling
    target: Target = field(default_factory=Target)
    argv: tuple[str, ...] = ()
    partial: bool = False
    notes: tuple[str, ...] = ()
    load: Load | None = None

    @classmethod
    def of(cls, run: RunContext) -> LiveRun | None:
        """`run` as kept; None for a recorded file's run (it has no live sampling to keep)."""
        if not isinstance(run.sampling, LiveSampling):
            return None
        return cls(sampling=run.sampling, target=run.target, argv=run.argv, partial=run.partial,
                   notes=run.notes, load=run.load)

    def context(self) -> RunContext:
        return RunContext(target=self.target, sampling=self.sampling, partial=self.partial,
                          notes=self.notes, load=self.load, argv=self.argv)
