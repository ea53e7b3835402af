"""The verdict and the findings, with each evidence value beside its label and unit: what the
checks build (checks/base.make_finding, checks/engine.verdict_for) and every output reads.

A finding's evidence is written as `{key: value}`; each value carries the label and unit the
report gives its key (`Report.evidence_labels`, from the declaring check's EVIDENCE), or ones
made from the key (labels.py). A new check's evidence therefore needs no change here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from diagnose.vocab import SEVERITY_THRESHOLDS, Confidence, LeverKind, Severity, severity_rank
from diagnose.report.model.codec import (NULL_WHEN_EMPTY, OPTIONAL, OPTIONAL_EMPTY, JsonValue,
                                         NotAReport, encode)
from diagnose.report.model.labels import Evidence, label_for_value

# The evidence key whose value is the first advice as a knob.
FIX_KEY = "fix"


def severity_for(score: float) -> Severity:
    """The severity of a score: the highest whose threshold it reaches (vocab.SEVERITY_THRESHOLDS)."""
    return next((severity for threshold, severity in SEVERITY_THRESHOLDS if score >= threshold),
                Severity.OK)


@dataclass(frozen=True)
class EvidenceValue:
    """One measured (or estimated) value of a finding, with how it reads."""

    key: str
    # A number, string, boolean, null, or an object of name -> value (a share per thread, ...).
    value: JsonValue
    label: str
    unit: str  # a labels.Unit; of each value for an object
    estimable: bool = False  # rests on inferred thread states when the evidence says so
    interval: bool = True  # shown with its interval when the finding has one
    none: str = "\u2014"  # what a null value reads as
    row: bool = True  # a row of the evidence list (`fix` is shown as the knob line instead)

    @property
    def number(self) -> float | None:
        """The value as a number, None when it is not one."""
        v = self.value
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


NO_LABELS: Mapping[str, Evidence] = {}


def evidence_value(key: str, value: JsonValue,
                   labels: Mapping[str, Evidence] = NO_LABELS) -> EvidenceValue:
    """`value` with the label and unit `labels` give `key` (or ones made from the key)."""
    declared = label_for_value(key, value, labels)
    return EvidenceValue(key, value, declared.label, str(declared.unit), declared.estimable,
                         declared.interval, declared.none, declared.row)


@dataclass(frozen=True)
class EvidenceValues:
    """A finding's evidence: its values in the order the check wrote them, each labelled. Read
    by key as a mapping reads (`ev["share"]`, `"share" in ev`, `ev.get(key)`, `dict(ev)`: the
    values); iterated, it gives the labelled values (EvidenceValue)."""

    entries: tuple[EvidenceValue, ...] = ()

    @staticmethod
    def of(values: Mapping[str, JsonValue], labels: Mapping[str, Evidence] = NO_LABELS
           ) -> EvidenceValues:
        return EvidenceValues(tuple(evidence_value(str(k), v, labels) for k, v in values.items()))

    def labelled(self, labels: Mapping[str, Evidence]) -> EvidenceValues:
        """The same values with the labels `labels` give their keys (made from the key else)."""
        relabelled = tuple(evidence_value(v.key, v.value, labels) for v in self.entries)
        return self if relabelled == self.entries else EvidenceValues(relabelled)

    def value(self, key: str) -> EvidenceValue | None:
        return next((v for v in self.entries if v.key == key), None)

    def __getitem__(self, key: str) -> JsonValue:
        found = self.value(key)
        if found is None:
            raise KeyError(key)
        return found.value

    def get(self, key: str, default: JsonValue = None) -> JsonValue:
        found = self.value(key)
        return default if found is None else found.value

    def __contains__(self, key: object) -> bool:
        return any(v.key == key for v in self.entries)

    def __iter__(self) -> Iterator[EvidenceValue]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def keys(self) -> list[str]:
        return [v.key for v in self.entries]

    def items(self) -> list[tuple[str, JsonValue]]:
        return [(v.key, v.value) for v in self.entries]

    def as_dict(self) -> dict[str, JsonValue]:
        return {v.key: v.value for v in self.entries}


def _decode_evidence(raw: JsonValue) -> EvidenceValues:
    if isinstance(raw, EvidenceValues):  # a part built in this process
        return raw
    if not isinstance(raw, dict):
        raise NotAReport("", "an object expected")
    return EvidenceValues.of(raw)


def _encode_evidence(values: EvidenceValues) -> dict[str, JsonValue]:
    return {v.key: encode(v.value) for v in values}


EVIDENCE_CODEC: Mapping[str, Any] = {"codec": (_decode_evidence, _encode_evidence)}


@dataclass(frozen=True)
class Fix:
    """The first advice as a knob: set `knob` to `value` (for `stage`, when it names one)."""

    knob: str
    value: JsonValue
    stage: str | None = None


def _fix(raw: JsonValue) -> Fix:
    if not isinstance(raw, dict):
        return Fix("", None)
    stage = raw.get("stage")
    return Fix(str(raw.get("knob") or ""), raw.get("value"), str(stage) if stage else None)


@dataclass(frozen=True)
class Site:
    function: str
    file: str
    line: int
    share: float  # of the check's reference samples (usually request-thread samples)


@dataclass(frozen=True)
class Interval:
    """A share's 95% Wilson interval and the samples behind it."""

    low: float
    high: float
    samples: int | None = None
    # a share of calibrated states: `samples` is its effective count over this many samples
    # (model/confidence.calibrated_samples); absent otherwise
    calibrated_of: int | None = field(default=None, metadata=OPTIONAL)


