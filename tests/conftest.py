"""Shared test helpers: where things are, and how to run the real CLI (in a subprocess, or in
this process through click's test runner)."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from diagnose.report.model import Report

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = REPO / "fixtures" / "workloads"
RECORDED = REPO / "fixtures" / "recorded"

# Every attach a test runs keeps its recording (`attach --keep-raw`, which reads this variable):
# a live test that fails leaves what the tool saw, to be replayed with `diagnose analyze` and
# turned into a unit test (the failure's report section names the files; README.md, "A live test that fails").
# A module that asserts on the exact files of a default attach turns it off (keep_raw_off).
KEEP_RAW_ENV = "DIAGNOSE_KEEP_RAW"
os.environ.setdefault(KEEP_RAW_ENV, "1")
# Where a failed test's recordings are copied (CI: .ci/run sets it; its artifacts).
ARTIFACTS_ENV = "DIAGNOSE_TEST_ARTIFACTS"


def run_cli(*args, timeout=180, check_json=True) -> tuple[subprocess.CompletedProcess, dict | None]:
    """Runs `python -m diagnose ARGS`; returns the process and the parsed --json output if any."""
    proc = subprocess.run([sys.executable, "-m", "diagnose", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)
    data = None
    if check_json and "--json" in args and proc.stdout.strip():
        data = json.loads(proc.stdout)
    return proc, data


@dataclass(frozen=True)
class CliResult:
    """What an in-process CLI run gave back, named like subprocess.CompletedProcess's fields so a
    test reads the same whichever way the CLI ran."""

    returncode: int
    stdout: str
    stderr: str


def invoke_cli(*args, timeout=None, check_json=True) -> tuple[CliResult, dict | None]:
    """Runs the CLI's click command in this process (no interpreter start, no pandas import per
    run); returns the result and the parsed --json output if any. For argument checks and offline
    analyses; a test of exit codes on signals, or of what a real process prints, uses run_cli.
    `timeout` is accepted for run_cli's signature and not enforced in-process.

    An exception the CLI did not handle lands in stderr as its traceback, as it would from a real
    process, so "no Traceback in stderr" assertions keep their meaning."""
    from click.testing import CliRunner

    from diagnose.cli import main

    with contextlib.chdir(REPO):  # run_cli's working directory
        result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=True)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    proc = CliResult(int(result.exit_code), result.stdout, stderr)
    data = None
    if check_json and "--json" in args and proc.stdout.strip():
        data = json.loads(proc.stdout)
    return proc, data


def run_cli_report(*args, timeout=180) -> tuple[subprocess.CompletedProcess, Report | None]:
    """run_cli, with the --json output read as the typed Report (None when there is none)."""
    proc, data = run_cli(*args, timeout=timeout)
    return proc, None if data is None else report_of(data)


def invoke_cli_report(*args, timeout=None) -> tuple[CliResult, Report | None]:
    """invoke_cli, with the --json output read as the typed Report (None when there is none)."""
    proc, data = invoke_cli(*args, timeout=timeout)
    return proc, None if data is None else report_of(data)


def marker_line(path: Path, tag: str) -> int:
    """Line number of the `# diagnose-fixture: TAG` marker in a workload."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if f"# diagnose-fixture: {tag}" in line:
            return number
    raise AssertionError(f"{path.name} has no marker {tag!r}")


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """pytest caches each test module it rewrites (its asserts) as a .pyc beside it, unless bytecode
    writing is off: where PYTHONDONTWRITEBYTECODE is set (CI's machines), each pytest process of
    scripts/test.sh (two xdist workers, then the serial pass) rewrote all ~200 test modules again,
    6 of the 8.6 s its collection took. Written while collecting; the tests then run with the
    environment's setting, as the processes they start do."""
    off = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = off


_SLOW_DIRS = (REPO / "tests" / "integration", REPO / "tests" / "browser")


def pytest_collection_modifyitems(items):
    """Every test under tests/integration and tests/browser is `slow` (real processes, py-spy,
    Chromium), so `pytest -m "not slow"` is the fast tier and a new file there joins the slow
    tier without remembering a marker."""
    for item in items:
        if any(Path(item.path).is_relative_to(d) for d in _SLOW_DIRS):
            item.add_marker(pytest.mark.slow)


# Files whose tests assert on the same session capture (SessionCaptures below): under
# pytest-xdist they run on one worker, so the capture is made once there too.
SHARED_CAPTURES = {
    "tests/integration/test_verdicts.py": "workload-attaches",
    "tests/integration/test_wait_analysis.py": "workload-attaches",
    "tests/integration/test_report_safety.py": "hostile-names",
    "tests/browser/test_hostile_names.py": "hostile-names",
}


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, when it is installed
def pytest_xdist_make_scheduler(config, log):
    """Under `pytest -n N` (scripts/test.sh), each file's tests go to one worker, so a
    module-scoped fixture (one real attach asserted on by the file's tests) is made once; files
    of one SHARED_CAPTURES group go to one worker together. (pytest-xdist's own `loadgroup`
    cannot be used: it renames node ids in a way pytest 9 no longer reads.) Spreading the tests
    of files that share nothing one by one was tried: the pass took 744 s instead of 620-651 s,
    with more attaches side by side on the two cores, and a starved attach mislabelled a role."""
    from xdist.scheduler import LoadScopeScheduling

    class FileGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return SHARED_CAPTURES.get(path, path)

    return FileGroupScheduling(config, log)


