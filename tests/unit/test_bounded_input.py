"""Bad input stays bounded: a file over the size cap, a truncated file, a stream of endless
identical lines and very deep stacks each get their one-line error or their report, never a
traceback or the memory of the whole input. The streamed speedscope reader reads the same
profile as the JSON parser, whatever its chunk size or layout. Generated inputs, in-process."""

from __future__ import annotations

import functools
import json
import os
import threading

import pytest

from diagnose.errors import BadProfile
from diagnose.readers import loaders
from diagnose.readers.loaders import load_profile, load_speedscope
from diagnose.run.pipeline import from_file
from tests.conftest import RECORDED

DEEP = 10_000


def _same(a, b):
    assert a.threads and a.stacks
    assert a.stacks == b.stacks and a.frames == b.frames
    for x, y in zip(a.threads, b.threads, strict=True):
        assert (x.tid, x.name, x.pid) == (y.tid, y.name, y.pid)
        assert x.stack_ids.dtype == y.stack_ids.dtype and (x.stack_ids == y.stack_ids).all()
        assert (x.weights == y.weights).all()
    assert (a.interval_s, a.native, a.waits_visible) == (b.interval_s, b.native, b.waits_visible)


@pytest.mark.parametrize("chunk", [7, 4096, 16 << 20])
@pytest.mark.parametrize("indent", [None, 2])
def test_streamed_speedscope_reads_what_json_reads(tmp_path, monkeypatch, chunk, indent):
    data = json.loads((RECORDED / "lock_contention.native.speedscope.json").read_text())
    path = tmp_path / "p.speedscope.json"
    path.write_text(json.dumps(data, indent=indent))
    monkeypatch.setattr(loaders, "read_chunks", functools.partial(loaders.read_chunks, chunk=chunk))
    streamed = loaders._load_streamed(path)
    assert streamed is not None  # read by the streaming reader, not the whole-file fallback
    _same(streamed, load_speedscope(data))


@pytest.mark.parametrize("weights", [[0.01] * 5, [0.01] * 4 + [0.011], [0.011] + [0.01] * 4,
                                     [0.5, 0.25, 0.5, 0.25, 0.5], [1e-05] * 5])
def test_streamed_weights_are_the_numbers_written(tmp_path, weights):
    # one repeated number is filled without splitting: a neighbour that merely starts or ends
    # like it must still be read as itself
    frames = [{"name": "f", "file": "a.py", "line": 1}]
    doc = {"shared": {"frames": frames}, "profiles": [
        {"type": "sampled", "name": 'Thread 7 "w"', "unit": "seconds", "startValue": 0,
         "endValue": 1, "samples": [[0]] * len(weights), "weights": weights}]}
    path = tmp_path / "w.speedscope.json"
    path.write_text(json.dumps(doc, separators=(",", ":")))
    streamed = loaders._load_streamed(path)
    assert streamed is not None
    assert streamed.threads[0].weights.tolist() == weights


def test_samples_of_another_shape_fall_back_to_the_json_reader(tmp_path):
    # a float where a frame index belongs: the streaming reader steps aside, json says what's wrong
    path = tmp_path / "p.json"
    path.write_text('{"shared": {"frames": [{"name": "f", "file": "a.py", "line": 1}]}, '
                    '"profiles": [{"type": "sampled", "name": "x", "samples": [[0.5]], "weights": [1]}]}')
    assert loaders._load_streamed(path) is None
    with pytest.raises(BadProfile):
        load_profile(path)


def test_a_file_over_the_cap_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.speedscope.json"
    with open(path, "wb") as fh:  # sparse: a billion lines' worth of size, no disk or memory
        fh.truncate(40 * 10**9)
    with pytest.raises(BadProfile, match=r"larger than a profile may be .*record a shorter window"):
        load_profile(path)


def test_an_endless_stream_of_identical_lines_is_cut_at_the_cap(tmp_path, monkeypatch):
    # `analyze <(py-spy ...)`: a pipe has no size; it is read one byte past the cap, then refused
    monkeypatch.setattr(loaders, "MAX_PROFILE_BYTES", 1 << 20)
    fifo = tmp_path / "stream"
    os.mkfifo(fifo)
    line = b"thread (7): w;loop (a.py:1);spin (a.py:2) 1\n"

    def write_forever():
        try:
            with open(fifo, "wb") as fh:
                while True:
                    fh.write(line * 1000)
        except (BrokenPipeError, OSError):
            pass

    writer = threading.Thread(target=write_forever, daemon=True)
    writer.start()
    with pytest.raises(BadProfile, match="larger than a profile may be"):
        load_profile(fifo)
    writer.join(timeout=5)