@dataclass(frozen=True)
class Lever:
    """One way to act on a finding and what it can buy, as a throughput ratio: an estimate whose
    inputs `basis` states. `label` says the lever in a few words ("if featurize cost nothing",
    "from more cores"); `upper_bound`: the figure is the most the lever can buy (the work made
    free), not what a realistic fix buys. The gain is kept to two decimals."""

    kind: LeverKind = LeverKind.REMOVE_WORK
    gain: float = 1.0
    label: str = ""
    basis: str = ""
    upper_bound: bool = False

    def __post_init__(self) -> None:
        gain = round(float(self.gain), 2)
        if type(self.gain) is not float or gain != self.gain:
            object.__setattr__(self, "gain", gain)

    def to_dict(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = encode(self)
        return out


@dataclass(frozen=True)
class Finding:
    id: str = ""
    title: str = ""
    score: int = 0
    # A Severity (text as written for a word an edited report adds: codec.py).
    severity: Severity = Severity.OK
    summary: str = ""
    # Built from a {key: value} mapping too (labelled from the keys until the report labels it).
    evidence: EvidenceValues = field(default=EvidenceValues(), metadata=EVIDENCE_CODEC)
    sites: tuple[Site, ...] = ()
    advice: tuple[str, ...] = ()
    # What fixing it can buy, as a throughput ratio: an ESTIMATE from the structure found
    # (Amdahl, the utilization law, the cores left), with the inputs in `gain_basis`.
    predicted_gain: float | None = None
    gain_basis: str = ""
    # The samples behind the finding's main share, and each evidence share's 95% Wilson
    # interval; `low_confidence` when they are too few.
    samples: int | None = None
    intervals: Mapping[str, Interval] = field(default_factory=dict)
    low_confidence: bool = False
    basis_key: str | None = None  # the evidence share the score rests on (ScoreBasis), if any
    # The score and the predicted gain at the two ends of the 95% interval of the share the score
    # rests on: how far noise alone could move them. None: exact (from /proc, or a figure no
    # share of samples moves).
    score_interval: tuple[int, int] | None = None
    gain_interval: tuple[float, float] | None = None
    # Each lever the advice pulls and what it can buy (work removed, more cores), beside the
    # ranking's `predicted_gain`: what the report shows. Empty when the check states one gain.
    levers: tuple[Lever, ...] = ()
    # How predictions of this check's gain fared when its advice was applied and measured
    # (checks/calibration.py); absent where none was measured.
    fared: str | None = field(default=None, metadata=OPTIONAL)
    # What the check would use but could not see in this data ("native frames ..."): its finding
    # rests on less. `gain_floor`: why the predicted gain is a lower bound (what was not seen
    # could only add to the cause, or the advice removes more than the figure counts); absent
    # when it is not one (checks/engine.py, or the check itself).
    unseen: tuple[str, ...] = field(default=(), metadata=OPTIONAL_EMPTY)
    gain_floor: str | None = field(default=None, metadata=OPTIONAL)
    # The request phase ("preprocess", "model", "postprocess") of the code the first advice
    # makes cheaper, where the check measured it: two findings that make the same phase's code
    # cheaper are one cause (checks/arbiter.py, rule 7), whichever functions their sites name.
    acts_on: str | None = field(default=None, metadata=OPTIONAL)
    # The pipeline's bottleneck stage whose own share bounded the predicted gain below the
    # check's figure for the threads it measured (checks/pipeline_gain.py): those threads do not
    # set the pace. Absent outside a pipeline and where the stage gains as much.
    bounded_by_stage: str | None = field(default=None, metadata=OPTIONAL)

    def __post_init__(self) -> None:
        if not isinstance(self.evidence, EvidenceValues):
            object.__setattr__(self, "evidence", EvidenceValues.of(self.evidence))
        if type(self.severity) is str and self.severity in _SEVERITY_WORDS:
            object.__setattr__(self, "severity", Severity(self.severity))

    def to_dict(self) -> dict[str, JsonValue]:
        """The finding as the report's JSON writes it."""
        out: dict[str, JsonValue] = encode(self)
        return out

    def labelled(self, labels: Mapping[str, Evidence]) -> Finding:
        """The finding with its evidence labelled by `labels` (the report's table)."""
        evidence = self.evidence.labelled(labels)
        return self if evidence is self.evidence else replace(self, evidence=evidence)

    def rescored(self, score: int) -> Finding:
        """The finding at another score (a service's weighted mean of its workers'): severity
        follows, and the score's interval moves with it, keeping its width."""
        interval = self.score_interval
        if interval is not None:
            shift = score - self.score
            interval = (max(0, interval[0] + shift), min(100, interval[1] + shift))
        # A check that capped its severity under what its score says (underloaded: sure that the
        # workers wait for work, no fault of the process's) keeps that cap at the new score.
        capped = severity_rank(self.severity) < severity_rank(severity_for(self.score))
        severity = min(severity_for(score), self.severity, key=severity_rank) if capped else severity_for(score)
        return replace(self, score=score, severity=severity, score_interval=interval)

    @property
    def score_range(self) -> tuple[int, int]:
        return self.score_interval or (self.score, self.score)

    @property
    def gain_range(self) -> tuple[float, float]:
        gain = self.predicted_gain or 1.0
        return self.gain_interval or (gain, gain)

    def value(self, key: str) -> EvidenceValue | None:
        """The evidence value named `key`, if the finding has one."""
        return self.evidence.value(key)

    def number(self, key: str) -> float | None:
        """The evidence value named `key` as a number, None when absent or not a number."""
        found = self.value(key)
        return None if found is None else found.number

    def rows(self) -> Iterator[EvidenceValue]:
        """The values shown as evidence rows, in order (not `fix`: the knob line shows it)."""
        return (v for v in self.evidence if v.row)

    @property
    def fixes(self) -> tuple[Fix, ...]:
        """The first advice as knobs (`evidence.fix`: one knob, or a list of them); an entry
        that names no knob is a Fix with an empty knob, so a caller can refuse it."""
        found = self.value(FIX_KEY)
        raw = found.value if found is not None else None
        if not raw:
            return ()
        return tuple(_fix(one) for one in (raw if isinstance(raw, list) else [raw]))

    @property
    def state_flag(self) -> str:
        """"estimated" or "calibrated" when the evidence rests on inferred thread states (its
        `estimated` / `calibrated` value is true), else ""."""
        for key in ("estimated", "calibrated"):
            found = self.value(key)
            if found is not None and found.value is True:
                return key
        return ""


_SEVERITY_WORDS = frozenset(s.value for s in Severity)


def labelled(findings: Iterable[Finding], labels: Mapping[str, Evidence]) -> tuple[Finding, ...]:
    return tuple(f.labelled(labels) for f in findings)


@dataclass(frozen=True)
class NotApplicable:
    """A check that lacks its inputs says so instead of guessing."""

    id: str
    reason: str = ""


@dataclass(frozen=True)
class Verdict:
    primary: str
    headline: str = ""
    # The highest severity of the findings the verdict names (the --fail-on gate reads it).
    severity: Severity = Severity.OK
    # "low" when a finding it names rests on too few samples (its severity is then capped).
    confidence: Confidence = Confidence.OK
    samples: int | None = None
    # A second finding within the noise of the primary (arbiter rule 4): either could have come
    # first on another attach, so the verdict names both, in the causal order, and says why.
    co_primary: str | None = None
    co_primary_reason: str = field(default="", metadata=NULL_WHEN_EMPTY)  # null when none
    # The first advice of each finding the verdict names, in the same order.
    first_advice: tuple[str, ...] = ()
    # Findings folded into the verdict (arbiter rule 7): the same cause as one it names, seen
    # from another side. Not named; absent from the JSON when none is.
    also: tuple[str, ...] = field(default=(), metadata=OPTIONAL_EMPTY)

    def to_dict(self) -> dict[str, JsonValue]:
        """The JSON report's `verdict` (docs/report-data.md)."""
        out: dict[str, JsonValue] = encode(self)
        return out

    @property
    def named(self) -> tuple[str, ...]:
        """The findings the verdict names: its primary, and its co-primary if any."""
        return (self.primary,) + ((self.co_primary,) if self.co_primary else ())
