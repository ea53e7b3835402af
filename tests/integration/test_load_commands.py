"""`diagnose sweep` and `diagnose experiment` against real servers with the real load generator:
the knee of a server whose capacity is known, the diagnosis at that knee, a sweep stopped by a
signal, and an experiment that measures advice known to pay off. Each leaves no generator and no
server behind."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import REPO, run_cli
from tests.integration.conftest import requires_ptrace
from tests.integration.servers import free_port, gunicorn_sync, start_server, uvicorn_app

pytestmark = [pytest.mark.integration, requires_ptrace]


def generators_loading(port: int) -> list[int]:
    """Load generators (wrk) still running against 127.0.0.1:PORT."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if proc.info.get("name") == "wrk" and f"127.0.0.1:{port}" in cmdline:
            found.append(proc.pid)
    return found


def test_sweep_finds_the_knee_of_two_sync_workers_and_diagnoses_it(out_dir):
    # Two sync workers, ~10 ms of pure-Python preprocessing per request, two cores: one
    # connection keeps one worker busy, two keep both; more connections only queue.
    port = free_port()
    with start_server(gunicorn_sync("wsgi_preprocess", port, workers=2), port) as server:
        started = time.monotonic()
        proc, report = run_cli("sweep", server.url("/predict"), "--pid", server.pid,
                               "--concurrency", "1,2,4,8,16", "--window", "1", "--warmup", "1",
                               "--max-windows", "4", "--patience", "2",
                               "--diagnose-seconds", "3", "--json", "-o", out_dir, timeout=170)
        elapsed = time.monotonic() - started
        assert generators_loading(port) == []
    assert proc.returncode == 0, proc.stderr
    steps = {s["concurrency"]: s for s in report["steps"]}
    assert list(steps)[:3] == [1, 2, 4]
    summary = report["summary"]
    # The two workers saturate well before 16 connections (on a busy machine, later than 2).
    assert summary["saturated"] is True
    assert summary["limited_by"] == "service"
    knee, top = summary["knee"], max(report["steps"], key=lambda s: s["rps"])
    assert all(s["rps"] < 0.95 * top["rps"] for s in report["steps"]
               if s["concurrency"] < knee["concurrency"])
    # What was measured obeys the service's physics: never more than its two workers can serve
    # at the time one request takes alone, and in a closed loop Little's law ties each level's
    # throughput and latency (concurrency = req/s × latency; p50 stands in for the mean).
    alone_ms = steps[1]["p50_ms"]
    assert top["rps"] < 1.3 * 2 * 1000 / alone_ms
    for s in report["steps"]:
        assert s["concurrency"] == pytest.approx(s["rps"] * s["p50_ms"] / 1000, rel=0.35), s
    # Beyond the knee the connections only queue: p99 grows far past one request's time.
    last = report["steps"][-1]
    assert last["concurrency"] >= 8
    assert last["p99_ms"] > 2 * steps[1]["p99_ms"]
    # CPU seen at each step: the service's tree and the generator's own.
    assert top["service_cores"] > 0.5
    assert all(s["generator_cores"] is not None and s["generator_cores"] > 0
               for s in report["steps"])
    assert all(len(s["windows"]) == s["windows_measured"] >= 3 for s in report["steps"])
    # Why it stops there: the diagnosis at the knee, under that load.
    diagnosis = report["diagnosis"]
    assert diagnosis["concurrency"] == summary["knee"]["concurrency"]
    assert diagnosis["primary"] == "preprocess_bound", diagnosis
    assert (out_dir / diagnosis["html_name"]).is_file()
    assert diagnosis["rps_while_sampled"] > 0
    sweep_files = sorted(p.name for p in out_dir.glob("sweep-*"))
    assert len(sweep_files) == 2 and sweep_files[0].endswith(".html")
    html = (out_dir / sweep_files[0]).read_text()
    assert 'class="knee"' in html and diagnosis["html_name"] in html
    assert json.loads((out_dir / sweep_files[1]).read_text())["steps"] == report["steps"]
    assert elapsed < 120


