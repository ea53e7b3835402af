"""A module-level function named like a model entry point (`predict`, `infer`, `generate`) is as
often the service's request handler as its model: where the profile names methods by their
class (py-spy on CPython 3.11+), its own lines are the service's code, not model compute, and a
service whose handler runs pure Python is told to vectorise that line (cpu_bound, with the
calibrated figure), not to quantise a model that takes microseconds."""

from __future__ import annotations

import dataclasses

import pytest

from diagnose.checks import cpu_bound
from diagnose.checks.base import Finding
from diagnose.checks.engine import load_check_settings
from diagnose.classify.categories import Categorizer, names_qualified
from diagnose.samples.profile import Frame
from tests.conftest import REPO, marker_line
from tests.replay import replay
from tests.unit.test_gc_pressure import THREAD, analysis, py

SERVERS = REPO / "fixtures" / "servers"
CPU = load_check_settings()["cpu_bound"]
HANDLER = "/srv/app/main.py"


def category(function: str, qualified: bool) -> str:
    return Categorizer().categorize(Frame(function, HANDLER, 10, False), qualified).category


@pytest.mark.parametrize("function", ["predict", "infer", "inference", "generate"])
def test_a_module_level_handler_named_like_a_model_is_the_services_code_where_names_carry_the_class(function):
    assert category(function, qualified=True) == "other"


@pytest.mark.parametrize("function", ["Model.predict", "Classifier.infer", "main.<locals>.predict",
                                      "Net.forward", "forward"])
def test_methods_and_nested_functions_named_like_a_model_stay_model_compute(function):
    assert category(function, qualified=True) == "model"


def test_before_3_11_every_function_of_the_name_is_model_compute_as_methods_carry_no_class():
    assert category("predict", qualified=False) == "model"


def test_a_profile_names_methods_by_class_when_any_python_frame_holds_a_dot():
    assert names_qualified([Frame("Thread.run", "/x/threading.py", 1, False), Frame("predict", HANDLER, 1, False)])
    assert not names_qualified([Frame("run", "/x/threading.py", 1, False), Frame("predict", HANDLER, 1, False)])
    assert not names_qualified([Frame("PyEval.x", "/lib/libpython.so", 0, True)])  # native frames say nothing


def test_a_stack_through_a_module_level_predict_takes_the_phase_of_what_it_calls():
    categorizer = Categorizer()
    own = THREAD + [py("predict", 41, HANDLER)]
    assert categorizer.phase_of(own) == "other"
    assert categorizer.phase_of(own + [py("Model.forward", 12, HANDLER)]) == "model"
    assert categorizer.phase_of(own + [py("tokenize", 5, HANDLER)]) == "preprocess"


HOT = THREAD + [py("score", 41)]


def test_pure_python_hottest_code_is_told_to_vectorise_its_line_with_a_calibrated_figure():
    found = cpu_bound.run(analysis({1: [(HOT, 80)], 2: [(HOT, 80)]}), CPU)
    assert isinstance(found, Finding)
    assert found.advice[0].startswith("Vectorise score (app/recommend.py:41) with numpy")
    assert found.gain_basis.startswith("calibrated: score is")
    assert found.levers[0].label == "if score were vectorised" and found.predicted_gain == found.levers[0].gain


def test_the_kernels_share_of_the_hot_lines_time_is_not_counted_as_bytecode_to_vectorise():
    mostly_kernel = analysis({1: [(HOT, 80)], 2: [(HOT, 80)]})
    assert mostly_kernel.os is not None
    mostly_kernel.os = dataclasses.replace(mostly_kernel.os, process_user_s=0.4, process_system_s=1.6)
    found = cpu_bound.run(mostly_kernel, CPU)
    assert isinstance(found, Finding)
    vectorised = next((lever for lever in found.levers if lever.label == "if score were vectorised"), None)
    assert vectorised is not None and vectorised.gain == pytest.approx(1 / (0.8 + 0.2 / 20), abs=0.01)


def test_recorded_route_handler_named_predict_reads_cpu_bound_at_its_loop_not_compute_bound(tmp_path):
    # fixtures/servers/wsgi_predict_route.py under gunicorn -w 2 -k sync and wrk on CPython 3.11:
    # the handler `predict` counts trigrams in a Python loop, then a 256x8 matmul. Before, the
    # name made it model compute: compute_bound (76), "quantization, pruning, ... ONNX Runtime".
    # Vectorising the loop (VECTOR=1) measured 5.7x (1,040-1,061 -> 6,016-6,080 req/s).
    report = replay("predict_route", "sync_workers_py311", tmp_path)
    assert report.verdict.primary == "cpu_bound"
    found = next(f for f in report.findings if f.id == "cpu_bound")
    line = marker_line(SERVERS / "wsgi_predict_route.py", "inline-features")
    assert (found.sites[0].function, found.sites[0].line) == ("predict", line)
    assert report.verdict.first_advice[0].startswith(f"Vectorise predict (servers/wsgi_predict_route.py:{line})")
    assert found.gain_basis.startswith("calibrated:") and found.predicted_gain > 2
    compute = next((f for f in report.findings if f.id == "compute_bound"), None)
    assert compute is None or compute.score < 20
