"""Report models from the (partial) report dicts tests write: the keys a test leaves out take
the model's defaults, so a test states only what it is about."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from diagnose.checks.registry import evidence_labels
from diagnose.report.model import Finding, Report, Verdict
from diagnose.report.model.codec import decode


# What a partial report dict is completed with; a section given as an object is merged into its
# default object, so `{"verdict": {"headline": "h"}}` keeps the default primary.
DEFAULTS: dict = {"schema_version": 2, "sampling": {}, "findings": [], "threads": [],
                  "verdict": {"primary": "none"}}


def as_report(data: dict | Report) -> Report:
    if isinstance(data, Report):
        return data
    full = {**DEFAULTS, **data}
    full.update((key, {**DEFAULTS[key], **(value or {})}) for key, value in full.items()
                if isinstance(DEFAULTS.get(key), dict) and isinstance(value, dict | None))
    return Report.from_json(full, older_labels=evidence_labels)


def as_finding(data: dict | Finding) -> Finding:
    if isinstance(data, Finding):
        return data
    return decode(Finding, {"id": "check", **(data if isinstance(data, dict) else {})}
                  ).labelled(evidence_labels())


def as_verdict(data: dict) -> Verdict:
    return decode(Verdict, data)


REMOVED = object()  # json_edited's value for "leave the key out"


def json_edited(data: Any, path: tuple, value: Any = REMOVED) -> Any:
    """A deep copy of the JSON `data` with the part at `path` (keys and list indexes) set to
    `value`, or left out: how a test writes a report file that is broken in one place."""
    data = copy.deepcopy(data)
    *parents, last = path
    inner = data
    for step in parents:
        inner = inner[step]
    if value is REMOVED:
        del inner[last]
    else:
        inner[last] = value
    return data


def decided_report(verdict: Verdict, findings=()) -> Report:
    """A report of just a verdict and its findings, as the checks decided them."""
    return replace(as_report({}), verdict=verdict, findings=tuple(findings))
