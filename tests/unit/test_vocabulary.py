"""One vocabulary (issue 18): thread states, wait kinds, roles, severities and confidence are
defined once, in diagnose/vocab.py. The reports carry exactly its words, the checks select
states through its named groups, the page reads it from its data, and no other module spells
out a group of states or the severity order again."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from diagnose import vocab
from diagnose.vocab import (BUSY, RUNNING, SEVERITIES, Confidence, ProcessRole, Severity, ThreadRole,
                                  ThreadState, WaitKind)
from diagnose.report.model import Report
from tests.conftest import RECORDED, REPO, invoke_cli_report

PACKAGE = REPO / "diagnose"
PAGE = REPO / "reports" / "static" / "page"


def _analyze(tmp_path: Path, name: str, trace: str, native: bool) -> tuple[Report, dict]:
    """The --json report of a recorded profile (with its /proc record and, when asked, its native
    profile), and the page data of the .html written beside it."""
    args = ["analyze", RECORDED / f"{name}.{trace}.json", "--procfs", RECORDED / f"{name}.procfs.json"]
    if native:
        args += ["--native-profile", RECORDED / f"{name}.native.speedscope.json"]
    out = tmp_path / name
    proc, report = invoke_cli_report(*args, "-o", out, "--json")
    assert proc.returncode == 0, proc.stderr
    html = next(out.glob("*.html")).read_text(encoding="utf-8")
    data = re.search(r'<script type="application/json" id="diagnose-data">(.*?)</script>', html, re.S)
    assert report is not None and data is not None
    return report, json.loads(data.group(1))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> list[tuple[Report, dict]]:
    """A lock convoy (native frames: measured waits) and a forked tree (master and workers)."""
    tmp = tmp_path_factory.mktemp("vocabulary")
    return [_analyze(tmp, "lock_contention", "speedscope", native=True),
            _analyze(tmp, "fork_tree", "chrometrace", native=False)]


def _values(enum_type) -> set[str]:
    return {member.value for member in enum_type}


def test_reports_speak_the_vocabulary(recorded):
    states: set[str] = set()
    kinds: set[str] = set()
    roles: set[str] = set()
    process_roles: set[str] = set()
    severities: set[str] = set()
    for report, _ in recorded:
        for thread in report.threads:
            roles.add(thread.role)
            states.update(thread.states)
        for row in report.stacks.samples:
            states.add(row.state)
            roles.add(row.role)
        kinds.update(w.kind for w in report.waits)
        process_roles.update(p.role for p in report.processes)
        severities.update(f.severity for f in report.findings)
        severities.add(report.verdict.severity)
        assert report.verdict.confidence in _values(Confidence)
    assert states <= _values(ThreadState)
    assert kinds <= _values(WaitKind)
    assert roles <= _values(ThreadRole)
    assert process_roles <= _values(ProcessRole)
    assert severities <= _values(Severity)
    # the recordings exercise the vocabulary, not an empty corner of it
    assert {"lock", "gil"} <= kinds and {"master", "worker"} <= process_roles
    assert "critical" in severities and "request" in roles


def test_page_data_carries_the_vocabulary(recorded):
    for _, data in recorded:
        words = data["vocabulary"]
        assert words["severities"] == ["ok", "info", "warning", "critical"] == list(SEVERITIES)
        assert words["critical_score"] == vocab.CRITICAL_SCORE == 75
        assert words["states"] == [s.value for s in ThreadState] and "states" not in data
        assert words["running"] == ["python", "native"]
        assert words["waiting"] == ["gil", "lock", "io", "idle"]
        assert words["wait_kinds"] == [k.value for k in WaitKind]
        assert words["thread_roles"] == ["request", "idle", "library", "other"]
        assert words["process_roles"] == ["master", "single", "worker", "helper", "peer"]


def test_members_serialise_as_their_values():
    members = [*ThreadState, *WaitKind, *ThreadRole, *ProcessRole, *Severity, *Confidence]
    for member in members:
        assert isinstance(member, str)
        assert f"{member}" == str(member) == member.value
        assert json.dumps(member) == json.dumps(member.value)
    assert json.dumps({ThreadState.GIL: Severity.CRITICAL}) == '{"gil": "critical"}'
    assert vocab.STATES == ("python", "native", "gil", "lock", "io", "idle", "unknown")
    assert all(type(s) is str for s in (*vocab.STATES, *vocab.WAIT_KINDS, *vocab.SEVERITIES))


def test_the_groups_are_what_the_checks_use():
    assert set(BUSY) == {"python", "native", "gil"}  # running or wanting to run (checks/base)
    assert set(RUNNING) == {"python", "native"}  # on a CPU (model/counters, the page's "busy only")
    assert set(vocab.GIL_BOUND) == {"python", "gil"}
    assert set(vocab.ACTIVE) == {"python", "native", "gil", "lock"}
    assert set(vocab.CONTENDED) == {"lock", "gil"}
    assert set(vocab.WAITING) == {"gil", "lock", "io", "idle"}
    assert set(vocab.LOCK_KINDS) == {"lock", "rlock", "condition", "barrier", "file_lock"}
    assert set(vocab.POOL_KINDS) == {"queue", "semaphore"}
    assert set(vocab.HANDLER_ROLES) == {"request", "idle"}
    assert set(vocab.SERVING_ROLES) == {"worker", "single"}
    from diagnose.checks.arbiter import CRITICAL
    from diagnose.checks.base import severity_for

    assert CRITICAL == vocab.CRITICAL_SCORE
    assert [severity_for(s) for s in (0, 24, 25, 49, 50, 74, 75, 100)] == [
        "ok", "ok", "info", "info", "warning", "warning", "critical", "critical"]


# ------------------------------------------------------------------ no stray literals

STRAY_ALLOWED: set[str] = set()  # modules allowed to spell out a group of states: none

STATE_WORDS = {s.value for s in ThreadState}
SEVERITY_WORDS = {s.value for s in Severity}


def _literal_groups(tree: ast.AST):
    """Tuples, lists and sets of string constants, with their line."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2 and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            yield node.lineno, [e.value for e in node.elts]


