"""The GIL finding's first advice, vectorising the holder, is ranked by its calibrated figure: the
holder's GIL-bound time (running its Python, or queueing for the GIL to) and the GIL waits behind
it made SPEEDUP times cheaper (Amdahl), not by the waits alone, which measured 10-15x under what
vectorising bought (checks/vectorise_gain.py)."""

from __future__ import annotations

import pytest

from diagnose.checks import gil_contention
from diagnose.checks.base import MAX_AMDAHL
from diagnose.checks.vectorise_gain import SPEEDUP, Vectorised, speedup_gain
from tests.unit.test_roles_and_counters import LIB, LIBC, LIBPYTHON, build, native, py

RUN = py("Thread.run", f"{LIB}/threading.py", 982)
TAKE_GIL = [native("PyEval_RestoreThread", LIBPYTHON), native("take_gil", LIBPYTHON),
            native("pthread_cond_timedwait", LIBC)]
BLAS = [native("cblas_sgemm", "/srv/venv/lib/numpy.libs/libopenblas.so")]


def test_the_figure_is_amdahl_on_the_holders_share_made_speedup_times_cheaper():
    assert SPEEDUP == 20.0
    # the calibration's two workloads: a loop that is all the busy time, and one that is 75% of it
    assert speedup_gain(1.0) == pytest.approx(20.0)
    assert speedup_gain(0.75) == pytest.approx(1 / (0.25 + 0.75 / 20))  # 3.48x; 3.0x measured
    assert speedup_gain(0.0) == 1.0
    assert speedup_gain(1.0) <= MAX_AMDAHL
    figure = Vectorised("postprocess", 0.75, 400, "the request threads' busy time")
    low, high = figure.interval
    assert low < figure.gain < high  # over the share's 95% interval
    assert figure.basis().startswith("calibrated: postprocess is 75% of the request threads' busy time")
    assert "measured fix" in figure.basis()  # how such fixes fared, from the calibration record


def _threads(holder_stack, tmp_path):
    """Four request threads: the holder's stack 60 samples each, re-taking the GIL 40 (the waits
    behind it), 1.0 CPU-s each."""
    src = str(tmp_path / "app.py")
    (tmp_path / "app.py").write_text("def handle():\n    postprocess()\n\ndef postprocess():\n    pass\n")
    waiting = [RUN, py("handle", src, 2)] + TAKE_GIL
    threads = {tid: ([(holder_stack(src), 60), (waiting, 40)], 1.0) for tid in range(3001, 3005)}
    (view,) = build([(300, None, ("python", "app.py"), threads)])
    return view.analysis


def test_the_holders_gil_bound_time_is_what_vectorising_makes_cheaper_not_its_native_calls(tmp_path):
    python = _threads(lambda src: [RUN, py("handle", src, 2), py("postprocess", src, 5)], tmp_path)
    figure = gil_contention._vectorised(python, "postprocess", 0.0, 400)
    assert figure is not None and figure.share == pytest.approx(0.6)  # its 60 of 100 busy samples
    # the same holder's time spent in a BLAS call under it: numpy already, nothing to vectorise
    in_blas = _threads(lambda src: [RUN, py("handle", src, 2), py("postprocess", src, 5)] + BLAS, tmp_path)
    assert gil_contention._vectorised(in_blas, "postprocess", 0.0, 400) is None
    # the GIL waits behind the holder count with it: vectorised, it leaves them no queue
    behind = gil_contention._vectorised(python, "postprocess", 0.3, 400)
    assert behind is not None and behind.share == pytest.approx(0.9) and behind.gain > figure.gain


def test_a_numpy_forward_pass_among_many_threads_is_no_loop_to_vectorise(tmp_path):
    # scheduler_overhead and cpu_quota on CPython 3.11: 64 threads through a numpy model; the
    # holder Model.forward ran native code in 92-98% of its running samples and its threads
    # queued for the GIL at it between calls. Counting those waits as a loop to vectorise ranked
    # the GIL at 2.4-20x over the fixtures' own findings on 3 attaches in 5.
    src = str(tmp_path / "model.py")
    (tmp_path / "model.py").write_text("def forward(x):\n    return x @ w\n")
    forward = [RUN, py("Model.forward", src, 2)]
    threads = {tid: ([(forward + BLAS, 45), (forward + TAKE_GIL, 50), (forward, 5)], 1.0)
               for tid in range(4001, 4009)}
    (view,) = build([(400, None, ("python", "model.py"), threads)])
    assert gil_contention._vectorised(view.analysis, "Model.forward", 0.3, 800) is None
    # the same site running its bytecode in most of its samples is a loop to vectorise
    looping = {tid: ([(forward + BLAS, 5), (forward + TAKE_GIL, 50), (forward, 45)], 1.0)
               for tid in range(4001, 4009)}
    (view,) = build([(401, None, ("python", "model.py"), looping)])
    figure = gil_contention._vectorised(view.analysis, "Model.forward", 0.3, 800)
    assert figure is not None and figure.share == pytest.approx(min(1.0, 0.95 + 0.3))


def test_a_holder_seen_at_handoffs_but_running_little_of_its_own_is_no_loop_to_vectorise(tmp_path):
    # scheduler_overhead on CPython 3.11: the holder most seen at the GIL waits was the threads'
    # request loop, 1-2% of their busy time; the waits "behind" it ranked vectorising it at 1.8x
    src = str(tmp_path / "app.py")
    (tmp_path / "app.py").write_text("def request_loop():\n    while True:\n        forward()\n")
    loop = [RUN, py("request_loop", src, 3)]
    forward = loop + [py("forward", src, 3)]
    threads = {tid: ([(loop, 3), (forward + BLAS, 60), (forward + TAKE_GIL, 37)], 1.0)
               for tid in range(5001, 5009)}
    (view,) = build([(500, None, ("python", "app.py"), threads)])
    assert gil_contention._vectorised(view.analysis, "request_loop", 0.37, 800) is None
