"""How scripts/test.sh splits the suite: the worker groups of pytest-xdist name real files, and
the second pass's marker is the one pytest knows."""

from __future__ import annotations

import re
from collections import Counter

from tests.conftest import INDEPENDENT_TESTS, REPO, SHARED_CAPTURES, scheduling_scope


def test_every_file_of_a_shared_capture_group_exists_and_shares_with_another():
    # a renamed file would silently leave its group and make the shared attach twice
    missing = [path for path in SHARED_CAPTURES if not (REPO / path).is_file()]
    assert missing == []
    alone = [group for group, files in Counter(SHARED_CAPTURES.values()).items() if files < 2]
    assert alone == []


def test_the_serial_marker_is_registered_and_the_script_runs_both_passes():
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'"serial: ', pyproject)
    script = (REPO / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert '-m "not serial"' in script and "-m serial" in script


def test_files_spread_test_by_test_share_no_capture_or_module_fixture():
    # spread over two workers, a shared capture or a module-scoped fixture would be made twice
    for path in sorted(INDEPENDENT_TESTS):
        text = (REPO / path).read_text(encoding="utf-8")
        assert path not in SHARED_CAPTURES, path
        assert "captures" not in text, path
        assert not re.search(r'scope="(module|package|session)"', text), path


def test_independent_tests_are_scheduled_one_by_one_and_other_files_whole():
    independent = next(iter(sorted(INDEPENDENT_TESTS)))
    assert scheduling_scope(f"{independent}::test_a[x]") == f"{independent}::test_a[x]"
    assert scheduling_scope("tests/integration/test_deadlock.py::test_b") == \
        "tests/integration/test_deadlock.py"
    grouped = next(iter(SHARED_CAPTURES))
    assert scheduling_scope(f"{grouped}::test_c") == SHARED_CAPTURES[grouped]
