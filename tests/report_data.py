"""Report models from the (partial) report dicts tests write: the keys a test leaves out take
the model's defaults, so a test states only what it is about."""

from __future__ import annotations

from diagnose.report.model import Finding, Report, Verdict
from diagnose.report.model.codec import decode


def as_report(data: dict | Report) -> Report:
    if isinstance(data, Report):
        return data
    full = {"schema_version": 2, "sampling": {}, "findings": [], "threads": [], **data}
    full["verdict"] = {"primary": "none", **(data.get("verdict") or {})}
    return Report.from_json(full)


def as_finding(data: dict | Finding) -> Finding:
    if isinstance(data, Finding):
        return data
    return decode(Finding, {"id": "check", **(data if isinstance(data, dict) else {})})


def as_verdict(data: dict) -> Verdict:
    return decode(Verdict, data)
