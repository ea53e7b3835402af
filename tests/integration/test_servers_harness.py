"""The real-server harness itself (tests/integration/servers.py): servers start, answer, are
found, and leave nothing behind; the load generator loads and refuses anything but loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil

import pytest

from tests.conftest import REPO, marker_line
from tests.integration.servers import (SERVERS, LoadError, ServerError, expected_workers,
                                       free_port, gunicorn_sync, gunicorn_uvicorn_worker,
                                       is_alive, load, loopback_url, measure_throughput,
                                       parse_wrk, start_server, uvicorn_app)

pytestmark = pytest.mark.integration

FIXTURE_MARKERS = {
    "wsgi_preprocess": ["preprocess-loop", "model-compute"],
    "asgi_inline": ["inline-compute", "offload-call", "model-compute"],
    "asgi_blocking": ["blocking-call", "inline-blocking-call", "offload-call", "async-call"],
    "asgi_threadpool": ["offloaded-compute", "def-endpoint", "model-compute"],
}


def assert_all_gone(procs, timeout=5.0):
    deadline = time.monotonic() + timeout
    while any(is_alive(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p.pid for p in procs if is_alive(p)] == []


def test_every_server_fixture_has_its_markers():
    for name, tags in FIXTURE_MARKERS.items():
        for tag in tags:
            assert marker_line(SERVERS / f"{name}.py", tag) > 0
    assert SERVERS == REPO / "fixtures" / "servers"


def test_gunicorn_starts_answers_finds_its_workers_and_leaves_nothing_behind():
    port = free_port()
    with start_server(gunicorn_sync("wsgi_preprocess", port, workers=3), port,
                      ready_timeout=60) as server:
        assert server.port == port
        assert server.ready_seconds is not None and server.ready_seconds < 60
        assert server.get("/health") == (200, b"ok")
        status, body = server.get("/predict")
        assert status == 200
        assert len(json.loads(body)["predictions"]) == 3
        workers = server.worker_pids()
        assert len(workers) == 3
        assert server.pid not in workers
        assert server.serving_pids() == workers
        procs = server.known_processes()
        assert sorted(p.pid for p in procs) == sorted([server.pid, *workers])
    assert_all_gone(procs)
    assert server.proc.returncode is not None


def test_a_killed_master_does_not_leave_orphaned_workers():
    port = free_port()
    with start_server(gunicorn_sync("wsgi_preprocess", port, workers=2), port) as server:
        procs = server.known_processes()
        assert len(server.worker_pids()) == 2
        os.kill(server.pid, signal.SIGKILL)  # the workers are orphans now
    assert_all_gone(procs)


RUNNER = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from tests.integration.servers import free_port, gunicorn_sync, start_server
port = free_port()
with start_server(gunicorn_sync("wsgi_preprocess", port, workers=2), port) as server:
    print(" ".join(map(str, server.tree_pids())), flush=True)
    time.sleep(120)
"""


def test_a_killed_test_runner_does_not_leave_its_server_behind():
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(REPO)], stdout=subprocess.PIPE,
                              text=True)
    try:
        line = runner.stdout.readline()  # the runner prints once the server is ready
        procs = [psutil.Process(int(pid)) for pid in line.split()]
        assert len(procs) == 3
    finally:
        runner.kill()  # no finally runs in the runner: only PR_SET_PDEATHSIG stops the server
        runner.wait(timeout=10)
    assert_all_gone(procs, timeout=20)


def test_uvicorn_with_workers_is_a_supervisor_and_its_tree_is_stopped():
    port = free_port()
    with start_server(uvicorn_app("asgi_threadpool", port, workers=2), port) as server:
        workers = server.worker_pids()
        assert len(workers) == 2  # multiprocessing's resource tracker is not a worker
        assert server.pid not in workers
        assert server.get("/predict")[0] == 200
        procs = server.known_processes()
    assert_all_gone(procs)


def test_single_process_uvicorn_serves_from_the_started_process():
    port = free_port()
    with start_server(uvicorn_app("asgi_inline", port), port) as server:
        assert server.worker_pids() == []
        assert server.serving_pids() == [server.pid]
        assert server.get("/predict")[0] == 200
        procs = server.known_processes()
    assert_all_gone(procs)


def test_gunicorn_with_uvicorn_workers_serves_an_asgi_fixture():
    port = free_port()
    with start_server(gunicorn_uvicorn_worker("asgi_blocking", port, workers=2), port) as server:
        assert len(server.worker_pids()) == 2
        assert server.get("/predict")[0] == 200
        procs = server.known_processes()
    assert_all_gone(procs)


