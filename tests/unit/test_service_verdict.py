"""The service's verdict from its processes: merging per-process findings, fleet findings."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from diagnose.checks.base import Finding
from diagnose.checks.engine import load_check_settings
from diagnose.checks.engine import CheckResults, Verdict
from diagnose.checks.service_verdict import _merge, worker_imbalance


def finding(check_id, score, summary="s"):
    return Finding(id=check_id, title=check_id, score=score, severity="critical" if score >= 75 else "ok",
                   summary=summary, evidence={})


def results(*findings):
    return CheckResults(tuple(findings), (), Verdict("x", "x", "ok"))


def service(loads, cores=2, roles=None, cmdline=("python", "job.py")):
    """Processes of one program, children of the master where one is listed: the workers are
    siblings serving requests (a fleet)."""
    roles = roles or ["worker"] * len(loads)
    parent = 100 + roles.index("master") if "master" in roles else 1
    views = [SimpleNamespace(pid=100 + i, ppid=None if role == "master" else parent, role=role,
                             cpu_cores=load, cmdline=list(cmdline), does_request_work=role == "worker")
             for i, (load, role) in enumerate(zip(loads, roles))]
    return SimpleNamespace(processes=views, combined=SimpleNamespace(os=SimpleNamespace(usable_cores=cores)))


SETTINGS = load_check_settings()["worker_imbalance"]


def test_merged_score_weighs_each_worker_by_the_cpu_it_used():
    merged = _merge([results(finding("preprocess_bound", 100, "busy worker")),
                     results(finding("preprocess_bound", 0, "idle worker"))],
                    [1, 2], np.array([0.9, 0.1]))
    (only,) = merged
    assert only.score == 90
    assert only.summary.startswith("in 1 of 2 worker processes: busy worker")
    assert only.number("pid") == 1


def test_a_finding_missing_in_a_worker_counts_as_zero_there():
    merged = _merge([results(finding("lock_contention", 80)), results()], [1, 2], np.array([0.5, 0.5]))
    assert merged[0].score == 40


def test_a_deadlock_in_one_idle_worker_keeps_its_score_beside_busy_workers():
    merged = _merge([results(finding("deadlock", 100, "hung worker")), results(finding("deadlock", 0)),
                     results(finding("deadlock", 0))], [1, 2, 3], np.array([0.02, 0.9, 0.9]))
    (only,) = merged
    assert only.score == 100 and only.number("pid") == 1
    assert only.summary.startswith("in 1 of 3 worker processes: hung worker")


def test_evenly_loaded_saturated_workers_raise_no_fleet_finding():
    assert worker_imbalance(service([0.66, 0.67, 0.66]), SETTINGS).severity == "ok"


def test_one_saturated_gunicorn_worker_on_two_cores_is_too_few_workers():
    found = worker_imbalance(service([0.0, 0.98], roles=["master", "worker"],
                                     cmdline=("/venv/bin/gunicorn", "-w", "1", "app:app")),
                             SETTINGS)
    assert found.severity in ("warning", "critical")
    assert "gunicorn `-w 2`" in found.advice[0]


def test_a_tree_that_is_no_web_server_gets_no_server_flags():
    found = worker_imbalance(service([0.0, 0.98], roles=["master", "worker"]), SETTINGS)
    assert found.severity in ("warning", "critical")
    assert "Run 2 worker processes" in found.advice[0]
    assert not any("gunicorn" in a or "uvicorn" in a for a in found.advice)


def test_one_serving_process_beside_its_helper_has_no_fleet_to_grow():
    # a threaded server with an exporter child: no supervisor runs workers, no count to turn
    assert worker_imbalance(service([0.98, 0.01], roles=["worker", "helper"]), SETTINGS) is None


def test_one_busy_worker_beside_idle_ones_is_uneven_load():
    found = worker_imbalance(service([0.95, 0.02, 0.03]), SETTINGS)
    assert found.score >= 50
    assert "uneven" in found.summary


def test_the_master_is_never_counted_as_a_worker():
    found = worker_imbalance(service([0.0, 0.66, 0.67, 0.66], roles=["master", "worker", "worker", "worker"]),
                             SETTINGS)
    assert found.evidence["workers"] == 3 and found.severity == "ok"
