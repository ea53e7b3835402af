"""A pipeline stage's busy share by the utilization law counts what /proc saw it do: a GIL wait
its thread sat in on the run queue, signalled but given no core by another process, is service
delayed by the machine, not a handoff to a neighbour. Replays fixtures/recorded/
pipeline_beside_a_busy_core/ (its README says what it shows)."""

from __future__ import annotations

from tests.replay import replay


def test_a_stage_on_a_cpu_or_runnable_all_window_is_busy_beside_a_busy_core(tmp_path):
    report = replay("pipeline_beside_a_busy_core", "model_stage_starved", tmp_path)
    structure = report.structure[0]
    stages = {s.name: s for s in structure.stages}
    assert structure.bottleneck == "model_stage", structure
    # /proc: 4.5 s on a CPU and 1.26 s runnable of the 6 s window
    assert stages["model_stage"].utilization >= 0.9, stages["model_stage"]
    assert report.verdict.primary == "stage_bound", report.verdict
    stage = next(f for f in report.findings if f.id == "stage_bound")
    assert stage.sites[0].function == "model_stage"


def test_gil_waits_slept_behind_another_stage_stay_out_of_the_service(tmp_path):
    # The pure-Python pipeline's decoders slept on the GIL the model stage held: asleep, not
    # runnable, so the counters add nothing to their service (tests/unit/test_gil_bound_stage.py).
    report = replay("pipeline_pure_python", "gil_led", tmp_path)
    stages = {s.name: s for s in report.structure[0].stages}
    assert stages["decode_stage"].utilization < stages["model_stage"].utilization, stages
    assert stages["decode_stage"].utilization < stages["decode_stage"].busy_share, stages
