"""`diagnose experiment --vary ... -- CMD` against a real stdlib ThreadingHTTPServer
(fixtures/servers/threaded_knob_service.py, whose pool size comes from OMP_NUM_THREADS) with the
real load generator on 127.0.0.1: it picks the setting that serves more, proves a report's advice,
and reports a variant whose service crashes without a report. Every service it starts is gone
afterwards (its whole process group)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import pytest

from tests.conftest import REPO
from tests.integration.conftest import requires_ptrace
from tests.integration.servers import free_port
from tests.integration.typed import as_experiment

# Not serial: the winner is chosen by measured throughput, but the knob sizes a pool of ~20 ms
# sleeps, so the gap (one slot ~50 req/s, eight several times that) needs no free core and stays
# many times the noise beside a neighbour on the cores.
pytestmark = [pytest.mark.integration]

SERVICE = [sys.executable, str(REPO / "fixtures" / "servers" / "threaded_knob_service.py")]
QUICK = ["--seconds", "1", "--warmup", "1"]


def experiment(port: int, out_dir, *args: str, env: dict | None = None):
    """Runs `diagnose experiment` on the fixture; the process and its --json report."""
    base_env = {k: v for k, v in os.environ.items()
                if k not in ("OMP_NUM_THREADS", "FIXTURE_EXIT_WHEN_THREADS")}
    proc = subprocess.run(
        [sys.executable, "-m", "diagnose", "experiment", f"http://127.0.0.1:{port}/predict",
         *args, "--json", "-o", str(out_dir), "--", *SERVICE, "--port", str(port)],
        cwd=REPO, capture_output=True, text=True, timeout=150, env={**base_env, **(env or {})})
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, as_experiment(json.loads(proc.stdout)) if proc.stdout.strip() else None


def services_left(port: int) -> list[int]:
    left = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(p.info.get("cmdline") or [])
        if ("threaded_knob_service" in cmdline and f"--port {port}" in cmdline
                and p.info.get("status") != psutil.STATUS_ZOMBIE):
            left.append(p.pid)
    return left


@requires_ptrace
def test_the_experiment_picks_the_thread_setting_that_serves_more_with_its_measured_gain(
        out_dir):
    port = free_port()
    proc, report = experiment(port, out_dir, "--vary", "OMP_NUM_THREADS=1,8", "--at-load", "8",
                              "--rounds", "2", "--diagnose-seconds", "2", *QUICK)
    assert proc.returncode == 0, proc.stderr
    assert services_left(port) == []
    assert dict(report.baseline.env) == {"OMP_NUM_THREADS": "1"}
    assert report.outcome == "winner", report.headline
    assert report.winner is not None and dict(report.winner.env) == {"OMP_NUM_THREADS": "8"}
    # one slot serialises ~20 ms calls (≤ 50 req/s); eight serve several times that: sleeps,
    # so the gap does not depend on free cores and is many times the noise
    assert report.winner.gain > 2 and all(r > 1.5 for r in report.winner.ratios)
    bad, good = report.variants
    assert bad.throughput_rps < 55 < good.throughput_rps
    assert bad.latency_ms.p99 > good.latency_ms.p99
    assert [(r.round, r.arm) for r in report.runs] == [
        (0, "OMP_NUM_THREADS=1"), (0, "OMP_NUM_THREADS=8"),
        (1, "OMP_NUM_THREADS=8"), (1, "OMP_NUM_THREADS=1")]
    # a verdict per variant, taken once under load, its full report beside the experiment's
    for variant in (bad, good):
        assert variant.verdict and variant.verdict.primary, variant
        assert variant.report and (out_dir / variant.report).is_file()
    assert bad.verdict.primary != "none"  # the one-slot pool is a bottleneck
    page = next(out_dir.glob("diagnose-experiment-*.html")).read_text()
    assert 'id="winner">winner</span>' in page and f'href="{good.report}"' in page


def test_from_report_proves_advice_that_names_the_fixture_knob(out_dir, tmp_path):
    # No HTTP fixture's real report advises an environment knob, so the report is written by
    # hand: a pool_wait finding whose fix sizes the pool through OMP_NUM_THREADS.
    advice = tmp_path / "advice.json"
    advice.write_text(json.dumps({"findings": [{
        "id": "pool_wait", "predicted_gain": 4.0, "advice": ["Set OMP_NUM_THREADS=8"],
        "evidence": {"fix": {"knob": "OMP_NUM_THREADS", "value": 8}}}]}))
    port = free_port()
    proc, report = experiment(port, out_dir, "--from-report", str(advice), "--at-load", "8",
                              "--rounds", "2", "--diagnose-seconds", "0", *QUICK)
    assert proc.returncode == 0, proc.stderr
    assert services_left(port) == []
    # the service inherits no OMP_NUM_THREADS: the baseline runs without it
    assert dict(report.baseline.env) == {"OMP_NUM_THREADS": None}
    assert report.advice is not None and report.advice.status == "advice proven", report.advice
    assert report.advice.predicted_gain == 4.0
    assert report.advice.measured_gain > 2
    page = next(out_dir.glob("diagnose-experiment-*.html")).read_text()
    assert "advice proven</span>" in page and "predicted gain 4.00×" in page


def test_a_variant_whose_service_exits_mid_run_is_reported_without_a_report(out_dir):
    port = free_port()
    proc, report = experiment(port, out_dir, "--vary", "OMP_NUM_THREADS=1,8,2", "--at-load",
                              "4", "--rounds", "1", "--diagnose-seconds", "0", *QUICK,
                              env={"FIXTURE_EXIT_WHEN_THREADS": "2", "FIXTURE_EXIT_AFTER": "20"})
    assert proc.returncode == 0, proc.stderr  # the baseline and one other completed
    assert services_left(port) == []
    variants = {v.name: v for v in report.variants}
    crashed = variants["OMP_NUM_THREADS=2"]
    assert crashed.status == "failed" and crashed.report is None
    assert crashed.verdict is None and crashed.throughput_rps is None
    assert crashed.error and "exited with 3" in crashed.error
    assert variants["OMP_NUM_THREADS=8"].throughput_rps > 0
    assert report.winner is not None and dict(report.winner.env) == {"OMP_NUM_THREADS": "8"}
