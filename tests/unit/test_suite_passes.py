"""How scripts/test.sh splits the suite: the worker groups of pytest-xdist name real files, and
the second pass's marker is the one pytest knows."""

from __future__ import annotations

import re
from collections import Counter

from tests.conftest import REPO, SHARED_CAPTURES


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

