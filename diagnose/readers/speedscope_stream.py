"""Reads a py-spy speedscope file in bounded memory: the file is read in chunks, each profile's
"samples" and "weights" arrays are parsed as they stream by, and only the rest of the document
(the shared frames, each profile's name and type: kilobytes) is left for the JSON parser.

In each chunk the samples are cut apart at their brackets by `bytes.split` and numbered by
pandas' hash table (`pd.factorize`, the first of each run of equal samples only), all in C: no
Python code runs per sample. Each distinct
sample text is checked (digits and commas only, as JSON writes them) and parsed once, into the
tuple of frame indices it names; a profile's samples are kept as one int32 array of those
tuples' ids. The weights are numbered the same way and each distinct number parsed once.

Anything this reader does not expect inside those arrays (another number format, deeper
nesting, a stray character) raises `Unexpected`, and the caller reads the file the general way,
whose JSON parser says precisely what is wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pandas as pd

_KEY = re.compile(rb'"(samples|weights)"\s*:\s*\[')
_KEY_TAIL = 256  # bytes kept back at a chunk's end: a key split across two chunks is still found
LIFTED = "@@diagnose-lifted:"
_SAMPLES_END = re.compile(rb"\]\s*\]")  # a sample's closing bracket, then the array's
_PY_SPY_END = b']],"weights":['  # how py-spy ends a profile's samples
_EMPTY_END = re.compile(rb"\s*\]")  # the array closes right here
_SPACE = b" \t\r\n"
_SAMPLE_TEXT = re.compile(rb"(?:(?:0|[1-9][0-9]{0,8})(?:,(?:0|[1-9][0-9]{0,8}))*)?")
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


class Unexpected(Exception):
    """Not the shape this reader parses: read the file the general way."""


class Truncated(Exception):
    """The file ended inside a profile's samples or weights."""


@dataclass
class RawSamples:
    """One profile's samples: per sample, the id of its frame-index sequence in the reader's
    `raw_stacks` (ids in order of first appearance in the file)."""

    ids: np.ndarray


@dataclass
class Lifted:
    skeleton: bytes  # the document with each array replaced by a placeholder string
    arrays: list  # per placeholder: RawSamples or the float64 weights
    raw_stacks: list[tuple[int, ...]] = field(default_factory=list)


class _Interner:
    def __init__(self) -> None:
        self.by_text: dict[bytes, int] = {}
        self.raw_stacks: list[tuple[int, ...]] = []

    def samples(self, content: bytes) -> np.ndarray:
        """Stack ids of the complete samples in `content` (`[1,2],[3]`, perhaps a leading comma
        and whitespace)."""
        ids = self.samples_if_valid(content)
        if ids is None:
            raise Unexpected("samples that are not lists of frame indices")
        return ids

    def samples_if_valid(self, content: bytes) -> np.ndarray | None:
        """`samples(content)`, or None (and nothing interned) when `content` is not only
        complete samples: it then holds the array's end, or something this reader does not
        parse."""
        content = _without_space(content)
        # the samples are cut apart in place: no copy of the chunk without its comma or brackets
        start = 1 if content.startswith(b",") else 0
        if not content.rstrip(b","):  # (a chunk's samples end with a bracket: not copied)
            return np.empty(0, dtype=np.int32)
        if not (content.startswith(b"[", start) and content.endswith(b"]")):
            return None
        texts_in_order = content.split(b"],[")
        texts_in_order[0] = texts_in_order[0][start + 1:]
        texts_in_order[-1] = texts_in_order[-1][:-1]
        codes, texts = _factorize_runs(np.array(texts_in_order, dtype=object))
        del texts_in_order
        distinct = texts.tolist()
        # every new text checked before any is interned (once per distinct sample text)
        new = [text for text in distinct if text not in self.by_text]
        if not all(_SAMPLE_TEXT.fullmatch(text) for text in new):
            return None
        for text in new:
            self.by_text[text] = len(self.raw_stacks)
            self.raw_stacks.append(tuple(int(k) for k in text.split(b",")) if text else ())
        ids = np.array([self.by_text[text] for text in distinct], dtype=np.int32)
        return ids[codes]


