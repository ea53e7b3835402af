"""The streamed reader finds a profile's samples' end by py-spy's layout (`]],"weights":[`)
and proves the samples before it complete by their checked texts; any other layout falls back
to the search for any end. Every layout reads as the JSON parser reads it, wherever the chunks
are cut, with the stacks numbered in order of first appearance."""

from __future__ import annotations

import json

import numpy as np
import pytest

from diagnose.readers import speedscope_stream

SAMPLES = [b"[[0,1],[],[2],[0,1],[10,2,0]]", b"[[3],[3],[0,1],[4]]"]
LAYOUTS = {
    "py-spy": b'{"profiles":[{"samples":%s,"weights":[1,1,1,1,1]},{"samples":%s,"weights":[2,2,2,2]}],'
              b'"shared":{"frames":[]}}',
    "weights first": b'{"profiles":[{"weights":[1,1,1,1,1],"samples":%s},{"weights":[2,2,2,2],"samples":%s}],'
                     b'"shared":{"frames":[]}}',
    "spaced": b'{"profiles": [{"samples": %s, "weights": [1, 1, 1, 1, 1]}, {"samples": %s,\n"weights": [2,2,2,2]}],'
              b'"shared": {"frames": []}}',
    # py-spy's end appears only after another array that ends the samples first
    "another array between": b'{"profiles":[{"samples":%s,"x":[[9]],"weights":[1,1,1,1,1]},'
                             b'{"samples":%s,"weights":[2,2,2,2]}],"shared":{"frames":[]}}',
}


def _read(doc: bytes, cuts: tuple[int, ...]) -> speedscope_stream.Lifted:
    bounds = (0, *cuts, len(doc))
    pieces = [doc[a:b] for a, b in zip(bounds, bounds[1:])]
    return speedscope_stream.lift(iter(pieces[1:]), pieces[0])


def _expected(doc: bytes) -> tuple[list[list[tuple[int, ...]]], list[tuple[int, ...]]]:
    """Each profile's samples as the JSON parser reads them, and the distinct stacks in order of
    first appearance in the file."""
    profiles = [[tuple(s) for s in p["samples"]] for p in json.loads(doc)["profiles"]]
    first_seen = list(dict.fromkeys(s for p in profiles for s in p))
    return profiles, first_seen


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_layout_reads_as_json_wherever_the_chunks_are_cut(layout: str) -> None:
    doc = LAYOUTS[layout] % tuple(SAMPLES)
    profiles, first_seen = _expected(doc)
    whole = _read(doc, ())
    for cuts in [()] + [(c,) for c in range(1, len(doc))] + [(c, c + 7) for c in range(1, len(doc) - 7, 5)]:
        lifted = _read(doc, cuts)
        samples = [a for a in lifted.arrays if isinstance(a, speedscope_stream.RawSamples)]
        assert [[lifted.raw_stacks[i] for i in a.ids] for a in samples] == profiles
        assert lifted.raw_stacks == first_seen
        assert lifted.skeleton == whole.skeleton
        weights = [a for a in lifted.arrays if not isinstance(a, speedscope_stream.RawSamples)]
        assert [list(w) for w in weights] == [[1.0] * 5, [2.0] * 4]


@pytest.mark.parametrize("samples", [b"[[0,1],[x]]", b"[[0,1],[1.5]]", b"[[0,[1]]]"])
def test_samples_this_reader_does_not_parse_are_still_refused(samples: bytes) -> None:
    doc = b'{"profiles":[{"samples":%s,"weights":[1,1]}],"shared":{"frames":[]}}' % samples
    with pytest.raises(speedscope_stream.Unexpected):
        _read(doc, ())


def test_content_holding_an_end_interns_nothing() -> None:
    interner = speedscope_stream._Interner()
    assert interner.samples_if_valid(b"[5,6],[7]],\"x\":[[8]") is None
    assert interner.raw_stacks == [] and interner.by_text == {}
    ids = interner.samples_if_valid(b"[7],[5,6],[7]")
    assert ids is not None and ids.tolist() == [0, 1, 0]
    assert interner.raw_stacks == [(7,), (5, 6)]
    assert np.array_equal(interner.samples(b",[5,6]"), [1])
