"""Shared test helpers: where things are, and how to run the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = REPO / "fixtures" / "workloads"
RECORDED = REPO / "fixtures" / "recorded"


def run_cli(*args, timeout=180, check_json=True) -> tuple[subprocess.CompletedProcess, dict | None]:
    """Runs `python -m diagnose ARGS`; returns the process and the parsed --json output if any."""
    proc = subprocess.run([sys.executable, "-m", "diagnose", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)
    data = None
    if check_json and "--json" in args and proc.stdout.strip():
        data = json.loads(proc.stdout)
    return proc, data


def marker_line(path: Path, tag: str) -> int:
    """Line number of the `# diagnose-fixture: TAG` marker in a workload."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if f"# diagnose-fixture: {tag}" in line:
            return number
    raise AssertionError(f"{path.name} has no marker {tag!r}")


@pytest.fixture
def out_dir(tmp_path):
    return tmp_path / "reports"


def outcome(report: dict, check_id: str) -> str:
    """A check's severity, or "not applicable": every check ends as exactly one of the two, so a
    check missing from the report fails here instead of passing as "no finding"."""
    found = [f["severity"] for f in report["findings"] if f["id"] == check_id]
    skipped = [n["reason"] for n in report["not_applicable"] if n["id"] == check_id]
    assert len(found) + len(skipped) == 1, (check_id, found, skipped)
    return found[0] if found else "not applicable"
