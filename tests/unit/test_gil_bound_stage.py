"""A pipeline whose slowest stage runs pure Python holds the GIL the other stages queue for:
that stage is the bottleneck (its neighbours' GIL waits behind it are not their own service
time), and the GIL's holder is the same code seen from the queued threads, one cause named once.
Replays of fixtures/recorded/pipeline_pure_python/ (its README says what each shows)."""

from __future__ import annotations

import pytest

from tests.replay import replay


@pytest.mark.parametrize("name", ["gil_led", "stage_led", "cpu_led"])
def test_a_pure_python_stage_the_others_queue_behind_for_the_gil_is_the_verdict(tmp_path, name):
    report = replay("pipeline_pure_python", name, tmp_path)
    structure = report.structure[0]
    assert structure.bottleneck == "model_stage", structure
    assert report.verdict.primary == "stage_bound", report.verdict
    assert "gil_contention" in report.verdict.also, report.verdict
    stage = next(f for f in report.findings if f.id == "stage_bound")
    assert [s.function for s in stage.sites[:2]] == ["model_stage", "PurePythonModel.forward"]
    assert "holds the GIL" in stage.advice[0] and "Vectorise it" in stage.advice[0]
    # its Python made free buys at most what the next stage to saturate allows, not the capped
    # Amdahl figure of a stage all Python (20x read as the page's headline gain)
    (free,) = stage.levers
    assert free.upper_bound and 1.0 < free.gain < 20.0, free
    assert "bounded by decode_stage" in free.basis, free.basis


def test_gil_waits_behind_another_stages_python_are_not_the_waiting_stages_service(tmp_path):
    # On this attach the decoders' threads waited for the GIL 2-3x as long as they ran: counted
    # as service time, the decode stage read busier than the model stage that held the GIL.
    report = replay("pipeline_pure_python", "gil_led", tmp_path)
    stages = {s.name: s for s in report.structure[0].stages}
    assert stages["model_stage"].utilization > stages["decode_stage"].utilization, stages
    assert stages["decode_stage"].busy_share > stages["decode_stage"].utilization


def test_a_pure_python_consumer_whose_producers_queue_for_its_gil_on_the_way_out_of_put_is_the_bottleneck(tmp_path):
    """fixtures/recorded/pipeline_python_consumer: the model threads woken from a full `put`
    re-took the GIL the consumer held; inside the put they still waited on the consumer, and the
    stage that sets the pace is the verdict, its GIL the same code seen from its producers."""
    report = replay("pipeline_python_consumer", "gil_led", tmp_path)
    assert report.structure[0].bottleneck == "postprocess", report.structure[0]
    assert report.verdict.primary == "stage_bound", report.verdict
    assert "gil_contention" in report.verdict.also, report.verdict
    stage = next(f for f in report.findings if f.id == "stage_bound")
    assert stage.sites[0].function == "postprocess"
    waited = {e.waiter: e.share for e in report.structure[0].edges
              if e.holder == "postprocess" and e.kind == "backpressure"}
    assert waited.get("model", 0.0) > 0.5, report.structure[0].edges


def test_threads_re_taking_the_gil_on_their_way_out_of_a_queue_get_are_not_busy_code(tmp_path):
    """fixtures/recorded/pipeline_pure_python/cpu_led: the stages' threads woken from `get`
    queued for the GIL inside `Condition.wait`; counted as busy pure Python, they made
    `Condition.wait` the hottest code to vectorise and cpu_bound the lead. They wait to leave a
    wait: the busy code is what the threads run."""
    report = replay("pipeline_pure_python", "cpu_led", tmp_path)
    busy = next(f for f in report.findings if f.id == "cpu_bound")
    assert "Condition.wait" not in [s.function for s in busy.sites], busy.sites
    assert busy.score < 25, busy  # no problem of its own: the stage and its GIL are the cause
