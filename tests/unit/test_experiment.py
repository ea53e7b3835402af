"""`diagnose experiment`'s variants, alternation and decisions on runs given by hand; the knobs
read from a report's advice; the JSON contract; the page. The runs that start real services are
in tests/integration/test_experiment_vary.py."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from diagnose.errors import BadProfile, LoadFailed
from diagnose.report.step_diagnosis import StepDiagnosis, StepVerdict
from diagnose.load.experiment_run import _cores_used
from diagnose.load.experiment_decision import (MAX_VARIANTS, Arm, ExperimentResult, RunSettings, advised_arm,
                                 arms_from_vary, choose_winner, decide, experiment_report,
                                 fix_from_report, parse_assignments, parse_vary, round_order,
                                 run_experiment, throughput_at_slo, vary_from_advice)
from diagnose.report.load_report import (EXPERIMENT_SCHEMA_VERSION, Advice, ExperimentReport,
                                 GeneratorInfo, Machine, Percentiles, Run, SummaryKnee, SweepKnee,
                                 SweepReport, SweepStep, SweepSummary, SweepTarget)
from diagnose.load.sweep_steps import CpuReading
from diagnose.render.experiment_html import render_experiment_html
from tests.conftest import invoke_cli

CMD = ("serve", "--port", "1")
BAD, GOOD, MID = (Arm(f"T={v}", CMD, (("T", v),)) for v in ("1", "8", "4"))
BASE = Arm("baseline", ("serve",))
VARIANT = Arm("variant", ("serve",), (("OPENBLAS_NUM_THREADS", "1"),))


def fake_runs(rates: dict[str, list], fail: dict[str, str] | None = None):
    """A run function serving the given rates per arm, one per call, in order; an arm in
    `fail` raises LoadFailed (its service died) instead."""
    seen = {name: 0 for name in rates}
    order = []

    def run(arm: Arm) -> Run:
        order.append(arm.name)
        if fail and arm.name in fail:
            raise LoadFailed(fail[arm.name])
        rate = rates[arm.name][seen[arm.name]]
        seen[arm.name] += 1
        return Run(rps=rate, p50_ms=500 / rate, p99_ms=1000 / rate, service_cores=1.0,
                   generator_cores=0.2, errors=0,
                   diagnosis=StepDiagnosis(seconds=1.0, primary="pool_wait",
                                           headline=f"{arm.name} waits",
                                           html_name=f"diagnose-{seen[arm.name]}.html"))
    return run, order


# -- variants -------------------------------------------------------------------------------------

def test_vary_values_split_on_commas_and_unset_removes_the_variable():
    assert parse_vary(["OMP_NUM_THREADS=1,8", "MODE=unset,a b"]) == (
        ("OMP_NUM_THREADS", ("1", "8")), ("MODE", (None, "a b")))
    for bad in ("NOVALUES", "X=", "1X=1,2", "A-B=1,2", "A=1,1"):
        with pytest.raises(ValueError):
            parse_vary([bad])
    with pytest.raises(ValueError, match="twice"):
        parse_vary(["A=1,2", "A=3,4"])


def test_variants_are_every_combination_with_the_first_values_as_baseline():
    arms = arms_from_vary(CMD, parse_vary(["A=1,2", "B=x,y,unset"]))
    assert [a.name for a in arms] == ["A=1 B=x", "A=1 B=y", "A=1 B=unset",
                                      "A=2 B=x", "A=2 B=y", "A=2 B=unset"]
    assert arms[0].env == (("A", "1"), ("B", "x"))
    assert arms[2].describe().env == {"A": "1", "B": None}
    assert all(a.argv == CMD for a in arms)


def test_more_combinations_than_the_bound_or_a_single_one_are_refused():
    assert len(arms_from_vary(CMD, parse_vary(["A=1,2,3,4", "B=1,2,3,4"]))) == MAX_VARIANTS
    with pytest.raises(ValueError, match="17 combinations"):
        arms_from_vary(CMD, parse_vary(["A=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"]))
    with pytest.raises(ValueError, match="nothing to compare"):
        arms_from_vary(CMD, parse_vary(["A=1"]))


def test_assignments_are_name_equals_value():
    assert parse_assignments(["OMP_NUM_THREADS=1", "X_Y=a b=c"]) == (
        ("OMP_NUM_THREADS", "1"), ("X_Y", "a b=c"))
    for bad in ("NOVALUE", "=1", "1ABC=2", "A-B=1"):
        with pytest.raises(ValueError):
            parse_assignments([bad])


# -- rounds and decisions -------------------------------------------------------------------------

def test_rounds_rotate_which_variant_goes_first():
    assert [round_order(r) for r in range(4)] == [[0, 1], [1, 0], [0, 1], [1, 0]]
    assert [round_order(r, 3) for r in range(3)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    run, order = fake_runs({"T=1": [50] * 3, "T=8": [300] * 3, "T=4": [200] * 3})
    run_experiment((BAD, GOOD, MID), 3, run)
    assert order == ["T=1", "T=8", "T=4", "T=8", "T=4", "T=1", "T=4", "T=1", "T=8"]


def test_the_variant_ahead_in_every_round_wins_with_the_median_same_round_gain():
    # round 2 is a slow spell for everyone: the ratio within it still counts
    run, _ = fake_runs({"T=1": [50, 20, 50], "T=8": [300, 150, 250], "T=4": [200, 90, 200]})
    choice = choose_winner(run_experiment((BAD, GOOD, MID), 3, run), "at 8 connections")
    assert choice.outcome == "winner"
    assert choice.winner.env == {"T": "8"}
    assert choice.winner.ratios == (6.0, 7.5, 5.0)
    assert choice.winner.gain == pytest.approx(6.0)
    assert "T=8 serves 6.00× the baseline (T=1)" in choice.headline


def test_a_leader_that_some_round_does_not_confirm_is_no_clear_winner():
    run, _ = fake_runs({"T=1": [50, 50], "T=8": [300, 200], "T=4": [290, 210]})
    choice = choose_winner(run_experiment((BAD, GOOD, MID), 2, run))
    assert choice.outcome == "no clear winner" and choice.winner is None
    assert choice.leader.env in ({"T": "8"}, {"T": "4"})
    assert choice.headline.startswith("no clear winner")
    # within the margin is no win either
    run, _ = fake_runs({"T=1": [100, 100], "T=8": [104, 103]})
    assert choose_winner(run_experiment((BAD, GOOD), 2, run)).winner is None


def test_a_baseline_that_serves_the_most_is_the_winner_with_gain_one():
    run, _ = fake_runs({"T=1": [300, 310], "T=8": [100, 90]})
    choice = choose_winner(run_experiment((BAD, GOOD), 2, run))
    assert choice.winner.env == {"T": "1"} and choice.winner.gain == 1.0
    assert choice.headline.startswith("the baseline serves the most")


def test_a_variant_whose_service_fails_is_not_rerun_and_gets_an_error_and_no_report():
    run, order = fake_runs({"T=1": [50, 50], "T=8": [300, 300], "T=4": []},
                           fail={"T=4": "the service exited with 3 while it was loaded"})
    result = run_experiment((BAD, GOOD, MID), 2, run)
    assert order.count("T=4") == 1  # round 2 skips it
    report = experiment_report(result, RunSettings("http://127.0.0.1:1/", 8, 2, 1, 2),
                               GeneratorInfo())
    failed = report.variant("T=4")
    assert failed.status == "failed" and failed.report is None
    assert failed.verdict is None and failed.throughput_rps is None
    assert "exited with 3" in failed.error
    assert report.variant("T=8").report == "diagnose-1.html"
    assert report.variant("T=8").verdict == StepVerdict(primary="pool_wait",
                                                        headline="T=8 waits")
    assert choose_winner(result).winner.env == {"T": "8"}


def test_with_the_baseline_failed_there_is_no_result():
    run, _ = fake_runs({"T=1": [], "T=8": [300]}, fail={"T=1": "did not answer"})
    choice = choose_winner(run_experiment((BAD, GOOD), 1, run))
    assert choice.outcome == "no result" and choice.winner is None


def test_the_pairwise_decision_compares_one_variant_with_the_baseline():
    run, _ = fake_runs({"baseline": [100, 50, 100], "variant": [150, 80, 130]})
    decision = decide(run_experiment((BASE, VARIANT), 3, run))
    assert decision.outcome == "better" and decision.ratios == (1.5, 1.6, 1.3)
    run, _ = fake_runs({"baseline": [100, 100], "variant": [60, 70]})
    assert decide(run_experiment((BASE, VARIANT), 2, run)).outcome == "worse"
    run, _ = fake_runs({"baseline": [100, 100, 100], "variant": [130, 90, 120]})
    assert decide(run_experiment((BASE, VARIANT), 3, run)).outcome == "no clear difference"


def test_an_interrupted_experiment_decides_on_complete_rounds_only():
    result = ExperimentResult((BASE, VARIANT))
    result.runs = [Run(round=0, arm="baseline", rps=100.0), Run(round=0, arm="variant", rps=200.0),
                   Run(round=1, arm="variant", rps=10.0)]  # its baseline never ran
    assert decide(result).ratios == (2.0,)
    assert choose_winner(result).winner.ratios == (2.0,)
    assert decide(ExperimentResult((BASE, VARIANT))).outcome == "no result"


def test_a_round_another_tenant_shared_is_named_in_the_decision():
    result = ExperimentResult((BASE, VARIANT))
    result.runs = [Run(round=0, arm="baseline", rps=100.0, other_cores=0.02),
                   Run(round=0, arm="variant", rps=101.0, other_cores=0.91)]
    decision = decide(result)
    assert decision.outcome == "no clear difference" and decision.shared_cores == 0.91
    assert "the machine was shared: other processes used up to 0.91 cores" in decision.headline
    result.runs = [replace(r, other_cores=0.1) for r in result.runs]
    quiet = decide(result)
    assert quiet.shared_cores is None and "shared" not in quiet.headline


def test_the_cores_of_a_run_are_the_machines_busy_time_less_the_service_and_the_generator():
    before = CpuReading(at=10.0, service_cpu_s=5.0, machine_idle_s=100.0)
    after = CpuReading(at=12.0, service_cpu_s=7.0, machine_idle_s=100.4)  # 0.2 cores idle of 2
    assert _cores_used(before, after, 2, generator_cores=0.3) == (1.0, 0.5)
    assert _cores_used(before, after, 2, generator_cores=None) == (1.0, None)


def _sweep_of(steps, knee=None, summary_knee=None) -> SweepReport:
    return SweepReport(
        target=SweepTarget(url="u"), machine=Machine(cores=2),
        steps=tuple(SweepStep(concurrency=c, throughput_rps=rps,
                              latency_ms=Percentiles(p99=p99), stable=stable)
                    for c, rps, p99, stable in steps),
        knee=SweepKnee(index=knee) if knee is not None else None,
        summary=SweepSummary(limited_by="service", headline="",
                             knee=SummaryKnee(index=summary_knee) if summary_knee is not None
                             else None))


def test_a_sweep_is_judged_at_the_best_step_within_the_slo_else_at_its_knee():
    steps = [(1, 50, 25, True), (4, 180, 40, True), (8, 200, 90, True), (16, 190, 45, False)]
    assert throughput_at_slo(_sweep_of(steps), 50).concurrency == 4   # 16 is not stable
    assert throughput_at_slo(_sweep_of(steps), 10) is None
    assert throughput_at_slo(_sweep_of(steps, knee=2), None).concurrency == 8
    assert throughput_at_slo(_sweep_of(steps, summary_knee=1), None).concurrency == 4
    assert throughput_at_slo(_sweep_of(steps), None).concurrency == 8  # no knee: the best


# -- advice from a report -------------------------------------------------------------------------

def _write_report(tmp_path, finding):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"findings": [finding] if finding else []}))
    return path


def test_a_report_advising_an_environment_knob_varies_it_from_as_inherited_to_advised(tmp_path):
    path = _write_report(tmp_path, {"id": "scheduler_overhead", "predicted_gain": 2.5,
                                    "advice": ["Set OPENBLAS_NUM_THREADS=1"],
                                    "evidence": {"fix": {"knob": "OPENBLAS_NUM_THREADS",
                                                         "value": 1}}})
    advised, info = fix_from_report(path)
    assert advised == (("OPENBLAS_NUM_THREADS", "1"),)
    assert info.predicted_gain == 2.5 and info.finding == "scheduler_overhead"
    assert vary_from_advice(advised, {"OPENBLAS_NUM_THREADS": "8"}) == (
        ("OPENBLAS_NUM_THREADS", ("8", "1")),)
    assert vary_from_advice(advised, {}) == (("OPENBLAS_NUM_THREADS", (None, "1")),)
    with pytest.raises(ValueError, match="already runs with OPENBLAS_NUM_THREADS=1"):
        vary_from_advice(advised, {"OPENBLAS_NUM_THREADS": "1"})


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


@pytest.mark.parametrize("advised_rates, status", [
    ([300, 280], "advice proven"), ([40, 45], "advice disproved"),
    ([130, 90], "advice not proven")])
def test_the_advised_variant_against_the_baseline_proves_or_disproves_the_advice(
        advised_rates, status):
    base, advised = Arm("T=unset", CMD, (("T", None),)), Arm("T=8", CMD, (("T", "8"),))
    run, _ = fake_runs({"T=unset": [100, 100], "T=8": advised_rates})
    result = run_experiment((base, advised), 2, run)
    assert advised_arm(result.arms, [("T", "8")]) == advised
    report = experiment_report(result, RunSettings("http://127.0.0.1:1/", 8, 2, 1, 2),
                               GeneratorInfo(), Advice(finding="pool_wait", predicted_gain=4.0),
                               None, [("T", "8")])
    assert report.advice.status == status
    # the median of two same-round ratios is their mean
    assert report.advice.measured_gain == pytest.approx(sum(advised_rates) / 100 / 2)
    assert report.advice.predicted_gain == 4.0


# -- the report and the page ----------------------------------------------------------------------

def test_the_json_report_follows_the_contract():
    run, _ = fake_runs({"T=1": [50, 60], "T=8": [300, 320]})
    written = json.loads(json.dumps(experiment_report(
        run_experiment((BAD, GOOD), 2, run), RunSettings("http://127.0.0.1:1/", 8, 2, 1, 2),
        GeneratorInfo(tool="wrk")).to_json()))
    # the contract's keys, as written
    assert list(written.items())[:2] == [("schema_version", EXPERIMENT_SCHEMA_VERSION),
                                         ("kind", "experiment")]
    assert {"baseline", "winner", "variants"} <= set(written)
    for v in written["variants"]:
        assert {"env", "throughput_rps", "latency_ms", "errors", "verdict", "report"} <= set(v)
        assert set(v["latency_ms"]) >= {"p50", "p99"}
        assert set(v["verdict"]) >= {"primary", "headline"}
    # and its values, read back
    report = ExperimentReport.from_json(written)
    assert (report.baseline.env, report.baseline.name) == ({"T": "1"}, "T=1")
    assert report.winner is not None and report.winner.env == {"T": "8"}
    assert report.winner.gain == pytest.approx((6.0 + 320 / 60) / 2, abs=1e-4)
    assert report.variants[1].throughput_rps == 310
    assert report.variants[1].latency_ms.p99 == pytest.approx(
        (1000 / 300 + 1000 / 320) / 2, abs=1e-4)


HOSTILE = "</script><img src=x onerror=alert(1)>"


def _reread(report: ExperimentReport) -> ExperimentReport:
    """The report as a later command reads it back from its .json."""
    return ExperimentReport.from_json(json.loads(json.dumps(report.to_json())))


def test_the_page_shows_the_variants_side_by_side_and_escapes_hostile_values():
    arms = (Arm("X=a", ("serve", HOSTILE), (("X", "a"),)),
            Arm(f"X={HOSTILE}", ("serve", HOSTILE), (("X", HOSTILE),)))
    rates = {"X=a": iter([100.0, 110.0]), f"X={HOSTILE}": iter([170.0, 180.0])}
    result = run_experiment(arms, 2, lambda arm: Run(
        rps=next(rates[arm.name]), p99_ms=5.0,
        diagnosis=StepDiagnosis(seconds=1.0, primary="none", headline=HOSTILE,
                                html_name="javascript:alert(1).html")))
    report = experiment_report(result, RunSettings("http://127.0.0.1:1/", 8, 3, 1, 2),
                               GeneratorInfo(tool=HOSTILE),
                               Advice(finding="pool_wait", predicted_gain=2.5, advice=HOSTILE))
    html = render_experiment_html(_reread(report))
    page = html.split('id="experiment-data"')[0]
    assert "<img" not in page and "</script><" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<a href" not in page  # a report name that is not ours is not linked
    assert len(re.findall(r'<rect class="dot"', page)) == 2
    assert re.search(r'id="winner">winner</span>', page)
    assert 'http-equiv="Content-Security-Policy"' in page
    assert "<script src" not in html and "<link rel=\"stylesheet" not in html


def test_the_page_links_each_verdict_to_its_report_and_marks_a_failed_variant():
    run, _ = fake_runs({"T=1": [50], "T=8": [300], "T=4": []}, fail={"T=4": "exited with 3"})
    report = experiment_report(run_experiment((BAD, GOOD, MID), 1, run),
                               RunSettings("http://127.0.0.1:1/", 8, 2, 1, 1), GeneratorInfo())
    html = render_experiment_html(_reread(report))
    assert html.count('href="diagnose-1.html"') == 2
    assert "exited with 3" in html and ">failed</text>" in html


# -- the command line -----------------------------------------------------------------------------

def test_the_command_refuses_bad_variants_before_starting_anything(out_dir):
    url = "http://127.0.0.1:1/"
    cases = [
        (["--vary", "A=" + ",".join(map(str, range(17))), "--", "true"], "at most 16"),
        (["--vary", "A=1,2"], "command is missing"),
        (["--vary", "A=1,2", "--rouds", "2", "true"], "no such option: --rouds"),
        (["--vary", "A=1,2", "--at-load", "2", "--at-rate", "5", "--", "true"], "not both"),
        (["--vary", "A=1,2", "--set", "B=1", "--", "true"], "not both"),
        (["--vary", "A-B=1,2", "--", "true"], "environment variable name"),
    ]
    for args, message in cases:
        proc, _ = invoke_cli("experiment", url, *args, "-o", out_dir, timeout=30)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not out_dir.exists()
