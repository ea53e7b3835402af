"""Evidence as people read it: a label and a value with its unit, instead of a JSON key.

`describe_evidence(finding)` turns a finding's `evidence` into rows for the report page:

    {"key": "lock_wait_share",
     "label": "share of request-thread time waiting on locks",
     "text": "35% (31–39%), 812 samples"}

A share whose 95% Wilson interval is in the finding's `intervals` shows that interval as a range
(it is asymmetric near 0% and 100%, so never as ±) and the samples behind it. A value that
depends on inferred thread states says so when the finding's evidence is marked `estimated`
(or `calibrated`). A dict value also gets `items`, [[name, text], ...], for the page's nested
list. Every key the checks emit has a label and a unit, declared next to the code that measures
it (each check's EVIDENCE, checks/registry.py gathers them); an unknown key is humanized and its
unit inferred from its suffix, so a new key never reaches the page raw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from diagnose.checks.registry import evidence_labels
from diagnose.report.model.codec import OPTIONAL, OPTIONAL_EMPTY, encode
from diagnose.report.model.labels import DASH
from diagnose.report.model.labels import Unit as U
# The labels a report carries are the report model's; re-exported for the renderers that read
# them here.
from diagnose.report.model.labels import Evidence, fallback_label, humanize, infer_unit  # noqa: F401

if TYPE_CHECKING:
    from diagnose.report.model import EvidenceValue, Finding, Interval

PERCENT, SECONDS, PER_S, MB, MB_PER_S = U.PERCENT, U.SECONDS, U.PER_S, U.MB, U.MB_PER_S
CORES, RATIO, NUMBER, TEXT, FLAG, ID = U.CORES, U.RATIO, U.NUMBER, U.TEXT, U.FLAG, U.ID
THREADS, SAMPLES, PROCESSES, LOOPS, SITES = U.THREADS, U.SAMPLES, U.PROCESSES, U.LOOPS, U.SITES

# Every evidence key the checks emit, declared by the check that measures it (checks/*.py's
# EVIDENCE; checks/evidence.py for the shared ones).
LABELS: dict[str, Evidence] = evidence_labels()
SKIPPED = tuple(key for key, label in LABELS.items() if not label.row)  # `fix`: the knob line


def label_for(key: str) -> Evidence:
    """The declared label of `key`, or one made from the key itself."""
    known = LABELS.get(key)
    return known if known is not None else fallback_label(key)


# Count units: (singular, plural).
_NOUNS: dict[str, tuple[str, str]] = {THREADS: ("thread", "threads"), SAMPLES: ("sample", "samples"),
          PROCESSES: ("process", "processes"), LOOPS: ("event loop", "event loops"),
          SITES: ("call site", "call sites"), CORES: ("core", "cores")}

EN_DASH = "\u2013"
TIMES = "\u00d7"

# ------------------------------------------------------------------ numbers


def fmt_number(x) -> str:
    """A plain number, rounded for reading: 3,200 / 123.4 / 1.56 / 0.0123."""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    x = float(x)
    if not math.isfinite(x):
        return DASH
    a = abs(x)
    if x.is_integer() and a < 1e15:
        return f"{int(x):,}"
    if a >= 1000:
        return f"{int(_round_half_up(x)):,}"
    if a >= 100:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}".rstrip("0").rstrip(".")
    if a < 0.001:
        return "<0.001" if x > 0 else ">-0.001"
    return f"{x:.3g}"


def _round_half_up(x: float) -> float:
    return math.floor(x + 0.5)


def fmt_percent(share) -> str:
    """A fraction as a percentage: whole percent from 10%, one decimal below; "<0.1%" for a
    trace, and never "100%" for a share short of it."""
    p = 100 * float(share)
    if p == 0:
        return "0%"
    if 0 < abs(p) < 0.1:
        return "<0.1%"
    if abs(p) < 10:
        return f"{p:.1f}%"
    if share < 1 and _round_half_up(p) >= 100:
        one = f"{p:.1f}"
        return ">99.9%" if one == "100.0" else one + "%"
    return f"{int(_round_half_up(p))}%"


def fmt_seconds(s) -> str:
    """1.25 s; under a second in ms (45 ms), under a millisecond in \u00b5s."""
    s = float(s)
    a = abs(s)
    if a == 0:
        return "0 s"
    if a >= 1:
        return f"{fmt_number(s)} s"
    if a >= 0.001:
        return f"{fmt_number(1000 * s)} ms"
    return f"{fmt_number(1e6 * s)} \u00b5s"


def _count(x, unit: str) -> str:
    one, many = _NOUNS[unit]
    return f"{fmt_number(x)} {one if x == 1 else many}"


def fmt_value(value, unit: str, none: str = DASH) -> str:
    """`value` written in `unit`. Values of an unexpected type are written as they are."""
    if value is None:
        return none
    if isinstance(value, dict):
        if not value:
            return "none"
        return "; ".join(f"{name}: {text}" for name, text in _items(value, unit, none))
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt_value(v, unit, none) for v in value) if value else "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return none
    if unit == PERCENT:
        return fmt_percent(value)
    if unit == SECONDS:
        return fmt_seconds(value)
    if unit == PER_S:
        return f"{fmt_number(value)} /s"
    if unit == MB:
        return f"{fmt_number(value)} MB"
    if unit == MB_PER_S:
        return f"{fmt_number(value)} MB/s"
    if unit == RATIO:
        return f"{float(value):.2f}{TIMES}"
    if unit == ID:
        return str(int(value)) if float(value).is_integer() else str(value)
    if unit in _NOUNS:
        return _count(value, unit)
    return fmt_number(value)


def _items(value: dict, unit: str, none: str) -> list[tuple[str, str]]:
    return [(str(name), fmt_value(v, unit, none)) for name, v in value.items()]


# ------------------------------------------------------------------ labels


# ------------------------------------------------------------------ rows


@dataclass(frozen=True)
class ShownInterval:
    low: float
    high: float
    samples: int | None


@dataclass(frozen=True)
class EvidenceRow:
    """One evidence value as people read it: its label and its text (value, unit, interval)."""

    key: str
    label: str
    text: str
    # a share's 95% interval, when shown
    interval: ShownInterval | None = field(default=None, metadata=OPTIONAL)
    # a dict value's entries, [name, text]
    items: tuple[tuple[str, str], ...] | None = field(default=None, metadata=OPTIONAL)
    # "estimated" / "calibrated": the value rests on inferred thread states
    flag: str = field(default="", metadata=OPTIONAL_EMPTY)

    def to_json(self) -> dict[str, object]:
        """The page's row (the report model's codec writes it: the page's types are generated
        from these fields, scripts/gen_page_types.py): {"key", "label", "text"}, "interval"
        when shown, "items" for a dict, "flag" when flagged."""
        row: dict[str, object] = encode(self)
        return row


def describe_item(item: EvidenceValue, interval: Interval | None = None,
                  flag: str = "") -> EvidenceRow:
    """One evidence row. `flag`: "estimated" / "calibrated" when the finding's evidence rests
    on inferred states."""
    value = item.value
    text = fmt_value(value, item.unit, item.none)
    shown = interval if item.interval else None
    drawn: ShownInterval | None = None
    if (item.unit == PERCENT and shown is not None and isinstance(value, (int, float))
            and not isinstance(value, bool)):
        lo, hi = fmt_percent(shown.low), fmt_percent(shown.high)
        bounds = lo.removesuffix("%") + EN_DASH + hi if lo.endswith("%") else lo + EN_DASH + hi
        text = f"{text} ({bounds})"
        if shown.samples is not None:
            text += (f", calibrated: as sure as {_count(shown.samples, SAMPLES)} of "
                     f"{shown.calibrated_of:,}" if shown.calibrated_of is not None
                     else ", " + _count(shown.samples, SAMPLES))
        drawn = ShownInterval(shown.low, shown.high, shown.samples)
    items = tuple(_items(value, item.unit, item.none)) if isinstance(value, dict) else None
    shown_flag = flag if flag and item.estimable and value is not None else ""
    if shown_flag:
        text += f" ({shown_flag})"
    return EvidenceRow(item.key, item.label, text, interval=drawn, items=items, flag=shown_flag)


def describe_evidence(finding: Finding) -> list[EvidenceRow]:
    """Each evidence value of `finding` as a labelled row, in the evidence's order; `fix` is left
    out (the page shows it as the knob line)."""
    return [describe_item(v, finding.intervals.get(v.key), finding.state_flag)
            for v in finding.rows()]
