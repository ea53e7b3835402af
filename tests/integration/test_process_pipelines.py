"""Worker processes feeding a model loop (torch DataLoader, multiprocessing.Pool): attached at the
consumer's pid, the saturated worker stage is the verdict (stage_bound, 15 of 15 attaches on
CPython 3.11-3.13 per fixture in benchmarks/README.md's stability table), named by the line of
its transform's loop, and advised more workers in the framework's own terms."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from diagnose.report.model import Report
from tests.conftest import WORKLOADS, marker_line
from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.typed import evidence, run_report

# serial: the advised pool size follows from the cores the workers get
pytestmark = [requires_ptrace, pytest.mark.serial]

TRANSFORM_MARKERS = ("decode-loop", "augment-loop")


def transform_bodies(path: Path) -> dict[str, range]:
    """The body lines of each top-level function of the fixture that holds a transform marker."""
    marked = {marker_line(path, tag) for tag in TRANSFORM_MARKERS}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bodies = {node.name: range(node.body[0].lineno, (node.end_lineno or node.lineno) + 1)
              for node in tree.body if isinstance(node, ast.FunctionDef)}
    return {name: lines for name, lines in bodies.items() if any(m in lines for m in marked)}


def _attach(name: str, out_dir, *args: str) -> Report:
    with running(workload_command(name, "--seconds", "120", *args), ready_timeout=120) as pid:
        proc, report = run_report("attach", pid, "--duration", "5", "--json", "--output-dir", out_dir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return report


def _check(report: Report, name: str, knob: str):
    said = f"{report.verdict.headline} / {report.findings[0].advice[:1]}"
    assert report.verdict.primary == "stage_bound", said
    top = next(f for f in report.findings if f.id == "stage_bound")
    assert top.severity in ("warning", "critical"), said
    assert top.fixes[0].knob == knob, said
    assert top.fixes[0].value > evidence(top, "worker_processes"), said
    assert f"{knob}=" in top.advice[0], said
    # the saturated stage's function: the decode or augment function of the workers' transform
    # (the ones holding the fixture's loop markers), at a line of its body
    path = WORKLOADS / f"{name}.py"
    bodies = transform_bodies(path)
    assert evidence(top, "transform") in ("decode", "augment", "decode.<locals>.<listcomp>",
                                            "augment.<locals>.<listcomp>"), said
    assert top.sites[0].file.endswith(f"{name}.py"), said
    assert top.sites[0].function.split(".")[0] in ("decode", "augment"), said
    function = top.sites[0].function.split(".")[0]
    assert top.sites[0].line in bodies[function], (top.sites[0], bodies[function])
    for finding in report.findings:
        if finding.id == "worker_imbalance":
            assert not any("gunicorn" in a or "uvicorn" in a for a in finding.advice), finding


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed (pip install -e '.[torch]'): the DataLoader "
                           "fixture needs it")
def test_dataloader_with_one_busy_worker_advises_more_num_workers(out_dir):
    _check(_attach("dataloader_job", out_dir), "dataloader_job", "num_workers")


def test_process_pool_feeding_a_model_loop_advises_more_pool_processes(out_dir):
    _check(_attach("mp_pipeline", out_dir), "mp_pipeline", "processes")