def test_the_python_client_sweeps_when_asked_and_counts_its_own_cpu(out_dir):
    port = free_port()
    with start_server(gunicorn_sync("wsgi_preprocess", port, workers=2), port) as server:
        proc, report = run_cli("sweep", server.url("/predict"), "--tool", "python",
                               "--concurrency", "1,2", "--window", "1", "--warmup", "0",
                               "--max-windows", "3", "--json", "-o", out_dir, timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert report["generator"]["tool"] == "python"
    assert [s["concurrency"] for s in report["steps"]] == [1, 2]
    assert all(s["rps"] > 20 and s["generator_cores"] > 0 for s in report["steps"])
    assert report["steps"][0]["p95_ms"] >= report["steps"][0]["p50_ms"]
    assert report["diagnosis"] is None  # no --pid: no diagnosis


def test_a_sweep_stopped_by_sigterm_writes_its_partial_report_and_stops_the_generator(out_dir):
    port = free_port()
    with start_server(gunicorn_sync("wsgi_preprocess", port, workers=2), port) as server:
        sweep = subprocess.Popen(
            [sys.executable, "-m", "diagnose", "sweep", server.url("/predict"),
             "--concurrency", "1,2,4,8", "--window", "2", "--warmup", "1", "-o", str(out_dir)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            for line in sweep.stderr:  # the first step is done, the second under way
                if "concurrency 1:" in line or time.monotonic() > deadline:
                    break
            time.sleep(1.5)
            assert generators_loading(port) != []  # the second step's generator runs
            sweep.send_signal(signal.SIGTERM)
            _, err = sweep.communicate(timeout=30)
        finally:
            if sweep.poll() is None:
                sweep.kill()
                sweep.wait()
        time.sleep(0.2)
        assert generators_loading(port) == []
    assert sweep.returncode == 143, err
    assert "interrupted by SIGTERM after 1 step: partial sweep report written" in err
    report = json.loads(next(out_dir.glob("sweep-*.json")).read_text())
    assert report["partial"] is True and report["interrupted"] == "SIGTERM"
    assert [s["concurrency"] for s in report["steps"]] == [1]
    assert report["steps"][0]["rps"] > 0


def test_experiment_measures_that_offloading_a_blocked_event_loop_pays(out_dir):
    # asgi_inline runs ~7 ms of numpy inline on uvicorn's loop; DIAGNOSE_FIXTURE_OFFLOAD=1 is
    # the advice applied (run_in_threadpool): on two cores it served ~1.75x (domain notes).
    port = free_port()
    start = shlex.join(uvicorn_app("asgi_inline", port))
    before = {p.pid for p in psutil.process_iter()}
    env = {k: v for k, v in os.environ.items() if k != "DIAGNOSE_FIXTURE_OFFLOAD"}
    proc = subprocess.run([sys.executable, "-m", "diagnose", "experiment",
                           f"http://127.0.0.1:{port}/predict", "--start", start,
                           "--set", "DIAGNOSE_FIXTURE_OFFLOAD=1", "--concurrency", "8",
                           "--seconds", "3", "--warmup", "1", "--rounds", "2", "--json",
                           "-o", str(out_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=170, env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    decision = report["decision"]
    assert [(r["round"], r["arm"]) for r in report["runs"]] == [
        (0, "baseline"), (0, "variant"), (1, "variant"), (1, "baseline")]
    assert decision["outcome"] == "better", decision
    assert all(x > 1.1 for x in decision["ratios"])
    assert report["arms"][1]["env"] == {"DIAGNOSE_FIXTURE_OFFLOAD": "1"}
    assert all(r["service_cores"] is not None and r["ready_s"] < 60 for r in report["runs"])
    # Every service it started was stopped.
    left = [p for p in psutil.process_iter(["cmdline"])
            if p.pid not in before and "asgi_inline" in " ".join(p.info.get("cmdline") or [])
            and p.status() != psutil.STATUS_ZOMBIE]
    assert left == []
    html = next(out_dir.glob("experiment-*.html")).read_text()
    assert 'id="outcome">better</span>' in html
