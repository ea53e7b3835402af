"""The sweep and experiment reports as frozen, typed values, read from and written to JSON by the
report model's codec (report/model/codec.py): the keys are the fields (docs/report-data.md,
"Sweep and experiment reports"). load/sweep_steps.py and load/experiment_decision.py build them;
the page, the Markdown summary and the commands read them.

`from_json` reads this schema version and the previous one (the dicts written before this
model, same keys); anything that is not such a report is NotAReport (BadProfile, exit 6) naming
the first key missing or of the wrong shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from diagnose.report.step_diagnosis import StepDiagnosis, StepVerdict
from diagnose.report.model.codec import OPTIONAL, JsonValue, NotAReport, decode_document, encode

# 2: declared by this model (same keys as 1, docs/report-data.md). 1: the dict of sweep.py.
SWEEP_SCHEMA_VERSION = 2
# 3: declared by this model (same keys as 2). 2: the dict of experiment.py (variants, winner).
EXPERIMENT_SCHEMA_VERSION = 3

# ------------------------------------------------------------------ shared parts


@dataclass(frozen=True, kw_only=True)
class AtLevel:
    """A load level: connections (closed model) or requests/s (open model), one key in JSON."""

    concurrency: int | None = field(default=None, metadata=OPTIONAL)
    rate: float | None = field(default=None, metadata=OPTIONAL)

    @property
    def level(self) -> float | None:
        return self.concurrency if self.concurrency is not None else self.rate

    @property
    def label(self) -> str:
        if self.concurrency is not None:
            return f"concurrency {self.concurrency}"
        return f"{self.rate:g} req/s" if self.rate is not None else "no level"


@dataclass(frozen=True, kw_only=True)
class GeneratorInfo:
    """The load generator as it ran (loadtest.Generator.describe)."""

    tool: str | None = None  # "wrk" / "python"
    path: str | None = None
    threads: int | None = None
    model: str = "closed"
    closed_loop: bool = True
    arrivals: str | None = None
    coordinated_omission_corrected: bool = False
    method: str = "GET"
    body_bytes: int = 0
    headers: tuple[str, ...] = ()  # names only: values may be secrets


# ------------------------------------------------------------------ sweep


@dataclass(frozen=True, kw_only=True)
class SweepTarget:
    url: str
    pids: tuple[int, ...] = ()


MODELS = ("closed", "open")  # of load: levels are connections, or requests/s
ARRIVALS = ("constant", "poisson")  # the open model's inter-arrival times


@dataclass(frozen=True, kw_only=True)
class SweepSettings:
    """The settings a sweep runs with, as its report carries them (load/sweep_steps.py reads
    them as it runs). Refused when they make no sweep: ValueError, a usage error to `diagnose
    sweep`, and NotAReport to a report read back (the codec's)."""

    model: str = "closed"         # "closed": levels are connections; "open": requests/s
    # The open model's inter-arrival times, "constant" unless asked; None in the closed model
    # (the report writes null there, whatever was asked).
    arrivals: str | None = None
    levels: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64)
    window_s: int = 3
    warmup_s: int = 2
    stable_windows: int = 3       # the last N windows judged for stability, and averaged
    max_windows: int = 6
    stability: float = 0.10       # each of throughput and p99 within ±10% of the mean
    plateau_gain: float = 0.05    # less than 5% more throughput ...
    patience: int = 2             # ... over this many steps: stop
    max_error_rate: float = 0.01
    slo_p99_ms: float | None = None
    max_duration_s: float | None = None  # the whole sweep's time budget (None: no budget)
    generator_ceiling_rps: float | None = None

    @property
    def level_name(self) -> str:
        """The JSON key of a step's load: "concurrency" or "rate"."""
        return "concurrency" if self.model == "closed" else "rate"

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"unknown load model {self.model!r}")
        arrivals = (self.arrivals or "constant") if self.model == "open" else None
        if arrivals is not None and arrivals not in ARRIVALS:
            raise ValueError(f"unknown arrival process {arrivals!r}")
        object.__setattr__(self, "arrivals", arrivals)
        unit = "concurrency levels" if self.model == "closed" else "rates"
        if not self.levels or any(c <= 0 for c in self.levels):
            raise ValueError(f"{unit} must be positive")
        if self.model == "closed" and any(c != int(c) for c in self.levels):
            raise ValueError("concurrency levels must be whole numbers")
        if list(self.levels) != sorted(set(self.levels)):
            raise ValueError(f"{unit} must be strictly increasing")
        if self.window_s < 1 or self.warmup_s < 0:
            raise ValueError("the window is at least 1 s and the warm-up not negative")
        if not 1 <= self.stable_windows <= self.max_windows:
            raise ValueError("need 1 <= stable windows <= max windows")
        if self.patience < 1:
            raise ValueError("patience is at least one step")


@dataclass(frozen=True, kw_only=True)
class Machine:
    cores: int


@dataclass(frozen=True, kw_only=True)
class Percentiles:
    """A step's latency (ms) of every request of its judged windows."""

    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None


