"""The verdict and the findings, with each evidence value beside its label and unit.

A finding's evidence is written as today, `{key: value}`; read back, each value carries the
label and unit its check declares (checks/spec.Evidence, gathered by checks/registry), or ones
made from the key for a key no check declares. A new check's evidence therefore needs no change
here: the model holds label / unit / value, whatever the key.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from diagnose.model.vocab import Confidence, Severity
from diagnose.report.model.codec import OPTIONAL, JsonValue, NotAReport

# The evidence key whose value is the first advice as a knob.
FIX_KEY = "fix"


@dataclass(frozen=True)
class EvidenceValue:
    """One measured (or estimated) value of a finding, with how it reads."""

    key: str
    # A number, string, boolean, null, or an object of name -> value (a share per thread, ...).
    value: JsonValue
    label: str
    unit: str  # a checks.spec.Unit; of each value for an object
    estimable: bool = False  # rests on inferred thread states when the evidence says so
    interval: bool = True  # shown with its interval when the finding has one
    none: str = "\u2014"  # what a null value reads as
    row: bool = True  # a row of the evidence list (`fix` is shown as the knob line instead)

    @property
    def number(self) -> float | None:
        """The value as a number, None when it is not one."""
        v = self.value
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def evidence_value(key: str, value: JsonValue) -> EvidenceValue:
    """`value` with the label and unit its check declares for `key` (or made from the key)."""
    # Imported here: the declarations gather every check module, which a report read back for
    # its verdict alone does not need at import time.
    from diagnose.report.model.labels import label_for_value

    declared = label_for_value(key, value)
    return EvidenceValue(key, value, declared.label, str(declared.unit), declared.estimable,
                         declared.interval, declared.none, declared.row)


def _decode_evidence(raw: JsonValue) -> tuple[EvidenceValue, ...]:
    if not isinstance(raw, dict):
        raise NotAReport("", "an object expected")
    return tuple(evidence_value(str(k), v) for k, v in raw.items())


def _encode_evidence(values: tuple[EvidenceValue, ...]) -> dict[str, JsonValue]:
    return {v.key: v.value for v in values}


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
    share: float


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
    """One way to act on a finding and what it can buy (an estimate whose inputs `basis` says)."""

    kind: str = "remove_work"  # a checks.base.LeverKind: remove_work | more_cores
    gain: float = 1.0
    label: str = ""
    basis: str = ""
    upper_bound: bool = False


@dataclass(frozen=True)
class Finding:
    id: str = ""
    title: str = ""
    score: int = 0
    severity: str = Severity.OK  # a Severity; text as written (an edited report may say more)
    summary: str = ""
    evidence: tuple[EvidenceValue, ...] = field(default=(), metadata=EVIDENCE_CODEC)
    sites: tuple[Site, ...] = ()
    advice: tuple[str, ...] = ()
    predicted_gain: float | None = None  # an ESTIMATE: throughput with the fix / now
    gain_basis: str = ""
    samples: int | None = None
    intervals: Mapping[str, Interval] = field(default_factory=dict)
    low_confidence: bool = False
    basis_key: str | None = None
    score_interval: tuple[int, int] | None = None
    gain_interval: tuple[float, float] | None = None
    levers: tuple[Lever, ...] = ()

    def value(self, key: str) -> EvidenceValue | None:
        """The evidence value named `key`, if the finding has one."""
        return next((v for v in self.evidence if v.key == key), None)

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


@dataclass(frozen=True)
class Verdict:
    primary: str
    headline: str = ""
    severity: str = Severity.OK  # the highest of the named findings' (--fail-on reads it)
    confidence: str = Confidence.OK
    samples: int | None = None
    co_primary: str | None = None
    co_primary_reason: str | None = None
    first_advice: tuple[str, ...] = ()
    # Folded in: one cause with a named finding (arbiter rule 7); absent when none is.
    also: tuple[str, ...] | None = field(default=None, metadata=OPTIONAL)

    @property
    def named(self) -> tuple[str, ...]:
        """The findings the verdict names: its primary, and its co-primary if any."""
        return (self.primary,) + ((self.co_primary,) if self.co_primary else ())
