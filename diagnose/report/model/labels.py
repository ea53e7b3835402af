"""The label and unit of every evidence key: declared by the check that measures it (each
check's EVIDENCE, gathered by checks/registry.py), or made from the key itself for a key no
check declares, so a new key never reaches a reader raw."""

from __future__ import annotations

from diagnose.checks.registry import evidence_labels
from diagnose.checks.spec import Evidence
from diagnose.checks.spec import Unit as U

PERCENT, SECONDS, PER_S, MB, MB_PER_S = U.PERCENT, U.SECONDS, U.PER_S, U.MB, U.MB_PER_S
CORES, NUMBER, ID, THREADS, SAMPLES = U.CORES, U.NUMBER, U.ID, U.THREADS, U.SAMPLES

# Every evidence key the checks emit, declared by the check that measures it (checks/*.py's
# EVIDENCE; checks/evidence.py for the shared ones).
LABELS: dict[str, Evidence] = evidence_labels()

SKIPPED = tuple(key for key, label in LABELS.items() if not label.row)  # `fix`: the knob line

# Words of a humanized key: abbreviations spelled out, units dropped (the value carries them).
_WORDS = {"cpu": "CPU", "gil": "GIL", "os": "(OS)", "rss": "resident memory", "ctx": "context switches",
          "io": "IO", "r2": "r\u00b2", "mb": "", "pct": "percent", "num": "number", "p99": "P99",
          "p50": "P50", "id": "id", "pid": "pid", "db": "database", "rpc": "RPC", "http": "HTTP"}


def label_for(key: str) -> Evidence:
    """The explicit label of `key`, or one made from the key itself."""
    known = LABELS.get(key)
    return known if known is not None else fallback_label(key)


def infer_unit(key: str) -> str:
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


def label_for_value(key: str, value: object) -> Evidence:
    """`label_for(key)`; for a key no check declares whose suffix says nothing, the value's type
    decides (a flag, a text)."""
    label = label_for(key)
    if key in LABELS or label.unit != NUMBER:
        return label
    if isinstance(value, bool):
        return Evidence(label.label, U.FLAG)
    if isinstance(value, str):
        return Evidence(label.label, U.TEXT)
    return label
