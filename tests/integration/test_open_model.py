"""The load generator against a real service process (fixtures/servers/stall_service.py on
127.0.0.1): the open model sees a 1 s stall in its p99 (latency from intended send time), the
closed model does not; arrivals hold their rate; method, body and headers reach the service;
answers are counted by kind; an impossible rate shows as the generator's own lag."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager

import pytest

from diagnose.load import loadgen
from tests.conftest import REPO
from tests.ready import wait_ready

STALL_SERVICE = REPO / "fixtures" / "servers" / "stall_service.py"
TOOLS = ["python"] + (["wrk"] if shutil.which("wrk") else [])


@contextmanager
def stall_service(*args: str):
    """Starts the service (port 0, exits by itself within a minute); yields its base URL."""
    proc = subprocess.Popen([sys.executable, str(STALL_SERVICE), "--seconds", "60", *args],
                            stdout=subprocess.PIPE, text=True)
    try:
        yield f"http://127.0.0.1:{wait_ready(proc, 30).port}"
    finally:
        proc.kill()
        proc.wait(10)


def service_stats(base: str) -> dict:
    with urllib.request.urlopen(base + "/stats", timeout=5) as answer:
        return json.load(answer)


def no_client_threads_left() -> bool:
    return not any(t.name.startswith(("load-client-", "load-dispatcher")) and t.is_alive()
                   for t in threading.enumerate())


@pytest.mark.serial  # p50 and the generator's schedule lag: no neighbour on the cores
def test_a_one_second_stall_shows_in_the_open_model_p99():
    with stall_service("--stall-on-request", "60", "--stall-s", "1") as base:
        result = loadgen.measure(base + "/", 5, rate=40)
        assert service_stats(base)["stalled"]
    assert result.scheduled == 200 and result.requests == 200 and result.errors == 0
    # ~40 requests were due during the stall; each waited from its intended time
    assert result.latency_p99_ms >= 500
    assert result.latency_max_ms >= 900
    assert result.latency_p50_ms < 100
    # the generator itself sent on time: the lateness is the service's
    assert result.schedule_lag_ms < 50
    assert no_client_threads_left()


@pytest.mark.serial  # a p99 under 100 ms and a request count: no neighbour
def test_the_python_closed_model_hides_the_same_stall_from_its_p99():
    with stall_service("--stall-on-request", "60", "--stall-s", "1") as base:
        result = loadgen.measure(base + "/", 4, 1, tool="python")
        assert service_stats(base)["stalled"]
    # one connection waited 1 s once, so one request out of thousands saw the stall
    assert result.latency_max_ms >= 900
    assert result.latency_p99_ms < 100
    assert result.requests > 1000


@pytest.mark.skipif("wrk" not in TOOLS, reason="wrk is not on PATH")
@pytest.mark.serial  # a p99 measured by wrk: no neighbour
def test_wrk_backfills_the_stall_into_its_own_histogram():
    # wrk 4 corrects its closed-loop histogram itself (stats_correct: a long latency also
    # records the requests the connection would have sent meanwhile, at the mean interval),
    # so its buckets hold more values than requests completed and the stall reaches p99.
    with stall_service("--stall-on-request", "60", "--stall-s", "1") as base:
        result = loadgen.measure(base + "/", 4, 1, tool="wrk", threads=1)
        assert service_stats(base)["stalled"]
    assert result.histogram_source == "wrk-buckets"
    assert result.histogram.get_total_count() > result.requests
    assert result.latency_p99_ms >= 500


@pytest.mark.serial  # arrivals scheduled on time: no neighbour
def test_poisson_arrivals_send_about_rate_times_seconds():
    with stall_service("--stall-on-request", "0") as base:
        result = loadgen.measure(base + "/", 5, rate=100, arrivals="poisson", seed=3)
        served = service_stats(base)["served"]
    assert result.arrivals == "poisson"
    assert abs(result.scheduled - 500) < 5 * 500 ** 0.5   # Poisson(500), 5 sigma
    assert result.requests == result.scheduled == served
    assert result.errors == 0


def test_constant_arrivals_hold_the_rate_against_a_fast_service():
    # Held: every scheduled request sent and answered, none dropped. How close the completed
    # rate and the schedule lag come to the ideal on this machine are the generator's figures
    # (benchmarks/generator_ceiling.py, the open model's table in benchmarks/README.md).
    with stall_service("--stall-on-request", "0") as base:
        result = loadgen.measure(base + "/", 4, rate=200)
    assert result.scheduled == 800
    assert result.requests == 800 and result.errors == 0
    assert 0 < result.requests_per_second <= 200 * 1.05
    assert result.schedule_lag_ms is not None and result.schedule_lag_ms >= 0


@pytest.mark.parametrize("model", ["open"] + [f"closed-{tool}" for tool in TOOLS])
def test_method_body_and_headers_reach_the_service(model):
    body = '{"text": "café"}'.encode()
    options = dict(method="POST", body=body,
                   headers=[("Content-Type", "application/json"), ("X-Diagnose-Test", "7")])
    with stall_service("--stall-on-request", "0") as base:
        if model == "open":
            result = loadgen.measure(base + "/predict?v=1", 1, rate=20, **options)
        else:
            result = loadgen.measure(base + "/predict?v=1", 1, 1, tool=model.split("-")[1],
                                     threads=1, **options)
        last = service_stats(base)["last_request"]
    assert result.requests > 0 and result.errors == 0
    assert last["method"] == "POST" and last["path"] == "/predict?v=1"
    assert last["body"].encode("latin-1") == body
    headers = {name.lower(): value for name, value in last["headers"]}
    assert headers["content-type"] == "application/json"
    assert headers["x-diagnose-test"] == "7"
    assert headers["content-length"] == str(len(body))


@pytest.mark.parametrize("model", ["open"] + [f"closed-{tool}" for tool in TOOLS])
def test_error_answers_are_counted_by_kind(model):
    with stall_service("--stall-on-request", "0") as base:
        runs = {}
        for status in (404, 503):
            url = f"{base}/status/{status}"
            runs[status] = (loadgen.measure(url, 1, rate=20) if model == "open" else
                            loadgen.measure(url, 1, 1, tool=model.split("-")[1], threads=1))
    assert runs[404].errors_by_kind["http_4xx"] == runs[404].requests > 0
    assert runs[404].errors_by_kind["http_5xx"] == 0
    assert runs[503].errors_by_kind["http_5xx"] == runs[503].requests > 0
    assert runs[503].non_2xx == runs[503].requests
    # every answer is an error; a request a busy machine left unanswered is one too (a
    # timeout, counted by its own kind), never an answer
    assert runs[503].errors >= runs[503].requests
    assert runs[503].errors_by_kind["http_4xx"] == 0


@pytest.mark.serial  # a bounded wall time and throughput: no neighbour
def test_an_impossible_rate_shows_as_the_generators_lag_not_the_services_throughput():
    with stall_service("--stall-on-request", "0") as base:
        started = time.monotonic()
        result = loadgen.measure(base + "/", 2, rate=100_000)
    assert time.monotonic() - started < 2 + 10 + 5   # bounded: window, drain, grace
    assert result.scheduled == 200_000
    assert result.requests_per_second < 100_000 / 5
    # the generator says it could not keep the schedule: late sends and requests never sent
    assert result.schedule_lag_ms > 100
    assert result.errors_by_kind["dropped"] > 100_000
    assert result.errors == result.errors_by_kind["dropped"]
    assert no_client_threads_left()
