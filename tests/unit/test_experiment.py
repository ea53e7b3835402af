"""`diagnose experiment`'s alternation and decision, on runs given by hand; the change read from
a report's advice; the page. The run that starts real services is in
tests/integration/test_load_commands.py."""

from __future__ import annotations

import json
import re

import pytest

from diagnose.errors import BadProfile
from diagnose.experiment import (Arm, ExperimentResult, RunSettings, decide, experiment_report,
                                 fix_from_report, parse_assignments, round_order,
                                 run_experiment)
from diagnose.render.sweep_html import render_experiment_html

BASE = Arm("baseline", ("serve",))
VARIANT = Arm("variant", ("serve",), (("OPENBLAS_NUM_THREADS", "1"),))


def fake_runs(rates: dict[str, list[float]]):
    """A run function serving the given rates per arm, one per call, in order."""
    seen = {name: 0 for name in rates}
    order = []

    def run(arm: Arm) -> dict:
        rate = rates[arm.name][seen[arm.name]]
        seen[arm.name] += 1
        order.append(arm.name)
        return {"rps": rate, "p99_ms": 1000 / rate, "service_cores": 1.0,
                "generator_cores": 0.2, "errors": 0}
    return run, order


def test_rounds_alternate_and_rotate_which_arm_goes_first():
    assert [round_order(r) for r in range(4)] == [[0, 1], [1, 0], [0, 1], [1, 0]]
    run, order = fake_runs({"baseline": [100, 100, 100], "variant": [150, 150, 150]})
    result = run_experiment((BASE, VARIANT), 3, run)
    assert order == ["baseline", "variant", "variant", "baseline", "baseline", "variant"]
    assert [(r["round"], r["arm"]) for r in result.runs] == [
        (0, "baseline"), (0, "variant"), (1, "variant"), (1, "baseline"),
        (2, "baseline"), (2, "variant")]


def test_a_change_better_in_every_round_is_called_better_with_the_median_ratio():
    run, _ = fake_runs({"baseline": [100, 50, 100], "variant": [150, 80, 130]})
    decision = decide(run_experiment((BASE, VARIANT), 3, run))
    assert decision["outcome"] == "better"
    assert decision["ratios"] == [1.5, 1.6, 1.3]
    assert decision["ratio"] == pytest.approx(1.5)
    # a slow round (50 req/s) is compared within itself: the ratio ignores the machine's spell
    assert decision["arms"]["baseline"]["rps_median"] == 100
    assert "1.50× the requests per second" in decision["headline"]


def test_a_change_worse_in_every_round_is_called_worse():
    run, _ = fake_runs({"baseline": [100, 100], "variant": [60, 70]})
    assert decide(run_experiment((BASE, VARIANT), 2, run))["outcome"] == "worse"


def test_rounds_that_disagree_or_sit_inside_the_margin_are_no_clear_difference():
    run, _ = fake_runs({"baseline": [100, 100, 100], "variant": [130, 90, 120]})
    decision = decide(run_experiment((BASE, VARIANT), 3, run))
    assert decision["outcome"] == "no clear difference"
    run, _ = fake_runs({"baseline": [100, 100], "variant": [104, 103]})
    assert decide(run_experiment((BASE, VARIANT), 2, run))["outcome"] == "no clear difference"


def test_an_interrupted_experiment_decides_on_complete_rounds_only():
    result = ExperimentResult((BASE, VARIANT))
    result.runs = [{"round": 0, "arm": "baseline", "rps": 100.0},
                   {"round": 0, "arm": "variant", "rps": 200.0},
                   {"round": 1, "arm": "variant", "rps": 10.0}]  # its baseline never ran
    decision = decide(result)
    assert decision["ratios"] == [2.0]
    assert decide(ExperimentResult((BASE, VARIANT)))["outcome"] == "no result"


def test_assignments_are_name_equals_value():
    assert parse_assignments(["OMP_NUM_THREADS=1", "X_Y=a b=c"]) == (
        ("OMP_NUM_THREADS", "1"), ("X_Y", "a b=c"))
    for bad in ("NOVALUE", "=1", "1ABC=2", "A-B=1"):
        with pytest.raises(ValueError):
            parse_assignments([bad])


def _write_report(tmp_path, finding):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"findings": [finding] if finding else []}))
    return path


def test_the_advice_of_a_report_becomes_the_variant_when_it_is_an_environment_knob(tmp_path):
    path = _write_report(tmp_path, {"id": "scheduler_overhead", "predicted_gain": 2.5,
                                    "advice": ["Set OPENBLAS_NUM_THREADS=1"],
                                    "evidence": {"fix": {"knob": "OPENBLAS_NUM_THREADS",
                                                         "value": 1}}})
    env, info = fix_from_report(path)
    assert env == (("OPENBLAS_NUM_THREADS", "1"),)
    assert info["predicted_gain"] == 2.5 and info["finding"] == "scheduler_overhead"


def test_advice_that_is_no_environment_knob_is_refused_with_exit_6(tmp_path):
    path = _write_report(tmp_path, {"id": "stage_bound", "evidence": {
        "fix": {"knob": "stage_threads", "stage": "model_stage", "value": 2}}})
    with pytest.raises(BadProfile, match="stage_threads"):
        fix_from_report(path)
    with pytest.raises(BadProfile, match="no finding"):
        fix_from_report(_write_report(tmp_path, None))
    (tmp_path / "bad.json").write_text("not json")
    with pytest.raises(BadProfile) as err:
        fix_from_report(tmp_path / "bad.json")
    assert err.value.exit_code == 6


def test_the_page_shows_the_outcome_each_run_and_the_prediction_beside_the_measurement():
    run, _ = fake_runs({"baseline": [100, 100], "variant": [300, 280]})
    result = run_experiment((BASE, VARIANT), 2, run)
    settings = RunSettings("http://127.0.0.1:1/<b>", 8, 5, 1, 2)
    report = experiment_report(result, settings, {"tool": "wrk"},
                               {"finding": "scheduler_overhead", "predicted_gain": 2.5,
                                "advice": "Set OPENBLAS_NUM_THREADS=1"})
    html = render_experiment_html(json.loads(json.dumps(report)))
    assert re.search(r'id="outcome">better</span>', html)
    assert "predicted gain 2.50×, measured 2.90×" in html
    assert len(re.findall(r"<tr><td>\d</td>", html)) == 4
    assert "<b>" not in html.split('id="experiment-data"')[0]
    assert "OPENBLAS_NUM_THREADS=1" in html