def _stray(path: Path) -> list[str]:
    found = []
    for line, words in _literal_groups(ast.parse(path.read_text(encoding="utf-8"))):
        if len(set(words) & STATE_WORDS) >= 2 and set(words) <= STATE_WORDS:
            found.append(f"{line}: states {words}")
        if len(set(words) & SEVERITY_WORDS) >= 3:
            found.append(f"{line}: severity order {words}")
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        # the critical line as a bare number in a comparison
        if isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value == 75
                                                 for c in (node.left, *node.comparators)):
            found.append(f"{node.lineno}: score threshold 75")
    return found


def test_no_stray_vocabulary_literals():
    stray = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "vocab.py" or rel in STRAY_ALLOWED or rel.endswith("_pb2.py"):
            continue
        if found := _stray(path):
            stray[rel] = found
    assert not stray, f"spell these through diagnose/vocab.py: {stray}"


def test_the_stray_literal_check_finds_them(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('A = ("python", "native", "gil")\nB = ["ok", "info", "warning", "critical"]\n'
                      'C = x >= 75\nD = ("python", "gil", "other")\n')
    assert len(_stray(sample)) == 3


def test_the_page_declares_no_vocabulary_of_its_own():
    script = "\n".join(p.read_text(encoding="utf-8") for p in sorted(PAGE.glob("*.js")))
    for declared in ("WAIT_STATES", "BUSY_STATES", "SEVERITIES", "STATE_COLORS", "ROLE_ORDER", "ROLE_RANK"):
        assert not re.search(rf"\bconst {declared}\b", script), declared
    assert "'critical', 'warning'" not in script and "master: 0" not in script
    assert "raw.vocabulary" in script