@dataclass(frozen=True, kw_only=True)
class StepGenerator:
    """The generator's self-check at one step."""

    cpu_share: float | None = None
    cores: float | None = None
    lag_ms: float | None = None
    limited: bool = False
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class WindowFigures:
    """One measurement window (or the discarded warm-up) as measured."""

    rps: float | None = None
    requests: int = 0
    errors: int = 0
    duration_s: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    lag_ms: float | None = None
    generator_cores: float | None = None
    generator_capacity_cores: float | None = None
    service_cores: float | None = None
    machine_busy_cores: float | None = None


@dataclass(frozen=True, kw_only=True)
class SweepStep(AtLevel):
    requests: int = 0
    throughput_rps: float
    latency_ms: Percentiles
    latency_source: str = "window means"  # "hdr", "hdr (<tool>)" or "window means"
    errors: Mapping[str, int] = field(default_factory=dict)  # by kind
    error_count: int = 0
    error_rate: float = 0.0
    stable: bool = False
    windows_measured: int = 0
    generator: StepGenerator = StepGenerator()
    service_cores: float | None = None
    machine_busy_cores: float | None = None
    other_cores: float | None = None
    verdict: StepVerdict | None = None
    report: str | None = None  # the name of the step's diagnosis page
    diagnosis: StepDiagnosis | None = None
    windows: tuple[WindowFigures, ...] = ()
    warmup: WindowFigures | None = None


@dataclass(frozen=True, kw_only=True)
class StepRef(AtLevel):
    index: int


@dataclass(frozen=True, kw_only=True)
class SummaryKnee(AtLevel):
    index: int
    rps: float | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class Why(AtLevel):
    """The verdict that explains the knee, and the step it was diagnosed at."""

    index: int
    primary: str
    headline: str | None = None
    severity: str | None = None

    @property
    def verdict(self) -> StepVerdict:
        return StepVerdict(primary=self.primary, headline=self.headline, severity=self.severity)


@dataclass(frozen=True, kw_only=True)
class SweepSummary:
    limited_by: str  # service, generator, not reached, errors, SLO, no throughput
    headline: str
    capacity_rps: float | None = None
    peak: StepRef | None = None
    knee: SummaryKnee | None = None
    saturated: bool = False
    latency_growth_to_knee: float | None = None
    operating_point_rps: float | None = None
    generator_limits: tuple[str, ...] = ()
    unstable_levels: tuple[str, ...] = ()
    # The most other processes used at any level (>= sweep.OTHER_LOAD cores): a shared machine.
    other_load_cores: float | None = None
    why: Why | None = None


@dataclass(frozen=True, kw_only=True)
class SweepKnee:
    index: int
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class SweepReport:
    schema_version: int = SWEEP_SCHEMA_VERSION
    kind: str = "sweep"
    target: SweepTarget
    generator: GeneratorInfo = GeneratorInfo()
    settings: SweepSettings = SweepSettings()
    machine: Machine
    started_at: float | None = None
    ended_at: float | None = None
    stop_reason: str = ""
    interrupted: str | None = None  # the signal's name when one ended the sweep
    partial: bool = False
    summary: SweepSummary
    steps: tuple[SweepStep, ...]
    knee: SweepKnee | None = None

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = encode(self)
        return out

    @classmethod
    def from_json(cls, data: Any) -> SweepReport:
        """The sweep report in `data` (a parsed .json, this version or the previous one)."""
        return replace(_read(cls, data, "sweep", ("target", "machine", "summary", "steps")),
                       schema_version=SWEEP_SCHEMA_VERSION)

    def step_at(self, index: int | None) -> SweepStep | None:
        if index is None or not 0 <= index < len(self.steps):
            return None
        return self.steps[index]

    @property
    def knee_step(self) -> SweepStep | None:
        return self.step_at(self.knee.index if self.knee else None)


# ------------------------------------------------------------------ experiment


Env = Mapping[str, str | None]  # None: the variable is removed


@dataclass(frozen=True, kw_only=True)
class ExperimentTarget:
    url: str
    command: str | None = None


@dataclass(frozen=True, kw_only=True)
class ExperimentPlan:
    """The settings the runs were made with (experiment.RunSettings as written)."""

    mode: str  # "load" (connections), "rate" (requests/s) or "sweep"
    concurrency: int | None = None
    rate: float | None = None
    slo_p99_ms: float | None = None
    seconds: int = 0
    warmup_s: int = 0
    rounds: int = 0
    diagnose_seconds: float = 0.0


@dataclass(frozen=True, kw_only=True)
class VariantLatency:
    """Medians over a variant's runs (ms)."""

    p50: float | None = None
    p99: float | None = None


