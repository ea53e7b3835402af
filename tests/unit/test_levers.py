"""A finding states each lever its advice pulls (checks/base.Lever): the bound if the work the first
advice removes cost nothing, beside the gain from more cores; the ranking's predicted gain is
unchanged."""

from __future__ import annotations

import json

import pytest

from diagnose.checks.base import Finding, Lever, LeverKind, amdahl, core_room
from diagnose.checks.engine import run_checks
from diagnose.classify.categories import Categorizer
from diagnose.collect.procfs import TreeRecord
from diagnose.model.analysis import analyze_profile
from diagnose.readers.loaders import load_profile
from diagnose.report.model.codec import encode
from tests.conftest import RECORDED


def analyse(profile: str, procfs: str, native: str | None = None):
    proc = TreeRecord.from_dict(json.loads((RECORDED / procfs).read_text())).root_record
    analysis = analyze_profile(load_profile(RECORDED / profile), Categorizer(), proc,
                               native_profile=load_profile(RECORDED / native) if native else None)
    results = run_checks(analysis)
    return analysis, results, {f.id: f for f in results.findings}


@pytest.fixture(scope="module")
def preprocess():
    return analyse("preprocess_bound.speedscope.json", "preprocess_bound.procfs.json",
                   "preprocess_bound.native.speedscope.json")


@pytest.fixture(scope="module")
def locked():
    """Request threads queue on a lock; native samples calibrate their states."""
    return analyse("lock_contention.speedscope.json", "lock_contention.procfs.json",
                   "lock_contention.native.speedscope.json")


@pytest.fixture(scope="module")
def pure_python():
    """Threads busy in pure Python (the GIL contended, cpu_bound at info strength)."""
    return analyse("late_thread.chrometrace.json", "late_thread.procfs.json")


def kinds(finding: Finding) -> list[str]:
    return [lever.kind for lever in finding.levers]


def test_preprocessing_ranks_by_its_realistic_levers_and_states_free_work_as_a_bound(preprocess):
    analysis, results, found = preprocess
    finding = found["preprocess_bound"]
    assert results.verdict.primary == "preprocess_bound"
    share = finding.evidence["preprocess_share_of_busy"]
    half, free, cores = finding.levers
    assert kinds(finding) == [LeverKind.REMOVE_WORK, LeverKind.REMOVE_WORK, LeverKind.MORE_CORES]
    # halving its cost: the calibrated figure, said so with the fixes it was fitted on, and
    # that no workload it was not fitted on has checked it yet
    assert half.label == "if preprocessing cost half" and half.upper_bound is False
    assert half.gain == round(1 / (1 - share / 2), 2)
    assert half.basis.startswith("calibrated:") and "calibrated on 2 fixes" in half.basis
    assert "not yet checked on a workload it was not fitted on" in half.basis
    # free preprocessing: the Amdahl bound, never the ranked figure
    assert free.label == "if preprocessing cost nothing" and free.upper_bound is True
    assert free.gain == round(amdahl(share), 2) > finding.predicted_gain
    assert "upper bound" in free.basis
    # the idle cores (preprocessing as a stage of its own), no more than free work would buy
    assert cores.gain == round(min(core_room(analysis), amdahl(share)), 2) > 1.0
    assert cores.upper_bound is False and "usable cores" in cores.basis
    # ranked by the better of the two realistic levers
    assert finding.predicted_gain == max(half.gain, cores.gain)
    assert "upper bound" in finding.gain_basis


def test_gil_levers_name_the_holder_and_rank_the_better_of_vectorising_and_the_cores(locked):
    _, _, found = locked
    gil = found["gil_contention"]
    vectorised, free, cores = gil.levers
    assert kinds(gil) == [LeverKind.REMOVE_WORK, LeverKind.REMOVE_WORK, LeverKind.MORE_CORES]
    holder = gil.sites[0].function
    # the first advice's calibrated figure: the holder's GIL-bound time made SPEEDUP times cheaper
    assert vectorised.label == f"if {holder} were vectorised" and not vectorised.upper_bound
    assert vectorised.basis.startswith("calibrated:") and "20x cheaper" in vectorised.basis
    assert 1.0 < vectorised.gain <= free.gain
    assert free.label == f"if {holder} cost nothing" and free.upper_bound
    assert gil.predicted_gain == max(vectorised.gain, cores.gain)
    ranked = vectorised if vectorised.gain > cores.gain else cores
    assert gil.gain_basis == ranked.basis
    assert (gil.gain_floor is None) == (ranked is vectorised)  # the waits' figure is a floor


