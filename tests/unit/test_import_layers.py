"""Imports run one way, top to bottom (issue 45; docs/architecture.md): the import-linter
contracts of pyproject.toml hold on the tree, a back-arrow breaks them, and scripts/import_graph.py
draws the same layers.

Run in a child process: the linter finds `diagnose` on the path from the directory it runs in
(the tree under test, or a copy of it), not the package this process imported."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO

if not os.environ.get("CI"):  # CI installs the test extra: there a missing linter fails
    pytest.importorskip("importlinter", reason="import-linter is in the test extra (pyproject.toml)")

LINT = ("from importlinter.cli import lint_imports; "
        "raise SystemExit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", LINT], cwd=root, capture_output=True, text=True,
                          timeout=300)


def _contract(contract_id: str) -> dict:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return next(c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == contract_id)


def test_the_import_contracts_hold():
    result = _lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_import_that_runs_back_up_breaks_the_layers(tmp_path):
    shutil.copytree(REPO / "diagnose", tmp_path / "diagnose",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    vocab = tmp_path / "diagnose" / "vocab.py"
    vocab.write_text(vocab.read_text(encoding="utf-8") + "\n\ndef _up():\n"
                     "    from diagnose.run import pipeline  # the bottom reaching the top\n"
                     "    return pipeline\n", encoding="utf-8")
    result = _lint(tmp_path)
    assert result.returncode != 0, result.stdout
    assert "diagnose.vocab -> diagnose.run.pipeline" in result.stdout


def test_the_graph_script_draws_the_contracts_layers():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import import_graph
    finally:
        sys.path.remove(str(REPO / "scripts"))
    layers = [tuple(part.strip() for part in layer.split("|"))
              for layer in _contract("layers")["layers"]]
    assert [tuple(sorted(layer)) for layer in import_graph.LAYERS] == [tuple(sorted(layer)) for layer in layers]
    counts, _ = import_graph.graph()
    assert counts, "no import read"
    assert import_graph.back_arrows(counts) == []
    assert import_graph.cycles(counts) == []
