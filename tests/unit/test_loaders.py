"""Profiles load from py-spy's formats; anything else is refused with a clear message."""

import json

import pytest

from diagnose.errors import BadProfile
from diagnose.model.loaders import load_collapsed, load_profile


def test_collapsed_stacks_with_thread_roots_load_per_thread():
    text = ("thread (101): req-0;loop (srv.py:10);predict (srv.py:20) 7\n"
            "thread (102): req-1;loop (srv.py:10);PyThread_acquire_lock_timed (libpython3.11.so.1.0) 3\n")
    profile = load_collapsed(text)
    assert {t.tid: t.name for t in profile.threads} == {101: "req-0", 102: "req-1"}
    assert profile.total_samples == 10
    assert profile.native  # a .so frame was present
    names = {f.function for f in profile.frames}
    assert names == {"loop", "predict", "PyThread_acquire_lock_timed"}


def test_evented_speedscope_profiles_are_refused(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"shared": {"frames": []},
                                "profiles": [{"type": "evented", "name": "x", "events": []}]}))
    with pytest.raises(BadProfile, match="only sampled"):
        load_profile(path)


def test_missing_file_is_a_bad_profile(tmp_path):
    with pytest.raises(BadProfile, match="no such file"):
        load_profile(tmp_path / "absent.json")
