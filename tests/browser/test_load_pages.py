"""The sweep and experiment pages in a real browser: they draw without script, break no CSP
rule, ask for nothing outside the file, and keep hostile text inert. The reports are built by
the production code from synthetic runs (tests/unit/test_sweep.py's service model)."""

from __future__ import annotations

import json

import pytest

from diagnose.report.step_diagnosis import StepDiagnosis
from diagnose.load.experiment_decision import Arm, RunSettings, experiment_report, run_experiment
from diagnose.report.load_report import ExperimentReport, GeneratorInfo, Run, SweepReport, SweepTarget
from diagnose.render.experiment_html import render_experiment_html
from diagnose.render.sweep_html import render_sweep_html
from diagnose.load.sweep_steps import run_sweep, sweep_report
from tests.browser.conftest import requires_browser
from tests.unit.test_sweep import SETTINGS, closed_loop_service

pytestmark = [requires_browser]

HOSTILE = "</script><img src=x onerror=alert(1)>"


def sweep_page(tmp_path):
    measure, _ = closed_loop_service(capacity_rps=400, service_ms=10)

    def diagnose(step):  # the verdict under each step's load, with a hostile headline
        step.diagnosis = StepDiagnosis(seconds=1.0, concurrency=int(step.level), primary="pool_wait",
                                       headline=HOSTILE, severity="critical",
                                       html_name=f"d{int(step.level)}.html")

    report = sweep_report(run_sweep(SETTINGS, measure, after_step=diagnose),
                          SweepTarget(url=f"http://127.0.0.1:1/{HOSTILE}", pids=(7,)),
                          GeneratorInfo(tool="wrk", threads=2))
    path = tmp_path / "sweep.html"
    written = json.loads(json.dumps(report.to_json()))
    path.write_text(render_sweep_html(SweepReport.from_json(written)), encoding="utf-8")
    return path


def test_the_sweep_page_draws_its_curves_without_script(open_report, tmp_path):
    opened = open_report(sweep_page(tmp_path), wait_ready=False)
    page = opened.page
    opened.assert_clean()
    assert page.evaluate("document.scripts.length") == 1  # the JSON data block only
    assert page.locator("img").count() == 0
    assert page.locator("svg.chart").count() == 2
    assert page.locator("svg.chart polyline").count() == 4
    box = page.locator("svg.chart").first.bounding_box()
    assert box["width"] > 300 and box["height"] > 150
    assert page.locator("tr.knee td").first.inner_text() == "4"
    knee_verdict = page.locator("#verdicts tr.knee")
    assert HOSTILE in knee_verdict.inner_text()
    assert knee_verdict.locator("td.verdict a").get_attribute("href") == "d4.html"


def test_the_experiment_page_shows_the_outcome_and_every_run(open_report, tmp_path):
    rates = {"baseline": iter([100.0, 110.0]), "variant": iter([170.0, 180.0])}
    result = run_experiment((Arm("baseline", ("serve", HOSTILE)),
                             Arm("variant", ("serve",), (("OMP_NUM_THREADS", "1"),))), 2,
                            lambda arm: Run(rps=next(rates[arm.name]), p99_ms=5.0))
    report = experiment_report(result, RunSettings("http://127.0.0.1:1/", 8, 3, 1, 2),
                               GeneratorInfo(tool="wrk"))
    path = tmp_path / "experiment.html"
    written = json.loads(json.dumps(report.to_json()))
    path.write_text(render_experiment_html(ExperimentReport.from_json(written)),
                    encoding="utf-8")
    opened = open_report(path, wait_ready=False)
    opened.assert_clean()
    page = opened.page
    assert page.locator("#outcome").inner_text() == "better"
    assert page.locator("#runs tbody tr").count() == 4
    assert page.locator("img").count() == 0
    assert HOSTILE in page.locator("#verdict").inner_text()


@pytest.mark.parametrize("width", [420])
def test_the_sweep_page_fits_a_narrow_window(open_report, tmp_path, width):
    opened = open_report(sweep_page(tmp_path), viewport={"width": width, "height": 900},
                         wait_ready=False)
    # the charts wrap under each other instead of widening the page beyond its charts
    assert opened.page.evaluate("document.documentElement.scrollWidth") <= 560
