"""The report page's script: its parts by view, joined into one inline script."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from diagnose.render.html import PAGE_SCRIPT, page_script
from tests.conftest import REPO

PAGE_DIR = REPO / "reports" / "static" / "page"
MAX_LINES = 800  # a file a reader can hold in mind; one view per file


def test_every_script_file_of_the_pages_is_a_part_and_none_is_over_800_lines():
    files = sorted(p.stem for p in PAGE_DIR.glob("*.js"))
    assert files == sorted(PAGE_SCRIPT)
    for js in (REPO / "reports").rglob("*.js"):
        lines = js.read_text(encoding="utf-8").count("\n")
        assert lines <= MAX_LINES, f"{js.relative_to(REPO)}: {lines} lines"


def test_the_parts_join_into_one_strict_function_that_runs_main_once():
    script = page_script()
    assert script.startswith("(function () {\n  'use strict';")
    assert script.rstrip().endswith("})();")
    assert script.count("function main()") == 1
    for part in PAGE_SCRIPT:
        assert (PAGE_DIR / f"{part}.js").read_text(encoding="utf-8") in script


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed: no syntax check")
def test_the_joined_script_parses(tmp_path):
    path = tmp_path / "page.js"
    path.write_text(page_script(), encoding="utf-8")
    result = subprocess.run(["node", "--check", str(path)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr


def test_every_part_is_type_checked():
    # `// @ts-check`: editors and TypeScript's checker (scripts/test.sh) check each part alone too
    for part in PAGE_SCRIPT:
        first = (PAGE_DIR / f"{part}.js").read_text(encoding="utf-8").splitlines()[0]
        assert first.strip() == "// @ts-check", part


TSC = REPO / "node_modules" / ".bin" / "tsc"


@pytest.mark.skipif(not TSC.exists(), reason="no node_modules/.bin/tsc: `npm ci` installs it")
def test_the_parts_pass_typescripts_checker():
    result = subprocess.run([str(TSC), "-p", str(PAGE_DIR), "--pretty", "false"],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
