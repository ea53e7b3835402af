"""`diagnose experiment --from-report` on a report the tool really wrote: a threaded HTTP service
whose request threads all fan out into OpenBLAS's default pool is attached under load; its
verdict advises an environment knob (OPENBLAS_NUM_THREADS); the experiment starts the service
as inherited and with that knob, measures both, and says whether the advice paid."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, run_cli
from tests.integration.conftest import requires_ptrace
from tests.integration.servers import free_port, load_during, start_server

# serial: the advice is proven by a measured gain
pytestmark = [pytest.mark.integration, requires_ptrace, pytest.mark.serial]

BLAS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
SERVICE = [sys.executable, str(REPO / "fixtures" / "servers" / "blas_service.py")]


def test_a_real_reports_environment_advice_is_proven_by_measurement(out_dir):
    port = free_port()
    unpinned = {name: None for name in BLAS_ENV}  # OpenBLAS at its default: a thread per core
    with start_server([*SERVICE, "--port", str(port)], port, env=unpinned, workers=None) as server:
        with load_during(server.url("/predict"), seconds=10, connections=8):
            proc, report = run_cli("attach", server.pid, "--duration", "4", "--json",
                                   "-o", out_dir)
    assert proc.returncode == 0, proc.stderr
    fix = report["findings"][0]["evidence"].get("fix")
    assert fix == {"knob": "OPENBLAS_NUM_THREADS", "value": 1}, report["findings"][0]
    report_path = next(p for p in out_dir.glob("diagnose-*.json")
                       if not p.name.endswith(".speedscope.json"))

    env = {k: v for k, v in os.environ.items() if k not in BLAS_ENV}
    port = free_port()
    proc = subprocess.run(
        [sys.executable, "-m", "diagnose", "experiment", f"http://127.0.0.1:{port}/predict",
         "--from-report", str(report_path), "--at-load", "8", "--rounds", "2", "--seconds", "3",
         "--warmup", "1", "--diagnose-seconds", "0", "--json", "-o", str(out_dir / "exp"),
         "--", *SERVICE, "--port", str(port)],
        cwd=REPO, capture_output=True, text=True, timeout=150, env=env)
    assert proc.returncode == 0, proc.stderr
    experiment = json.loads(proc.stdout)
    variants = {json.dumps(v["env"], sort_keys=True): v for v in experiment["variants"]}
    assert set(variants) == {'{"OPENBLAS_NUM_THREADS": null}', '{"OPENBLAS_NUM_THREADS": "1"}'}
    advice = experiment["advice"]
    # One BLAS thread per request thread served more than the fan-out in every round.
    assert advice["status"] == "advice proven", advice
    assert advice["measured_gain"] > 1.2
    assert advice["predicted_gain"] == report["findings"][0]["predicted_gain"]
    assert experiment["winner"]["env"] == {"OPENBLAS_NUM_THREADS": "1"}
