"""The kernel names the GIL on every CPython py-spy reads with native frames off: a futex inside
the interpreter's runtime state (`_PyRuntime`, whose layout moved the GIL between 3.11, 3.12 and
3.13: in the runtime's ceval state, then per interpreter, then inside the main interpreter that
the runtime embeds). Four threads spin in pure Python; the report's wait graph must show them
waiting for the GIL, measured by the kernel rather than estimated from CPU time."""

from __future__ import annotations

import pytest

from tests.integration import pythons
from tests.integration.conftest import running
from tests.integration.typed import evidence, run_report

SPINNERS = """
import os, sys, threading
def spin():
    x = 0
    while True:
        x += 1
for _ in range(4):
    threading.Thread(target=spin, daemon=True).start()
print(f"READY pid={os.getpid()}", flush=True)
threading.Event().wait(120)
"""

VERSIONS = ("3.11", "3.12", "3.13")


@pytest.mark.parametrize("minor", VERSIONS)
def test_threads_waiting_for_the_gil_are_named_by_the_kernel(minor, tmp_path):
    interpreter = pythons.find_python(minor)
    if interpreter is None:
        pytest.skip(f"no CPython {minor} on this machine")
    supported, why = pythons.py_spy_supports(interpreter.version)
    if not supported:
        pytest.skip(why)
    with running([interpreter.executable, "-c", SPINNERS]) as pid:
        proc, report = run_report("attach", pid, "--duration", "3", "--no-native", "--json",
                               "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    graph = report.wait_graph
    gil = [n for n in graph.nodes if n.resource == "gil"]
    assert len(gil) == 1, graph.nodes
    into = [e for e in graph.edges if e.target == gil[0].id and e.kind == "waits_for"]
    assert into and max(e.share for e in into) >= 0.2, into
    # The finding rests on those measured waits, not on the CPU-time estimate.
    found = next(f for f in report.findings if f.id == "gil_contention")
    assert evidence(found, "estimated") is False, found.evidence
    assert evidence(found, "gil_wait_share") >= 0.2, found.evidence