def test_a_server_that_cannot_start_fails_fast_with_its_output():
    port = free_port()
    started = time.monotonic()
    with pytest.raises(ServerError, match="no_such_module"):
        with start_server(uvicorn_app("no_such_module", port), port, ready_timeout=30):
            pass
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("offload", [None, "1"])
def test_the_offload_switch_reaches_the_server(offload):
    port = free_port()
    env = {"DIAGNOSE_FIXTURE_OFFLOAD": offload}
    with start_server(uvicorn_app("asgi_blocking", port), port, env=env) as server:
        environ = open(f"/proc/{server.pid}/environ", "rb").read().split(b"\0")
        assert (b"DIAGNOSE_FIXTURE_OFFLOAD=1" in environ) == (offload == "1")
        assert server.get("/predict")[0] == 200


@pytest.mark.parametrize("tool", ["auto", "python"])
def test_load_generator_drives_a_server_and_reports(tool):
    port = free_port()
    with start_server(uvicorn_app("asgi_threadpool", port), port) as server:
        with load(server.url("/predict"), seconds=2, connections=4, tool=tool) as run:
            assert run.result is None  # still running
        result = run.result
    assert result.requests > 0
    assert result.requests_per_second > 0
    assert result.errors == 0
    assert result.latency_p50_ms is not None and result.latency_p99_ms >= result.latency_p50_ms
    # It ran for the 2 s asked and then stopped by itself: the bound tells "stopped at its
    # duration" from "ran on" (a generator that ignores it runs until the block's end is
    # waited out), not a speed; a loaded machine stretches its start-up, never its run.
    assert 1.5 < result.duration_s < 10


def test_measure_throughput_on_localhost():
    port = free_port()
    with start_server(uvicorn_app("asgi_threadpool", port), port):
        assert measure_throughput(f"http://localhost:{port}/health", 1, connections=2) > 0


@pytest.mark.parametrize("url", [
    "http://example.com/", "http://10.0.0.1:8000/predict", "http://0.0.0.0:8000/",
    "http://[::1]:8000/", "http://127.0.0.1.example.com/", "http://localhost@example.com/",
    "http://user:pw@127.0.0.1:8000/", "https://127.0.0.1:8000/", "ftp://localhost/",
])
def test_load_refuses_anything_but_loopback(url):
    with pytest.raises(ValueError, match="refusing"):
        with load(url, seconds=1):
            pytest.fail("load started against a non-loopback URL")


def test_loopback_urls_are_rewritten_to_127_0_0_1():
    assert loopback_url("http://localhost:8000/predict?x=1") == "http://127.0.0.1:8000/predict?x=1"
    assert loopback_url("http://127.0.0.1:9") == "http://127.0.0.1:9/"


def test_wrk_output_is_parsed():
    output = """Running 5s test @ http://127.0.0.1:8000/predict
  2 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    61.84ms   27.66ms    1.45s    71.52%
    Req/Sec    64.64     28.10   110.00     65.00%
  Latency Distribution
     50%  950.00us
     75%   83.83ms
     90%  103.15ms
     99%    1.34s
  12646 requests in 5.02s, 172.62KB read
  Socket errors: connect 1, read 2, write 0, timeout 3
  Non-2xx or 3xx responses: 7
Requests/sec:   2519.12
Transfer/sec:     34.42KB
"""
    result = parse_wrk(output, "http://127.0.0.1:8000/predict", 8)
    assert result.requests == 12646
    assert result.duration_s == pytest.approx(5.02)
    assert result.requests_per_second == pytest.approx(2519.12)
    assert result.latency_avg_ms == pytest.approx(61.84)
    assert result.latency_p50_ms == pytest.approx(0.95)
    assert result.latency_p99_ms == pytest.approx(1340)
    assert result.socket_errors == {"connect": 1, "read": 2, "write": 0, "timeout": 3}
    assert result.non_2xx == 7 and result.errors == 13
    with pytest.raises(LoadError):
        parse_wrk("unable to connect to 127.0.0.1:1 Connection refused\n", "u", 1)


def test_worker_counts_are_read_from_the_command():
    assert expected_workers(gunicorn_sync("m", 1, workers=3)) == 3
    assert expected_workers(uvicorn_app("m", 1)) == 0
    assert expected_workers(uvicorn_app("m", 1, workers=1)) == 0
    assert expected_workers(uvicorn_app("m", 1, workers=2)) == 2
    assert expected_workers(["python", "-m", "gunicorn", "app:app"]) == 1
    assert expected_workers(["python", "server.py"]) is None
