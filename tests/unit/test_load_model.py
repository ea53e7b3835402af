"""The sweep and experiment reports as typed values: what is written reads back equal, the JSON
written before the model (tests/goldens/load_reports_before_model.json: sweep schema 1,
experiment schema 2) still reads and writes back the same keys and values, and anything that is
not such a report is exit 6 naming what is missing."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from diagnose.errors import BadProfile, ExitCode
from diagnose.report.load_report import (EXPERIMENT_SCHEMA_VERSION, SWEEP_SCHEMA_VERSION, ExperimentReport,
                                 NotAReport, SweepReport)
from tests.report_data import json_edited
from tests.unit.test_load_markdown import experiment, pool_verdicts, sweep

BEFORE = json.loads((Path(__file__).parent.parent / "goldens" /
                     "load_reports_before_model.json").read_text(encoding="utf-8"))
MODELS = {"sweep": SweepReport, "experiment": ExperimentReport}
VERSIONS = {"sweep": SWEEP_SCHEMA_VERSION, "experiment": EXPERIMENT_SCHEMA_VERSION}
# A sweep that measured no throughput now writes these summary keys as null (they were absent).
NULL_WHEN_NO_THROUGHPUT = {"peak", "latency_growth_to_knee", "other_load_cores"}


def _as_written(report: SweepReport | ExperimentReport) -> dict:
    return json.loads(json.dumps(report.to_json()))


def test_a_sweep_report_reads_back_equal_to_what_was_written():
    report = sweep(pool_verdicts)
    assert report.steps[2].diagnosis is not None  # the diagnosis per step is part of it
    again = SweepReport.from_json(_as_written(report))
    assert again == report
    assert again.knee_step is not None and again.knee_step.concurrency == 4


def test_an_experiment_report_reads_back_equal_to_what_was_written():
    report = experiment({"T=1": [50, 60], "T=8": [300, 320]})
    again = ExperimentReport.from_json(_as_written(report))
    assert again == report
    assert again.top is not None and again.top.name == "T=8"
    assert again.variant("T=8").verdict.primary == "pool_wait"


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_a_report_written_before_the_model_reads_and_writes_back_the_same_keys(name):
    old = copy.deepcopy(BEFORE[name])
    kind, version = old["kind"], old["schema_version"]
    model = MODELS[kind].from_json(copy.deepcopy(old))
    assert model.schema_version == VERSIONS[kind] == version + 1
    new = json.loads(json.dumps(model.to_json()))
    old_summary, new_summary = old.get("summary") or {}, new.get("summary") or {}
    added = set(new_summary) - set(old_summary)
    if old_summary.get("limited_by") == "no throughput":
        assert added == NULL_WHEN_NO_THROUGHPUT
        assert all(new_summary[k] is None for k in added)
    else:
        assert not added
    for part, summary in ((new, new_summary), (old, old_summary)):
        part.pop("schema_version")
        for key in added:
            summary.pop(key, None)
    assert new == old


def _without(data: dict, path: tuple) -> dict:
    return json_edited(data, path)


@pytest.mark.parametrize("name, path, message", [
    ("sweep_pool", ("summary",), "without summary"),
    ("sweep_pool", ("steps", 1, "latency_ms"), "missing at steps[1].latency_ms"),
    ("sweep_pool", ("machine", "cores"), "missing at machine.cores"),
    ("experiment", ("variants", 0, "name"), "missing at variants[0].name"),
    ("experiment", ("runs", 1, "diagnosis", "seconds"), "missing at runs[1].diagnosis.seconds"),
])
def test_a_report_missing_a_key_it_cannot_do_without_is_exit_6_naming_it(name, path, message):
    old = BEFORE[name]
    with pytest.raises(NotAReport) as err:
        MODELS[old["kind"]].from_json(_without(old, path))
    assert message in str(err.value)
    assert isinstance(err.value, BadProfile) and err.value.exit_code == ExitCode.BAD_PROFILE == 6


def test_a_file_of_another_kind_or_shape_is_exit_6():
    with pytest.raises(NotAReport, match="not 'sweep' at kind"):
        SweepReport.from_json(BEFORE["experiment"])
    with pytest.raises(NotAReport, match="not 'experiment' at kind"):
        ExperimentReport.from_json(BEFORE["sweep_pool"])
    with pytest.raises(NotAReport, match="not a JSON object"):
        SweepReport.from_json([BEFORE["sweep_pool"]])
    # a diagnose (attach) report is neither
    with pytest.raises(NotAReport, match="without kind"):
        SweepReport.from_json({"schema_version": 2, "sampling": {}, "verdict": {},
                               "findings": [], "threads": [], "target": {}, "machine": {},
                               "summary": {}, "steps": []})
    wrong = json_edited(BEFORE["sweep_pool"], ("steps", 0, "throughput_rps"), "fast")
    with pytest.raises(NotAReport, match=r"a float expected, not str at steps\[0\].throughput_rps"):
        SweepReport.from_json(wrong)


def test_the_sweep_gate_reads_the_verdict_behind_the_knee_else_the_last_diagnosed():
    from dataclasses import replace

    from diagnose.cli.sweep import _sweep_gate_verdict
    from diagnose.report.step_diagnosis import StepVerdict

    report = sweep(pool_verdicts)
    assert report.summary.why is not None and report.summary.why.concurrency == 4
    verdict = _sweep_gate_verdict(report)
    assert (verdict.primary, verdict.severity) == ("pool_wait", "critical")
    # without a knee's verdict: the last step diagnosed; a verdict without severity is "ok"
    steps = tuple(replace(s, verdict=StepVerdict(primary=f"p{i}") if i < 2 else None)
                  for i, s in enumerate(report.steps))
    unexplained = replace(report, steps=steps, summary=replace(report.summary, why=None))
    verdict = _sweep_gate_verdict(unexplained)
    assert (verdict.primary, verdict.severity) == ("p1", "ok")
    assert _sweep_gate_verdict(sweep()) is None  # nothing diagnosed: nothing to gate on


def test_a_sweep_whose_settings_make_no_sweep_is_exit_6_naming_them():
    # The settings are the sweep's own (report/load_report.py SweepSettings): its checks refuse
    # them on reading as on running.
    edited = json_edited(BEFORE["sweep_pool"], ("settings", "levels"), [4, 2])
    with pytest.raises(NotAReport, match="strictly increasing at settings"):
        SweepReport.from_json(edited)
