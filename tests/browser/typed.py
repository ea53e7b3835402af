"""The browser tests' typed views: the Report a page was made from (decoded once from its JSON),
a page's data carrying a changed Report, and what a page script returned, read by attribute.

A test compares what the page shows with the typed Report (`report.verdict.primary`,
`report.finding("lock_contention").severity`), so a renamed field is one error here, not a
KeyError in every test. Pages fed values no report has (hostile or missing shapes) are still
built from dicts: no Report can hold them.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from diagnose.report.model import Finding, Report


def report_of(data: dict) -> Report:
    """The Report a page's data (`{"report": ..., "flame": ...}`) carries."""
    return Report.from_json(data["report"])


def with_report(data: dict, report: Report) -> dict:
    """A copy of the page's data `data` carrying `report`, written as diagnose writes it (and
    the page's own copy of its thread table, where the data still has one)."""
    out = copy.deepcopy(data)
    written = report.to_json()
    out["report"] = written
    if "threads" in out:
        out["threads"] = written["threads"]
    return out


def read_report(path: Path) -> Report:
    """The Report of a written .json report."""
    return Report.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


def finding(report: Report, finding_id: str) -> Finding:
    """The report's finding `finding_id`; the test fails when the report has none."""
    found = report.finding(finding_id)
    assert found is not None, f"no {finding_id} finding in {[f.id for f in report.findings]}"
    return found


def evidence_keys(f: Finding) -> list[str]:
    """The finding's evidence keys, in the report's order."""
    return [v.key for v in f.evidence]


def evidence_of(f: Finding, key: str) -> Any:
    """The evidence value `key` of `f` as written (an object stays a dict); the test fails when
    the finding has no such value."""
    found = f.value(key)
    assert found is not None, f"{f.id} has no evidence {key!r}: {evidence_keys(f)}"
    return found.value


def shown(value: Any) -> Any:
    """A value a page script returned, its objects read by attribute (`row.kind`; a key's "-"
    read as "_": `facts.cpu_os`): what the page shows, compared with the typed Report."""
    if isinstance(value, dict):
        return SimpleNamespace(**{str(k).replace("-", "_"): shown(v) for k, v in value.items()})
    if isinstance(value, list):
        return [shown(v) for v in value]
    return value


def with_evidence(f: Finding, key: str, value: Any) -> Finding:
    """`f` whose evidence value `key` (one it has) is `value`."""
    assert f.value(key) is not None, f"{f.id} has no evidence {key!r}"
    values = tuple(replace(v, value=value) if v.key == key else v for v in f.evidence)
    # the same container the finding holds its labelled values in
    return replace(f, evidence=type(f.evidence)(values))


def typed(report: dict | Report) -> Report:
    """`report` as the model: a written report's JSON is decoded, a Report is itself."""
    return report if isinstance(report, Report) else Report.from_json(report)
