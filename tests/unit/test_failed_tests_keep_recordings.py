"""A live test that fails names the recordings its attaches kept (and copies them to CI's
artifacts), so its failure can be replayed offline with `diagnose analyze` and turned into a
unit test; a test that passes names nothing. Run on a tiny suite through pytest's own tester."""

from __future__ import annotations

import pytest

from tests.conftest import REPO

pytest_plugins = ["pytester"]

SUITE = '''
from pathlib import Path

def _recorded(directory: Path) -> None:
    base = directory / "diagnose-42-20261206-101500"
    for suffix in (".chrometrace.json", ".procfs.json", ".native.speedscope.json", ".sampling.json",
                   ".json"):
        Path(str(base) + suffix).write_text("{}")

def test_fails_after_an_attach(tmp_path):
    _recorded(tmp_path)
    assert False, "the verdict moved"

def test_passes_after_an_attach(tmp_path):
    _recorded(tmp_path)
'''


@pytest.fixture
def tiny_suite(pytester, monkeypatch):
    pytester.makeconftest("from tests.conftest import pytest_runtest_makereport, "
                          "_captures_used_by_this_test  # noqa: F401")
    pytester.makepyfile(test_tiny=SUITE)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return pytester


def test_a_failed_test_prints_the_replay_command_of_its_kept_recording(tiny_suite, tmp_path, monkeypatch):
    artifacts = tmp_path / "artifacts"
    monkeypatch.setenv("DIAGNOSE_TEST_ARTIFACTS", str(artifacts))
    result = tiny_suite.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert out.count("Replay the attach(es) offline:") == 1, out
    result.stdout.fnmatch_lines(["*diagnose analyze */diagnose-42-20261206-101500*.chrometrace.json "
                                 "--procfs */diagnose-42-20261206-101500.procfs.json "
                                 "--native-profile */diagnose-42-20261206-101500.native.speedscope.json "
                                 "--sampling */diagnose-42-20261206-101500.sampling.json"])
    (copied,) = artifacts.iterdir()
    assert "test_fails_after_an_attach" in copied.name
    assert sorted(p.name for p in copied.rglob("*.procfs.json")) == ["diagnose-42-20261206-101500.procfs.json"]
