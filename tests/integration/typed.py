"""The live tests' view of a report: the typed `Report` (diagnose/report/model), decoded once from
the CLI's --json output or a written .json, so a test reads `report.verdict.primary` and a
renamed field is one type error instead of a KeyError in every test that dug for it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from diagnose.compare.model import Diff
from diagnose.report.load_report import ExperimentReport, SweepReport
from diagnose.report.model import Finding, Report
from diagnose.report.model.codec import JsonValue, decode
from diagnose.report.model.deadlocks import ReportedDeadlock
from tests.conftest import CliResult, invoke_cli, run_cli

_MISSING: Any = object()


def as_report(data: Any) -> Report:
    """`data` (a parsed .json report, or a Report already) as the typed report."""
    return data if isinstance(data, Report) else Report.from_json(data)


def read_report(path: Path | str) -> Report:
    """The report written to `path`: a .json report, or the data block of an HTML report."""
    if Path(path).suffix == ".html":
        from diagnose.report.reader import read_report as read_page

        return read_page(path)
    return Report.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


def run_report(*args: object, **kwargs: Any) -> tuple[subprocess.CompletedProcess, Report | None]:
    """tests.conftest.run_cli, its --json output read as a Report (None when there is none)."""
    proc, data = run_cli(*args, **kwargs)
    return proc, None if data is None else Report.from_json(data)


def invoke_report(*args: object, **kwargs: Any) -> tuple[CliResult, Report | None]:
    """tests.conftest.invoke_cli, its --json output read as a Report (None when there is none)."""
    proc, data = invoke_cli(*args, **kwargs)
    return proc, None if data is None else Report.from_json(data)


def finding(report: Report, check_id: str) -> Finding:
    """The finding `check_id` of the report; fails the test when the report has none."""
    found = report.finding(check_id)
    assert found is not None, (check_id, [f.id for f in report.findings], report.verdict)
    return found


def evidence(found: Finding, key: str, default: Any = _MISSING) -> JsonValue:
    """The evidence value `key` of a finding as written (a number, a string, an object...).
    Without `default`, a finding that has no such value fails the test."""
    value = found.value(key)
    if value is None:
        assert default is not _MISSING, (found.id, key, [v.key for v in found.evidence])
        return default
    return value.value


def number(found: Finding, key: str) -> float:
    """The evidence value `key` as a number; fails the test when it is absent or not one."""
    value = found.number(key)
    assert value is not None, (found.id, key, evidence(found, key, None))
    return value


def outcome(report: Report, check_id: str) -> str:
    """A check's severity, or "not applicable": every check ends as exactly one of the two, so a
    check missing from the report fails here instead of passing as "no finding"."""
    found = [f.severity for f in report.findings if f.id == check_id]
    skipped = [n.reason for n in report.not_applicable if n.id == check_id]
    assert len(found) + len(skipped) == 1, (check_id, found, skipped)
    return str(found[0]) if found else "not applicable"


def deadlock_cycles(found: Finding) -> tuple[ReportedDeadlock, ...]:
    """The cycles the deadlock finding's evidence lists, thread (or task) by thread, in the types
    the check builds (diagnose/report/model/deadlocks.py); one not of their shape fails the test."""
    raw = evidence(found, "deadlocks")
    assert isinstance(raw, list), raw
    return tuple(decode(ReportedDeadlock, c) for c in raw)


def as_sweep(data: Any) -> SweepReport:
    """A `sweep --json` output (or a written sweep .json) as the typed sweep report."""
    return data if isinstance(data, SweepReport) else SweepReport.from_json(data)


def as_experiment(data: Any) -> ExperimentReport:
    """An `experiment --json` output (or a written experiment .json), typed."""
    return data if isinstance(data, ExperimentReport) else ExperimentReport.from_json(data)


def as_diff(data: Any) -> Diff:
    """A `diff --json` output, typed."""
    return data if isinstance(data, Diff) else Diff.from_json(data)