@dataclass(frozen=True, kw_only=True)
class Variant:
    name: str
    env: Env = field(default_factory=dict)
    command: str = ""
    baseline: bool = False
    status: str = "measured"  # measured, failed, not run
    throughput_rps: float | None = None  # median over its runs
    latency_ms: VariantLatency = VariantLatency()
    errors: int = 0
    rps_by_round: tuple[float, ...] = ()
    gain: float | None = None  # median of its same-round ratios to the baseline
    service_cores: float | None = None
    verdict: StepVerdict | None = None
    verdict_reason: str | None = None
    report: str | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Baseline:
    env: Env = field(default_factory=dict)
    name: str


@dataclass(frozen=True, kw_only=True)
class Pick:
    """The winner, or the leader (the best median) when no variant won every round."""

    env: Env = field(default_factory=dict)
    name: str
    gain: float | None = None
    ratios: tuple[float, ...] = ()
    rounds_agreeing: int = 0


@dataclass(frozen=True, kw_only=True)
class Advice:
    """`--from-report`: the finding's advice, then how the advised variant measured."""

    finding: str | None = None
    fix: JsonValue = None  # the finding's `evidence.fix` as written (one knob, or a list)
    predicted_gain: float | None = None
    advice: str | None = None
    arm: str | None = None
    status: str | None = None  # advice proven / disproved / not proven
    measured_gain: float | None = None
    ratios: tuple[float, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ArmRecord:
    name: str
    command: str = ""
    env: Env = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ArmMedians:
    runs: int = 0
    rps_median: float | None = None
    rps: tuple[float, ...] = ()
    p99_ms_median: float | None = None
    service_cores_median: float | None = None
    generator_cores_max: float | None = None


@dataclass(frozen=True, kw_only=True)
class Decision:
    """One variant against the baseline: better, worse or no clear difference."""

    outcome: str
    headline: str = ""
    variant: str = ""
    ratio: float | None = None
    ratios: tuple[float, ...] = ()
    margin: float = 0.0
    arms: Mapping[str, ArmMedians] = field(default_factory=dict)
    # the most cores other processes took during a measured run, when worth a warning
    shared_cores: float | None = field(default=None, metadata=OPTIONAL)


@dataclass(frozen=True, kw_only=True)
class Run:
    """One run of one variant, in the order run: its figures, or why it failed. Keys without a
    value are left out (a failed run has only round, arm, rps and error)."""

    round: int = 0
    arm: str = ""
    rps: float | None = None
    p50_ms: float | None = field(default=None, metadata=OPTIONAL)
    p99_ms: float | None = field(default=None, metadata=OPTIONAL)
    errors: int | None = field(default=None, metadata=OPTIONAL)
    requests: int | None = field(default=None, metadata=OPTIONAL)
    generator_cores: float | None = field(default=None, metadata=OPTIONAL)
    level: float | None = field(default=None, metadata=OPTIONAL)  # a sweep's judged step
    sweep_report: str | None = field(default=None, metadata=OPTIONAL)
    service_cores: float | None = field(default=None, metadata=OPTIONAL)
    # cores the rest of the machine used meanwhile (/proc/stat busy - service - generator)
    other_cores: float | None = field(default=None, metadata=OPTIONAL)
    ready_s: float | None = field(default=None, metadata=OPTIONAL)  # start until it answered
    diagnosis: StepDiagnosis | None = field(default=None, metadata=OPTIONAL)
    error: str | None = field(default=None, metadata=OPTIONAL)

    @property
    def measured(self) -> bool:
        return self.rps is not None


@dataclass(frozen=True, kw_only=True)
class ExperimentReport:
    schema_version: int = EXPERIMENT_SCHEMA_VERSION
    kind: str = "experiment"
    target: ExperimentTarget
    settings: ExperimentPlan
    generator: GeneratorInfo = GeneratorInfo()
    variants: tuple[Variant, ...]
    baseline: Baseline
    winner: Pick | None = None
    leader: Pick | None = None
    outcome: str
    headline: str
    margin: float = 0.0
    advice: Advice | None = None
    arms: tuple[ArmRecord, ...] = ()
    decision: Decision | None = None
    runs: tuple[Run, ...] = ()
    interrupted: str | None = None
    partial: bool = False

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = encode(self)
        return out

    @classmethod
    def from_json(cls, data: Any) -> ExperimentReport:
        """The experiment report in `data` (a parsed .json, this version or the previous one)."""
        required = ("target", "settings", "variants", "baseline", "outcome", "headline")
        return replace(_read(cls, data, "experiment", required),
                       schema_version=EXPERIMENT_SCHEMA_VERSION)

    @property
    def top(self) -> Pick | None:
        """The winner, else the leader."""
        return self.winner or self.leader

    def variant(self, name: str | None) -> Variant | None:
        return next((v for v in self.variants if v.name == name), None)


# ------------------------------------------------------------------ reading


R = TypeVar("R", SweepReport, ExperimentReport)


def _read(cls: type[R], data: Any, kind: str, required: tuple[str, ...]) -> R:
    # A report of the other kind (or a diagnosis report) is said so before what it lacks.
    if isinstance(data, dict) and "kind" in data and data["kind"] != kind:
        raise NotAReport("kind", f"not {kind!r}")
    return decode_document(cls, data, ("schema_version", "kind", *required))
