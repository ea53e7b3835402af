"""The checks, run offline on profiles recorded from the fixture workloads, give their verdicts.

The recordings (fixtures/recorded/, re-made by `python fixtures/record.py`) hold py-spy's
speedscope file and the /proc record of the same window.
"""

from __future__ import annotations

import pytest

from diagnose.checks.engine import run_checks
from diagnose.classify.categories import Categorizer
from diagnose.collect.procfs import TreeRecord
from diagnose.model.analysis import analyze_profile
from diagnose.readers.loaders import load_profile
from tests.conftest import RECORDED, WORKLOADS, marker_line

import json

# The recordings of diagnose's own attach (NAME.speedscope.json); not py-spy-only recordings such
# as locked_blas.noidle.speedscope.json (tests/unit/test_visibility.py).
NAMES = sorted({p.name.split(".")[0] for p in RECORDED.glob("*.speedscope.json")
                if (RECORDED / f"{p.name.split('.')[0]}.speedscope.json").exists()})


def analyse_recording(name: str, with_os: bool = True, calibrated: bool = True):
    profile = load_profile(RECORDED / f"{name}.speedscope.json")
    proc = None
    if with_os:
        # one process's record, or (recorded since process trees) a tree of one process
        proc = TreeRecord.from_dict(json.loads((RECORDED / f"{name}.procfs.json").read_text())).root_record
    native_path = RECORDED / f"{name}.native.speedscope.json"
    native = load_profile(native_path) if calibrated and native_path.exists() else None
    analysis = analyze_profile(profile, Categorizer(), proc, native_profile=native)
    return analysis, run_checks(analysis)


def finding(results, check_id):
    return next(f for f in results.findings if f.id == check_id)


def test_every_finding_id_has_a_recording():
    assert {"preprocess_bound", "lock_contention", "scheduler_overhead", "compute_bound",
            "underloaded"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_recording_is_diagnosed_as_the_workload_it_came_from(name):
    _, results = analyse_recording(name)
    assert results.verdict.primary == name
    found = finding(results, name)
    if name == "underloaded":
        # sure that the workers wait for work, and no fault of the process's: info at most
        assert found.score >= 75 and found.severity == "info"
    else:
        assert found.severity in ("warning", "critical")


def test_lock_recording_names_the_with_lock_line():
    _, results = analyse_recording("lock_contention")
    top = finding(results, "lock_contention").sites[0]
    assert top.file.endswith("lock_contention.py")
    assert top.line == marker_line(WORKLOADS / "lock_contention.py", "contended-acquire")


def test_idle_pool_workers_are_idle_not_waiting_on_a_lock():
    analysis, results = analyse_recording("underloaded")
    workers = analysis.threads[analysis.threads.loc[:, "name"].str.startswith("handler_")]
    assert len(workers) == 8
    assert (workers.loc[:, "idle"] > 0.9 * workers.loc[:, "samples"]).all()
    assert (workers.loc[:, "lock"] == 0).all()
    # no lock to judge: the check is skipped because no request thread handled work
    assert "lock_contention" not in {f.id for f in results.findings}
    skipped = {n.id: n.reason for n in results.not_applicable}
    assert skipped["lock_contention"] == "no request threads were seen handling work"


def test_without_os_counters_scheduler_overhead_is_not_applicable():
    _, results = analyse_recording("lock_contention", with_os=False)
    skipped = {n.id: n.reason for n in results.not_applicable}
    assert "scheduler_overhead" in skipped and "schedstat" in skipped["scheduler_overhead"]
    assert results.verdict.primary == "lock_contention"


def test_findings_are_ranked_by_score_and_severity_follows_score():
    _, results = analyse_recording("preprocess_bound")
    scores = [f.score for f in results.findings]
    assert scores == sorted(scores, reverse=True)
    for f in results.findings:
        expected = ("critical" if f.score >= 75 else "warning" if f.score >= 50
                    else "info" if f.score >= 25 else "ok")
        assert f.severity == expected


def test_recordings_use_the_default_plan_with_native_calibration():
    for name in NAMES:
        analysis, _ = analyse_recording(name)
        assert not analysis.profile.native, name  # Python-only main profile (non-blocking)
        assert analysis.profile.calibrated, name


def test_calibration_turns_python_only_lock_waits_into_measured_states():
    calibrated, results = analyse_recording("lock_contention")
    estimated, _ = analyse_recording("lock_contention", calibrated=False)
    # the few Python stacks the sparse native samples never saw keep the frame-only estimate
    assert calibrated.samples.loc[:, "estimated"].mean() < 0.05
    assert estimated.samples.loc[:, "estimated"].all()
    # native samples separate GIL waits from lock waits; frames alone cannot see the GIL
    assert (calibrated.samples.loc[:, "state"] == "gil").any()
    assert not (estimated.samples.loc[:, "state"] == "gil").any()
    assert results.verdict.primary == "lock_contention"


def test_the_engine_says_which_declared_input_is_missing():
    """Without /proc, the checks that need its counters are not applicable, in their words."""
    _, results = analyse_recording("lock_contention", with_os=False, calibrated=False)
    reasons = {n.id: n.reason for n in results.not_applicable}
    assert reasons["scheduler_overhead"] == "needs per-thread OS counters (schedstat), only taken by `attach`"
    assert reasons["unbounded_backlog"] == "needs resident-memory samples over the window (`attach`)"
    assert reasons["event_loop_blocked"] == "no event-loop thread was seen"
    assert reasons["stage_bound"] == "no pipeline of stages joined by queues was seen"
