"""The cyclic garbage collector is paused while a profile is read, analysed and written, and
left as it was found afterwards, whether the analysis succeeded or failed."""

from __future__ import annotations

import gc

import pytest

from diagnose.errors import BadProfile
from diagnose.run import pipeline
from diagnose.run.gc_pause import collector_paused
from tests.conftest import RECORDED


def test_the_collector_is_paused_within_and_restored_after_even_on_error():
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with collector_paused():
            assert not gc.isenabled()
            with collector_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()  # a nested pause leaves the outer one paused
            raise RuntimeError
    assert gc.isenabled()


def test_a_paused_caller_stays_paused():
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_analyze_reads_and_checks_with_the_collector_paused(tmp_path, monkeypatch):
    seen = []
    load, checks = pipeline.load_profile, pipeline.run_service_checks

    def spy_load(*args, **kwargs):
        seen.append(("load", gc.isenabled()))
        return load(*args, **kwargs)

    def spy_checks(*args, **kwargs):
        seen.append(("checks", gc.isenabled()))
        return checks(*args, **kwargs)

    monkeypatch.setattr(pipeline, "load_profile", spy_load)
    monkeypatch.setattr(pipeline, "run_service_checks", spy_checks)
    pipeline.from_file(RECORDED / "lock_contention.speedscope.json", tmp_path, None)
    assert seen == [("load", False), ("checks", False)] and gc.isenabled()
    bad = tmp_path / "bad.txt"
    bad.write_text("not a profile\n")
    with pytest.raises(BadProfile):
        pipeline.from_file(bad, tmp_path, None)
    assert gc.isenabled()