def test_many_identical_lines_make_one_stack(tmp_path):
    path = tmp_path / "same.txt"
    path.write_text("thread (7): w;loop (a.py:1);spin (a.py:2) 1\n" * 50_000)
    profile = load_profile(path)
    assert len(profile.stacks) == 1 and profile.total_samples == 50_000


@pytest.mark.parametrize("cut", [0.5, 0.99])
def test_a_truncated_speedscope_file_is_one_line_error(tmp_path, cut):
    text = (RECORDED / "lock_contention.speedscope.json").read_bytes()
    path = tmp_path / "cut.speedscope.json"
    path.write_bytes(text[:int(len(text) * cut)])
    with pytest.raises(BadProfile) as error:
        load_profile(path)
    message = str(error.value)
    assert "\n" not in message and "truncated" in message


@pytest.mark.parametrize("inside", ["samples", "weights"])
def test_a_streamed_file_cut_inside_its_arrays_is_one_line_error(tmp_path, monkeypatch, inside):
    # cut a few chunks in, inside the last profile's samples or weights: the streaming reader
    # itself says so (it does not hand the rest to the whole-file parser)
    data = json.loads((RECORDED / "lock_contention.native.speedscope.json").read_text())
    text = json.dumps(data, separators=(",", ":")).encode()
    start = text.rindex(f'"{inside}":['.encode()) + len(inside) + 4
    end = text.index(b"]]" if inside == "samples" else b"]", start)
    assert end - start > 64 and start > 4 * 512
    path = tmp_path / "cut.speedscope.json"
    path.write_bytes(text[:(start + end) // 2])
    monkeypatch.setattr(loaders, "read_chunks", functools.partial(loaders.read_chunks, chunk=512))
    with pytest.raises(BadProfile) as error:
        loaders._load_streamed(path)
    message = str(error.value)
    assert "\n" not in message and "truncated" in message and f"profile's {inside}" in message


def test_a_truncated_collapsed_file_still_loads_its_whole_lines(tmp_path):
    path = tmp_path / "cut.txt"
    path.write_text("thread (7): w;loop (a.py:1);spin (a.py:2) 5\nthread (7): w;loop (a.py:1);sp")
    profile = load_profile(path)
    assert profile.total_samples == 5


def _deep_frames():
    frames = [{"name": f"f{i}", "file": "/srv/deep.py", "line": i + 1} for i in range(DEEP)]
    frames.append({"name": "PyThread_acquire_lock_timed", "file": "/usr/lib/libpython3.11.so.1.0",
                   "line": 0})
    return frames


def test_very_deep_stacks_get_their_report(tmp_path):
    frames = _deep_frames()
    deep = list(range(DEEP))
    samples = [deep, deep + [DEEP], deep[:5000]] * 4
    profiles = [{"type": "sampled", "name": f'Thread {100 + k} "w{k}"', "unit": "seconds",
                 "startValue": 0, "endValue": 0.12, "samples": samples,
                 "weights": [0.01] * len(samples)} for k in range(3)]
    path = tmp_path / "deep.speedscope.json"
    path.write_text(json.dumps({"shared": {"frames": frames}, "profiles": profiles}))
    outputs = from_file(path, tmp_path / "out", None)
    assert outputs.report.verdict.primary
    assert outputs.html.is_file() and outputs.json.is_file()


def test_very_deep_collapsed_stacks_get_their_report(tmp_path):
    line = ";".join(f"f{i} (/srv/deep.py:{i + 1})" for i in range(DEEP))
    path = tmp_path / "deep.txt"
    path.write_text("".join(f"thread ({100 + k}): w{k};{line} 50\n" for k in range(3)))
    outputs = from_file(path, tmp_path / "out", None)
    assert outputs.report.verdict.primary
    assert outputs.html.is_file()


def test_stacks_with_any_marks_the_stacks_holding_a_marked_frame():
    from diagnose.samples.profile import Profile

    profile = Profile(stacks=[(), (0, 1), (2,), (), (1,), ()])
    assert profile.stacks_with_any([False, True, False]).tolist() == [False, True, False, False, True, False]
    profile.stacks.append((2, 0))  # stacks added later are seen
    assert profile.stacks_with_any([True, False, False]).tolist()[-1]
