"""Synthetic stacks: in a pipeline the bottleneck stage is the one that serves, and findings on
threads outside it predict no more than the bottleneck stage gains (checks/pipeline_gain.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from diagnose.checks import gil_contention, preprocess_bound
from diagnose.checks.engine import load_check_settings, run_checks
from diagnose.checks.arbiter import rank
from diagnose.checks.base import Site, make_finding
from diagnose.checks.engine import order_of, verdict_for
from diagnose.checks.pipeline_gain import bound_by_bottleneck
from diagnose.checks.spec import CheckSettings
from tests.unit.test_roles_and_counters import LIB, LIBC, LIBPYTHON, addr, build, native, py

SETTINGS = load_check_settings()

SOURCE = '''import queue

def batcher_loop(intake):
    while True:
        first = intake.get(timeout=0.5)
        logits = model.forward(first)
        first.future.set_result(logits)


def handle_request(intake, text):
    req = Request(tokenize(text))
    intake.put(req)
    logits = req.future.result(timeout=1.0)
    return logits


def request_loop(intake):
    while True:
        handle_request(intake, "x")
'''
RUN = py("Thread.run", f"{LIB}/threading.py", 982)
TAKE_GIL = [native("PyEval_RestoreThread", LIBPYTHON), native("take_gil", LIBPYTHON),
            native("pthread_cond_timedwait", LIBC)]
ON_LOCK = [native("lock_PyThread_acquire_lock", LIBPYTHON),
           native("PyThread_acquire_lock_timed", LIBPYTHON), addr(LIBC)]


def batching_server(tmp_path, cpu=(4.0, 0.4)):
    """One batcher runs the model 40% of its time and waits on its queue the rest; 8 request
    threads tokenize 5% of theirs and wait for their results the rest, re-taking the GIL after
    the wake-up in 45% of it (the GIL waits a batcher's results set off)."""
    src = str(tmp_path / "server.py")
    (tmp_path / "server.py").write_text(SOURCE)
    wait_result = [RUN, py("request_loop", src, 19), py("handle_request", src, 13),
                   py("Future.result", f"{LIB}/concurrent/futures/_base.py", 451),
                   py("Condition.wait", f"{LIB}/threading.py", 320)]
    tokenize = [RUN, py("request_loop", src, 19), py("handle_request", src, 11), py("tokenize", src, 11)]
    get = [RUN, py("batcher_loop", src, 5), py("Queue.get", f"{LIB}/queue.py", 171),
           py("Condition.wait", f"{LIB}/threading.py", 320)]
    forward = [RUN, py("batcher_loop", src, 6), py("Model.forward", src, 6)]
    threads = {1001: ([(forward, 80), (get + ON_LOCK, 120)], cpu[0])}
    for tid in range(1002, 1010):
        threads[tid] = ([(wait_result + TAKE_GIL, 90), (wait_result + ON_LOCK, 100), (tokenize, 10)],
                        cpu[1])
    (view,) = build([(100, None, ("python", "server.py"), threads)])
    return view.analysis


def test_gil_waits_on_the_way_back_from_a_result_wait_do_not_make_the_waiters_the_bottleneck(tmp_path):
    structure = batching_server(tmp_path).structure
    assert structure.pipeline
    assert structure.bottleneck == "batcher_loop"
    requests = structure.stage("request_loop")
    assert requests is not None
    # busy (running or wanting the GIL) half the time, serving only while they tokenize
    assert requests.busy_share == 0.5 and requests.utilization == 0.05


def test_gil_waits_outside_the_bottleneck_stage_predict_no_more_than_the_bottleneck_gains(tmp_path):
    analysis = batching_server(tmp_path)
    found = gil_contention.run_with_floor(analysis, SETTINGS["gil_contention"])
    # the request threads' own evidence stands: they wait for the GIL 40% of their time
    assert found.score >= 75
    # ...but the batcher, which sets the throughput, never waits for it: nothing to buy
    assert found.predicted_gain == 1.0
    assert found.gain_range[1] < 1.05
    assert "bounded by the bottleneck stage batcher_loop" in found.gain_basis
    assert found.bounded_by_stage == "batcher_loop"  # off the pace (arbiter rule 5)


def test_a_batcher_running_the_model_is_named_over_its_clients_gil_waits(tmp_path):
    # the cores kept busy (a BLAS pool beside the batcher in a real server)
    results = run_checks(batching_server(tmp_path, cpu=(14.0, 0.5)))
    assert results.verdict.primary == "compute_bound", results.verdict
    gil = next(f for f in results.findings if f.id == "gil_contention")
    assert not gil.predicted_gain or gil.predicted_gain < 1.05


PIPELINE = '''import queue

def decode_stage(intake, decoded):
    while True:
        item = intake.get()
        decoded.put(decode(item))


def model_stage(decoded, scored):
    while True:
        item = decoded.get()
        scored.put(model.forward(item))
'''


@dataclass(frozen=True)
class StageStacks:
    """The stacks of PIPELINE's two stages, written to `stages.py` under a test's tmp_path."""

    decode: list
    put: list
    forward: list
    get: list

    @classmethod
    def written(cls, tmp_path) -> StageStacks:
        src = str(tmp_path / "stages.py")
        (tmp_path / "stages.py").write_text(PIPELINE)
        wait = py("Condition.wait", f"{LIB}/threading.py", 320)
        return cls(decode=[RUN, py("decode_stage", src, 6), py("decode", src, 6), py("tokenize", src, 6)],
                   put=[RUN, py("decode_stage", src, 6), py("Queue.put", f"{LIB}/queue.py", 140), wait],
                   forward=[RUN, py("model_stage", src, 12), py("Model.forward", src, 12)],
                   get=[RUN, py("model_stage", src, 11), py("Queue.get", f"{LIB}/queue.py", 171), wait])


def _pipeline(model_thread, decode_thread):
    """One model thread (2001) and two decode threads (2002, 2003): ([(stack, samples)], cpu)."""
    threads = {2001: model_thread, 2002: decode_thread, 2003: decode_thread}
    (view,) = build([(200, None, ("python", "stages.py"), threads)])
    return view.analysis


def pure_python_pipeline(tmp_path):
    """Two decode threads preprocess 40% of their time and block putting into the full `decoded`
    queue the rest; one model thread runs pure Python 95% of its time."""
    st = StageStacks.written(tmp_path)
    return _pipeline(([(st.forward, 190), (st.get + ON_LOCK, 10)], 9.5),
                     ([(st.decode, 80), (st.put + ON_LOCK, 120)], 4.0))


def test_preprocessing_beside_a_slow_pure_python_stage_predicts_no_more_than_that_stage_gains(tmp_path):
    analysis = pure_python_pipeline(tmp_path)
    assert analysis.structure.bottleneck == "model_stage"
    found = preprocess_bound.run(analysis, SETTINGS["preprocess_bound"])
    assert found.score > 0
    # the model stage runs no preprocessing: making it cheaper buys the pipeline nothing
    assert found.predicted_gain == 1.0 and found.gain_range[1] < 1.05


def test_a_bound_never_raises_a_gain_the_bottleneck_stage_would_gain_more_from(tmp_path):
    analysis = pure_python_pipeline(tmp_path)
    found = preprocess_bound.run(analysis, SETTINGS["preprocess_bound"])
    low = replace(found, predicted_gain=1.1, gain_interval=(1.05, 1.15))
    same = bound_by_bottleneck(low, analysis, lambda stage, rows: (0.5, 100), lambda s: 1 + s, "x")
    assert same is low


def test_at_equal_rank_the_batchers_model_names_the_cause_over_gil_waits_off_the_pace():
    # batching on CPython 3.11, 1 attach in 5: the request threads' GIL waits, re-taking the GIL
    # after the batcher's results, scored 100 (68-100) beside the batcher's model at 100, each
    # predicting nothing; the causal order named the GIL, whose waits the batcher never shows.
    model = make_finding("compute_bound", CheckSettings(title="compute_bound: x"), 100, "model",
                         {}, [Site("Model.forward", "server.py", 6, 0.97)], gain=(1.0, "no lever"))
    waits = replace(make_finding("gil_contention", CheckSettings(title="gil_contention: x"), 100,
                                 "GIL", {}, [Site("Model.forward", "server.py", 6, 0.55)],
                                 gain=(1.0, "bounded")),
                    score_interval=(68, 100), gain_interval=(1.0, 1.21))
    off = replace(waits, bounded_by_stage="batcher_loop")
    verdict = verdict_for(rank([off, model], order_of))
    assert (verdict.primary, verdict.co_primary) == ("compute_bound", None)
    assert verdict.also == ("gil_contention",)  # one cause, seen from the waiters' side
    # The same waits measured where the pace is set keep the causal order's name.
    assert verdict_for(rank([waits, model], order_of)).primary == "gil_contention"


def gil_bound_pipeline(tmp_path):
    """Two decode threads preprocess 40% of their time and wait for the GIL the rest, never
    blocked on the `decoded` queue (the stage that sets the pace); one model thread runs pure
    Python 60% of its time and waits on its queue the rest; ~1 of 2 cores in use."""
    st = StageStacks.written(tmp_path)
    return _pipeline(([(st.forward, 120), (st.get + ON_LOCK, 80)], 6.0),
                     ([(st.decode, 80), (st.decode + TAKE_GIL, 120)], 2.0))


def test_preprocessing_already_in_a_stage_of_its_own_is_not_offered_the_idle_cores_again(tmp_path):
    analysis = gil_bound_pipeline(tmp_path)
    assert analysis.structure.pipeline and analysis.structure.bottleneck == "decode_stage"
    found = preprocess_bound.run(analysis, SETTINGS["preprocess_bound"])
    assert found.score >= 25
    # the advice to move it into threads of its own is applied already: only a cheaper
    # preprocessing is a lever, at its calibrated half
    assert [lever.kind for lever in found.levers] == ["remove_work", "remove_work"]
    assert found.predicted_gain == found.levers[0].gain
    assert "already runs in a stage of its own (decode_stage)" in found.gain_basis
