"""The bottleneck by structure: stages and who waits for whom, on real workloads."""

from __future__ import annotations

import pytest

from diagnose.report.model import Report
from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.typed import evidence, finding, outcome, run_report

# Beside another test under scripts/test.sh, but for the batcher: the stage's predicted gain is
# capped by the free cores it measured, and the test reads that cap.
pytestmark = [pytest.mark.integration, requires_ptrace]


def diagnose(name: str, out_dir, *args: str, seconds: str = "6") -> Report:
    with running(workload_command(name, "--seconds", "120", *args)) as pid:
        proc, report = run_report("attach", pid, "--duration", seconds, "--json", "--output-dir", out_dir)
    assert proc.returncode == 0 and report is not None, proc.stderr
    return report


def test_pipeline_with_one_slow_model_stage_is_stage_bound_naming_that_stage(out_dir):
    report = diagnose("pipeline", out_dir)
    assert report.verdict.primary == "stage_bound", report.verdict
    stage = finding(report, "stage_bound")
    assert stage.sites[0].function == "model_stage"
    assert evidence(stage, "proposed_threads")["model_stage"] >= 2
    assert "utilization law" in stage.gain_basis
    room = evidence(stage, "core_room", None)
    if room is not None and room < 1.2:
        # Other load on the machine left next to no core free in this window: the prediction
        # is capped by the measured free cores, and says so.
        assert stage.predicted_gain <= room + 0.01 and "free cores" in stage.gain_basis, stage
    else:
        assert stage.predicted_gain > 1.2, stage
    structure = report.structure[0]
    assert structure.bottleneck == "model_stage"
    kinds = {(e.waiter, e.kind, e.holder) for e in structure.edges}
    assert ("decode_stage", "backpressure", "model_stage") in kinds
    assert ("postprocess_stage", "starved", "model_stage") in kinds
    # Backpressure is never lock contention, and a busy stage means not underloaded.
    assert outcome(report, "lock_contention") == "ok"
    assert outcome(report, "underloaded") in ("ok", "not applicable")


# Every stage of this pipeline runs Python on one GIL: beside a parallel test's load, the decode
# stage read as the bottleneck (97% utilized against the model stage's 73%) on an attach of a CI run
# and preprocessing led; alone it passed 6 of 6. No neighbour, as for the batching server below.
@pytest.mark.serial
def test_pipeline_whose_slow_stage_is_pure_python_names_that_stage(out_dir):
    report = diagnose("pipeline", out_dir, "--pure-python-model")
    assert report.verdict.primary in ("stage_bound", "gil_contention", "cpu_bound"), report.verdict
    top = report.findings[0]
    named = {s.function for s in top.sites}
    # the stage's loop, or the pure-Python model code it runs
    assert any(n == "model_stage" or "Model.forward" in n for n in named), top.sites
    if top.id == "stage_bound":
        assert "GIL" in top.advice[0]


def test_locked_model_with_a_blas_pool_is_not_compute_bound_and_sets_the_blas_threads(out_dir):
    report = diagnose("locked_blas", out_dir, seconds="8")
    assert report.verdict.primary != "compute_bound", report.verdict
    first = report.findings[0]
    assert "OPENBLAS_NUM_THREADS=1" in first.advice[0], first.advice


@pytest.mark.serial  # compute bound on the cores: no neighbour
def test_batching_server_is_compute_bound_naming_the_batcher(out_dir):
    report = diagnose("batching", out_dir)
    verdict = report.verdict
    assert verdict.primary not in ("lock_contention", "pool_wait")
    # The model's compute, named as itself, or as the GIL its code holds with the compute folded
    # in as the same cause (arbiter rule 7): on CPython 3.11 the GIL wait behind Model.forward
    # moves 21-37% between attaches and its 1.24x names the cause on some (benchmarks/README.md,
    # stability on the final code, third session: an open instability, not the right answer).
    if verdict.primary == "gil_contention":
        assert "compute_bound" in verdict.also, verdict
        assert any("Model.forward" in s.function for s in finding(report, "gil_contention").sites), verdict
    else:
        assert verdict.primary == "compute_bound", verdict
    assert finding(report, "compute_bound").sites[0].function == "batcher_loop"
