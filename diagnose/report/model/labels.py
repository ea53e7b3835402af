"""How an evidence value reads: its label and unit (`Evidence`), declared by the check that
measures it (each check's EVIDENCE, gathered by checks/registry.py) and carried by the report
itself (`Report.evidence_labels`, written from those declarations when the report is built), so a
saved report renders with its own labels and the model imports nothing of the checks. A key no
label is given for is labelled from the key itself, so a new key never reaches a reader raw."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Unit(StrEnum):
    """How an evidence value (or, for a dict, each of its values) is written."""

    PERCENT = "percent"
    SECONDS = "seconds"
    PER_S = "per_s"
    MB = "mb"
    MB_PER_S = "mb_per_s"
    CORES = "cores"
    RATIO = "ratio"
    NUMBER = "number"
    TEXT = "text"
    FLAG = "flag"
    ID = "id"
    THREADS = "threads"
    SAMPLES = "samples"
    PROCESSES = "processes"
    LOOPS = "loops"
    SITES = "sites"


DASH = "\u2014"
NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class Evidence:
    """How one evidence value reads: its label and unit."""

    label: str
    unit: Unit  # of the value; for a dict, of each of its values
    # The value rests on inferred thread states: flagged when the evidence says `estimated`.
    estimable: bool = False
    # Shown with its interval when `intervals` has one (False for a value that is itself a bound).
    interval: bool = True
    none: str = DASH  # what a null value means
    # A row of the report's evidence list (False: shown another way, as `fix` is the knob line).
    row: bool = True


PERCENT, SECONDS, PER_S, MB, MB_PER_S = Unit.PERCENT, Unit.SECONDS, Unit.PER_S, Unit.MB, Unit.MB_PER_S
CORES, NUMBER, ID, THREADS, SAMPLES = Unit.CORES, Unit.NUMBER, Unit.ID, Unit.THREADS, Unit.SAMPLES

# Words of a humanized key: abbreviations spelled out, units dropped (the value carries them).
_WORDS = {"cpu": "CPU", "gil": "GIL", "os": "(OS)", "rss": "resident memory", "ctx": "context switches",
          "io": "IO", "r2": "r\u00b2", "mb": "", "pct": "percent", "num": "number", "p99": "P99",
          "p50": "P50", "id": "id", "pid": "pid", "db": "database", "rpc": "RPC", "http": "HTTP"}


def infer_unit(key: str) -> Unit:
    """A unit from the key's suffix (the naming convention of the checks)."""
    k = key.lower()
    if k.endswith("_mb_per_s"):
        return MB_PER_S
    if k.endswith("_per_s"):
        return PER_S
    if k.endswith("_mb"):
        return MB
    if k.endswith(("_s", "_seconds")):
        return SECONDS
    if k.endswith("_cores") or k == "cores":
        return CORES
    if (k.endswith(("_share", "_shares")) or "_share_" in k or k.startswith("share_")
            or k == "share" or "utilization" in k):
        return PERCENT
    if k.endswith("threads"):
        return THREADS
    if k.endswith("samples"):
        return SAMPLES
    if k == "pid" or k.endswith("_pid"):
        return ID
    return NUMBER


def humanize(key: str) -> str:
    """'queue_wait_thread_seconds' -> 'queue wait thread seconds'; units the value shows
    ('_s', '_mb', '_per_s') are left out. Never contains an underscore."""
    words = [w for w in str(key).replace("-", "_").split("_") if w]
    unit = infer_unit(key)
    if unit in (PER_S, MB_PER_S) and words[-2:] == ["per", "s"]:
        words = words[:-2]
    elif unit == SECONDS and words and words[-1] == "s":
        words = words[:-1]
    out = [_WORDS.get(w.lower(), w) for w in words]
    text = " ".join(w for w in out if w).strip()
    return text or "value"


def fallback_label(key: str) -> Evidence:
    return Evidence(humanize(key), infer_unit(key))


def label_for_value(key: str, value: object, declared: Mapping[str, Evidence]) -> Evidence:
    """The label `declared` gives `key`; for a key it does not declare, one made from the key,
    whose unit, when the suffix says nothing, the value's type decides (a flag, a text)."""
    known = declared.get(key)
    if known is not None:
        return known
    label = fallback_label(key)
    if label.unit != NUMBER:
        return label
    if isinstance(value, bool):
        return Evidence(label.label, Unit.FLAG)
    if isinstance(value, str):
        return Evidence(label.label, Unit.TEXT)
    return label
