"""The verdict under one load level, as the sweep and experiment reports carry it: the level
and window, then the error or the verdict and its report."""

from __future__ import annotations

from diagnose.report.step_diagnosis import StepDiagnosis, StepVerdict
from diagnose.load.experiment_run import _without_paths


def test_a_failed_diagnosis_carries_its_level_window_and_error_only():
    failed = StepDiagnosis(seconds=5.0, rate=12.5, error="the load generator failed: boom")
    assert failed.to_json() == {"rate": 12.5, "seconds": 5.0,
                                "error": "the load generator failed: boom"}
    assert failed.verdict is None


def test_a_diagnosis_carries_its_verdict_and_the_experiment_names_its_reports_not_paths():
    done = StepDiagnosis(seconds=5.0, concurrency=8, primary="pool_wait", headline="h",
                         severity="critical", html="/tmp/x/r.html", json="/tmp/x/r.json",
                         html_name="r.html", rps_while_sampled=99.5, partial=False)
    data = done.to_json()
    assert list(data) == ["concurrency", "seconds", "primary", "headline", "severity", "html",
                          "html_name", "json", "rps_while_sampled", "partial"]
    assert done.verdict == StepVerdict(primary="pool_wait", headline="h", severity="critical")
    kept = _without_paths(done).to_json()
    assert "html" not in kept and "json" not in kept
    assert kept["json_name"] == "r.json" and kept["html_name"] == "r.html"