# The output directories of the captures the running test used (SessionCaptures.get), reset
# before each test: a shared capture made by an earlier test is still this test's evidence.
_CAPTURES_USED: list[Path] = []


@pytest.fixture(autouse=True)
def _captures_used_by_this_test():
    _CAPTURES_USED.clear()
    yield


@pytest.fixture
def keep_raw_off(monkeypatch):
    """Attaches at their defaults: for a test of exactly which files a default attach writes."""
    monkeypatch.setenv(KEEP_RAW_ENV, "0")


def kept_recordings(directories: list[Path]) -> list[str]:
    """The replay command of every recording kept under `directories` (one per window: its
    .procfs.json names the base)."""
    commands = []
    for directory in directories:
        for procfs in sorted(directory.rglob("*.procfs.json")):
            base = str(procfs).removesuffix(".procfs.json")
            parts = ["diagnose analyze", f"{base}*.chrometrace.json", "--procfs", str(procfs)]
            for flag, suffix in (("--native-profile", ".native.speedscope.json"),
                                 ("--tasks", ".tasks.json"), ("--sampling", ".sampling.json")):
                if Path(base + suffix).exists():
                    parts += [flag, base + suffix]
            commands.append(" ".join(parts))
    return commands


def _save_artifacts(nodeid: str, directories: list[Path]) -> Path | None:
    root = os.environ.get(ARTIFACTS_ENV)
    if not root:
        return None
    target = Path(root) / re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)[:150]
    for index, directory in enumerate(directories):
        shutil.copytree(directory, target / f"{index}-{directory.name}", dirs_exist_ok=True)
    return target


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that attached names the recordings it kept (and copies them where
    DIAGNOSE_TEST_ARTIFACTS says): the failure can be replayed offline."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed or report.when not in ("setup", "call"):
        return
    directories = list(dict.fromkeys(_CAPTURES_USED))
    tmp = getattr(item, "funcargs", {}).get("tmp_path")
    if isinstance(tmp, Path):
        directories.append(tmp)
    commands = kept_recordings([d for d in directories if d.exists()])
    if not commands:
        return
    saved = _save_artifacts(item.nodeid, [d for d in directories if d.exists()])
    report.sections.append(("recordings kept", "\n".join(
        ["Replay the attach(es) offline:", *commands]
        + ([f"copied to {saved}"] if saved is not None else []))))


class SessionCaptures:
    """Expensive captures (a real attach, a server under load) made once per test session and
    shared by every test that asserts on the same one: same workload, arguments and window give
    the same key. Each test still makes every assertion it made on its own capture; only the
    capture is shared. Every caller gets its own deep copy, so no test sees another's edits."""

    def __init__(self, factory: pytest.TempPathFactory):
        self._factory = factory
        self._made: dict[tuple, Any] = {}
        self._dirs: dict[tuple, Path] = {}

    def get(self, key: tuple, make: Callable[[Path], Any]) -> Any:
        """make(a fresh output directory) the first time `key` is asked for; its result after."""
        if key not in self._made:
            out = self._factory.mktemp("capture")
            self._dirs[key] = out
            _CAPTURES_USED.append(out)  # before make: a capture that fails is evidence too
            self._made[key] = make(out)
        else:
            _CAPTURES_USED.append(self._dirs[key])
        return copy.deepcopy(self._made[key])


@pytest.fixture(scope="session")
def captures(tmp_path_factory) -> SessionCaptures:
    return SessionCaptures(tmp_path_factory)


@pytest.fixture
def out_dir(tmp_path):
    return tmp_path / "reports"


def report_of(data: Any) -> Report:
    """The typed Report of a report given as the model, a parsed .json report (run_cli's and
    invoke_cli's data), or the path of a .json report."""
    from diagnose.report.model import Report

    if isinstance(data, Report):
        return data
    if isinstance(data, (str, Path)):
        data = json.loads(Path(data).read_text())
    return Report.from_json(data)


def outcome(report: Report | dict, check_id: str) -> str:
    """A check's severity, or "not applicable": every check ends as exactly one of the two, so a
    check missing from the report fails here instead of passing as "no finding". `report` is the
    model or its parsed JSON."""
    typed = report_of(report)
    found = [str(f.severity) for f in typed.findings if f.id == check_id]
    skipped = [n.reason for n in typed.not_applicable if n.id == check_id]
    assert len(found) + len(skipped) == 1, (check_id, found, skipped)
    return found[0] if found else "not applicable"