def _factorize_runs(texts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`pd.factorize(texts)`, hashing only the first text of each run of equal ones: a thread
    holds one stack for several samples in a row, and comparing a text with the one before
    costs a fraction of hashing it."""
    starts = np.ones(len(texts), dtype=bool)
    np.not_equal(texts[1:], texts[:-1], out=starts[1:])
    at = np.flatnonzero(starts)
    codes, distinct = pd.factorize(texts[at])
    return np.repeat(codes, np.diff(np.append(at, len(texts)))), distinct


def _without_space(content: bytes) -> bytes:
    """`content` without JSON whitespace; py-spy writes none: then not copied."""
    if any(space in content for space in _SPACES):
        return content.translate(None, _SPACE)
    return content


_SPACES = tuple(bytes([c]) for c in _SPACE)


def _weights(content: bytes) -> np.ndarray:
    content = _without_space(content).strip(b",")
    if not content:
        return np.empty(0, dtype=np.float64)
    first = content.split(b",", 1)[0]
    n = content.count(b",") + 1
    if len(content) == n * (len(first) + 1) - 1 and (first + b",") * (n - 1) + first == content:
        # py-spy weighs every sample of a profile alike: one number, compared in C, not split
        if not _NUMBER.fullmatch(first):
            raise Unexpected("weights that are not plain numbers")
        # one number, held once: a read-only view of it repeated (8 bytes, not 8 a sample)
        return np.broadcast_to(np.float64(first), (n,))
    codes, texts = pd.factorize(np.array(content.split(b","), dtype=object))
    values = np.empty(len(texts), dtype=np.float64)
    for i, text in enumerate(texts.tolist()):  # once per distinct number
        if not _NUMBER.fullmatch(text):
            raise Unexpected("weights that are not plain numbers")
        values[i] = float(text)
    return values[codes]


def _joined(pieces: list[np.ndarray]) -> np.ndarray:
    """A profile's weights from its chunks' pieces: still one number held once when every
    piece is that same number repeated."""
    pieces = [p for p in pieces if len(p)]
    if not pieces:
        return np.empty(0, np.float64)
    first = pieces[0][0]
    if all(p.strides == (0,) and p[0] == first for p in pieces):
        return np.broadcast_to(first, (sum(len(p) for p in pieces),))
    return np.concatenate(pieces)


def lift(chunks: Iterator[bytes], first: bytes = b"") -> Lifted:
    """Reads the document from `first` and then `chunks`, lifting out every profile's samples
    and weights. Raises Unexpected or Truncated.

    The buffer is read at a position that moves forward (regular expressions searched from it,
    each piece copied out once): the rest of a 16 MiB chunk is copied only when the next chunk
    is appended to it."""
    interner = _Interner()
    skeleton: list[bytes] = []
    arrays: list = []
    buf = first
    pos = 0
    done = False

    def more() -> bytes:
        nonlocal done
        for chunk in chunks:
            if chunk:
                return chunk
        done = True
        return b""

    while True:
        match = _KEY.search(buf, pos)
        if match is None:
            if done:
                skeleton.append(buf[pos:])
                break
            keep = max(pos, len(buf) - _KEY_TAIL)
            skeleton.append(buf[pos:keep])
            buf, pos = buf[keep:] + more(), 0
            continue
        kind = match.group(1)
        skeleton.append(buf[pos:match.start()])
        skeleton.append(b'"%s":"%s%d"' % (kind, LIFTED.encode(), len(arrays)))
        pos = match.end()
        if kind == b"samples":
            parts: list[np.ndarray] = []
            while True:
                closed = _EMPTY_END.match(buf, pos)  # no sample (left) before the closing bracket
                if closed is not None:
                    pos = closed.end()
                    break
                # py-spy's layout first: the array's end found by a literal search and the
                # samples before it proved complete by their checked texts (any other end
                # before it would leave a bracket in some text), or, where that end is not in
                # the buffer, all of it up to the last sample; else the search for any end
                quick = buf.find(_PY_SPY_END, pos)
                cut = quick + 1 if quick >= 0 else max(buf.rfind(b"]", pos) + 1, pos)
                ids = interner.samples_if_valid(buf[pos:cut]) if quick >= 0 or not done else None
                if ids is not None:
                    parts.append(ids)
                    if quick >= 0:
                        pos = quick + 2
                        break
                    buf, pos = buf[cut:] + more(), 0
                    continue
                end = _SAMPLES_END.search(buf, pos)
                if end is not None:
                    parts.append(interner.samples(buf[pos:end.start() + 1]))
                    pos = end.end()
                    break
                cut = max(buf.rfind(b"]", pos) + 1, pos)  # after the last complete sample
                parts.append(interner.samples(buf[pos:cut]))
                if done:
                    raise Truncated("the file ends inside a profile's samples")
                buf, pos = buf[cut:] + more(), 0
            arrays.append(RawSamples(np.concatenate(parts) if parts else np.empty(0, np.int32)))
        else:
            weights: list[np.ndarray] = []
            while True:
                end_at = buf.find(b"]", pos)
                if end_at >= 0:
                    weights.append(_weights(buf[pos:end_at]))
                    pos = end_at + 1
                    break
                cut = max(buf.rfind(b",", pos) + 1, pos)
                weights.append(_weights(buf[pos:cut]))
                if done:
                    raise Truncated("the file ends inside a profile's weights")
                buf, pos = buf[cut:] + more(), 0
            arrays.append(_joined(weights))
    return Lifted(b"".join(skeleton), arrays, interner.raw_stacks)
