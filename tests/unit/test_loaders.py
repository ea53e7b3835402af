"""Profiles load from py-spy's formats; anything else is refused with a clear message."""

import json

import numpy as np
import pandas as pd
import pytest

from diagnose.errors import BadProfile
from diagnose.readers import speedscope_stream
from diagnose.readers.loaders import load_collapsed, load_profile


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


def _same_profile(a, b):
    assert a.threads and a.stacks  # two empty profiles would compare equal too
    assert a.stacks == b.stacks and a.frames == b.frames
    for x, y in zip(a.threads, b.threads, strict=True):
        assert (x.tid, x.name) == (y.tid, y.name)
        assert (x.stack_ids == y.stack_ids).all() and (x.weights == y.weights).all()


@pytest.mark.parametrize("indent", [None, 2])
def test_fast_sample_parsing_matches_plain_json_parsing(tmp_path, indent):
    from tests.conftest import RECORDED
    from diagnose.readers.loaders import load_speedscope

    data = json.loads((RECORDED / "lock_contention.speedscope.json").read_text())
    path = tmp_path / "p.speedscope.json"
    path.write_text(json.dumps(data, indent=indent))
    _same_profile(load_profile(path), load_speedscope(data))


def test_sample_referring_to_a_missing_frame_is_a_bad_profile(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"shared": {"frames": [{"name": "f", "file": "a.py", "line": 1}]},
                                "profiles": [{"type": "sampled", "name": "x", "samples": [[0, 7]],
                                              "weights": [0.01]}]}))
    with pytest.raises(BadProfile, match="frames that do not exist"):
        load_profile(path)


_LINES = ("thread (9): b;loop (srv.py:10);spin (srv.py:11) 2\n"
          "thread (8): a;loop (srv.py:10);wait (srv.py:12) 5\n"
          "thread (9): b-renamed;loop (srv.py:10) 1\n"
          "thread (9): b;loop (srv.py:10);spin (srv.py:11) 4\n"
          "process 3: x;thread (8): a;loop (srv.py:10);wait (srv.py:12) 1\n")


def test_identical_collapsed_lines_of_a_thread_are_one_row_with_their_counts_summed():
    profile = load_collapsed(_LINES)
    assert [(t.tid, t.name) for t in profile.threads] == [(9, "b"), (8, "a"), (0, "all threads")]
    spin, wait, loop = (profile.stacks.index(s) for s in [(0, 1), (0, 2), (0,)])
    by_thread = {t.tid: list(zip(t.stack_ids.tolist(), t.counts.tolist())) for t in profile.threads}
    # thread 9's two `spin` lines summed, in the order rows first appear
    assert by_thread[9] == [(spin, 6), (loop, 1)]
    assert by_thread[8] == [(wait, 5)]
    # under a process root the thread pseudo-frame is an ordinary frame of "all threads"
    assert len(by_thread[0]) == 1 and profile.total_samples == 13


def test_a_collapsed_file_read_in_slices_reads_as_one_piece(monkeypatch):
    from diagnose.readers import collapsed

    whole = load_collapsed(_LINES * 50)
    monkeypatch.setattr(collapsed, "SLICE_CHARS", 7)
    sliced = load_collapsed(_LINES * 50)
    assert sliced.frames == whole.frames and sliced.stacks == whole.stacks
    assert [(t.tid, t.name, t.stack_ids.tolist(), t.counts.tolist()) for t in sliced.threads] == \
        [(t.tid, t.name, t.stack_ids.tolist(), t.counts.tolist()) for t in whole.threads]
    assert whole.total_samples == 13 * 50


@pytest.mark.parametrize("samples", [
    b"[[0,1],[],[2],[0,1],[10,2,0]]",  # as py-spy writes them
    b"[ [0, 1],\n [ ], [2] ,[0,1] ,\t[10,2,0] ]\n",  # whitespace, also between the closing brackets
])
def test_streamed_samples_read_the_same_wherever_the_chunks_are_cut(samples: bytes) -> None:
    doc = b'{"profiles":[{"samples":%s,"weights":[1,1,1,1,1]}],"shared":{"frames":[]}}' % samples
    whole = speedscope_stream.lift(iter([]), doc)
    expected = [whole.raw_stacks[i] for i in whole.arrays[0].ids]
    assert expected == [(0, 1), (), (2,), (0, 1), (10, 2, 0)]
    for cut in range(1, len(doc)):
        lifted = speedscope_stream.lift(iter([doc[cut:]]), doc[:cut])
        assert [lifted.raw_stacks[i] for i in lifted.arrays[0].ids] == expected
        assert lifted.skeleton == whole.skeleton


def test_numbering_runs_of_samples_numbers_them_as_hashing_each_one() -> None:
    texts = np.array([b"1,2", b"1,2", b"3", b"1,2", b"", b"", b"3", b"4"], dtype=object)
    codes, distinct = speedscope_stream._factorize_runs(texts)
    expected_codes, expected_distinct = pd.factorize(texts)
    assert codes.tolist() == expected_codes.tolist()
    assert list(distinct) == list(expected_distinct)