def test_without_native_frames_the_gil_keeps_the_waits_figure_as_a_floor(pure_python):
    # a numpy call under the holder would read as its bytecode: no vectorised figure
    _, _, found = pure_python
    gil = found["gil_contention"]
    assert [lever.label.endswith("were vectorised") for lever in gil.levers] == [False, False]
    assert gil.gain_floor is not None and gil.predicted_gain == gil.levers[-1].gain


def test_a_gil_holder_under_the_hot_loop_line_keeps_the_waits_figure_as_a_floor(preprocess):
    # the preprocess_bound profile: the holder's own bytecode is a few percent of the busy time
    _, _, found = preprocess
    gil = found["gil_contention"]
    assert kinds(gil) == [LeverKind.REMOVE_WORK, LeverKind.MORE_CORES]
    free, cores = gil.levers
    assert free.upper_bound and cores.gain == gil.predicted_gain and gil.gain_floor is not None


def test_cpu_bound_states_the_hottest_function_made_free_beside_more_cores(pure_python):
    _, _, found = pure_python
    cpu = found["cpu_bound"]
    hottest = cpu.sites[0]
    free, cores = cpu.levers
    assert free.kind == LeverKind.REMOVE_WORK and free.label == f"if {hottest.function} cost nothing"
    assert free.gain == round(amdahl(hottest.share), 2) > cpu.predicted_gain
    assert f"{100 * hottest.share:.0f}% of the threads' busy time by self time" in free.basis
    assert cores.kind == LeverKind.MORE_CORES and cores.gain == cpu.predicted_gain
    assert cores.basis == cpu.gain_basis


def test_levers_serialise_as_a_list_of_plain_dicts(preprocess):
    _, _, found = preprocess
    levers = encode(found["preprocess_bound"].levers)  # as the report writes them
    assert json.loads(json.dumps(levers)) == [
        {"kind": str(lever.kind), "gain": lever.gain, "label": lever.label, "basis": lever.basis,
         "upper_bound": lever.upper_bound} for lever in found["preprocess_bound"].levers]
    bare = Finding("x", "t", 0, "ok", "", {})
    assert bare.levers == () and encode(bare.levers) == []


def test_a_lever_rounds_its_gain():
    lever = Lever(LeverKind.MORE_CORES, 1.23456, "from more cores", "estimate: b")
    assert lever.to_dict() == {"kind": "more_cores", "gain": 1.23, "label": "from more cores",
                               "basis": "estimate: b", "upper_bound": False}


def test_preprocessing_says_it_alone_limits_only_while_it_outweighs_the_model(preprocess):
    from diagnose.checks import preprocess_bound
    _, _, found = preprocess
    finding = found["preprocess_bound"]
    assert finding.evidence["preprocess_share_of_busy"] > finding.evidence["model_share_of_busy"]
    assert finding.advice[0] == preprocess_bound.Settings().advice[0]  # "a faster model will not help"
    # forked_workers on 3.11: preprocessing 31% of the busy time, the model 71%
    advice = preprocess_bound._advice(preprocess_bound.Settings(), 0.31, 0.71, 1.19, "normalize")
    assert advice[0] == ("Make preprocessing cheaper (most in normalize): it is 31% of the request "
                         "threads' busy time, and halving it buys 1.19x; it is not the only limit: "
                         "the model takes 71%, so a cheaper model pays too.")
    assert "will not help" not in advice[0] and advice[1:] == list(preprocess_bound.Settings().advice[1:])


def test_the_models_share_of_calibrated_states_is_known_only_as_well_as_the_native_samples_know_it(locked):
    # forked_workers on 3.11: whether the model's samples ran or waited for the GIL came from a
    # few native samples a second; the model's share read 22-56% across attaches of one
    # service, each time with an interval a few points wide, and whether compute_bound shared
    # the verdict moved with it.
    analysis, _, found = locked
    assert analysis.profile.calibrated
    finding = found["compute_bound"]
    interval = finding.intervals["model_share_of_busy"]
    running = finding.evidence["running_samples"]
    assert interval.calibrated_of == running and interval.samples < running / 4, interval
    low, high = finding.score_range
    assert high - low >= 30, finding.score_range  # [0, 8] on the running samples' count
