"""Every file the tool writes goes through outputs/files.py's `write_atomically`: a temporary file
beside its place, renamed into it, removed when the write fails."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from diagnose.collect.asyncio_tasks import binary, layout_probe
from diagnose.outputs import files

REPO = Path(__file__).resolve().parents[2]
# A rename into place, or a temporary file named by hand: the one writer's own moves.
HAND_MADE = re.compile(r"\bos\.(replace|rename)\(|\.(replace|rename)\(\s*[A-Z_]+\s*\)|\.tmp\b")


@pytest.fixture
def written(monkeypatch) -> list[Path]:
    """The paths written through the one writer while the test runs (the writes still happen)."""
    paths: list[Path] = []
    real = files.write_atomically

    def spy(path, produce):
        paths.append(path)
        real(path, produce)

    monkeypatch.setattr(files, "write_atomically", spy)
    return paths


def test_no_module_but_the_writer_renames_a_temporary_file_into_place():
    writer = REPO / "diagnose" / "outputs" / "files.py"
    for path in sorted((REPO / "diagnose").rglob("*.py")):
        if path != writer:
            assert not HAND_MADE.search(path.read_text(encoding="utf-8")), path


def test_the_caches_are_written_by_the_one_writer(tmp_path, monkeypatch, written):
    monkeypatch.setattr(layout_probe, "CACHE_FILE", tmp_path / "cache" / "layout.json")
    layout_probe._to_disk("key", layout_probe.TaskLayout(8, 16, 24, 32, 40))
    assert written == [tmp_path / "cache" / "layout.json"]
    assert json.loads(written[0].read_text())["layouts"]["key"]["fut_state"] == 8
    assert sorted(p.name for p in written[0].parent.iterdir()) == ["layout.json"]


def test_a_file_that_cannot_be_written_leaves_nothing_behind(tmp_path):
    def fail(tmp: Path) -> None:
        tmp.write_text("partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(files.WriteFailed) as failed:
        files.write_atomically(tmp_path / "python-symbols.json", fail)
    assert failed.value.reason == "No space left on device"
    assert list(tmp_path.iterdir()) == []


def test_the_symbol_cache_is_written_by_the_one_writer(tmp_path, monkeypatch, written):
    monkeypatch.setattr(binary, "SYMBOL_CACHE", tmp_path / "python-symbols.json")
    found = binary._Symbols(runtime=4096, version=11, is_exec=False, first_load_vaddr=0)
    monkeypatch.setattr(binary, "_parse_symbols", lambda path: found)
    binary._symbols_of.cache_clear()
    try:
        assert binary._symbols_of("/usr/lib/libpython3.11.so", "test-key") == found
    finally:
        binary._symbols_of.cache_clear()
    assert written == [tmp_path / "python-symbols.json"]
    assert json.loads(written[0].read_text())["test-key"]["runtime"] == 4096
    assert [p.name for p in tmp_path.iterdir()] == ["python-symbols.json"]
