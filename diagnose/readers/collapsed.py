"""Reads py-spy's collapsed stacks (`py-spy record --format raw`): `root;frame;frame COUNT` per
line, no sample order.

A large recording has hundreds of thousands of distinct lines of a few frames each, so the
work per line is kept to a few string methods and one lookup of the text of its frames (the
same frames on another thread's line are not split and looked up again); everything else runs
once per distinct stack text, per distinct stack or per distinct frame text, over the file's
lines in slices (a file of millions of short lines never becomes one list of them all), with
pandas' hash tables and numpy doing the lookups. Identical lines of one thread are one row
(their counts summed): the format has no order, so a repeated line is the same samples written
twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from diagnose.errors import BadProfile
from diagnose.samples.profile import Frame, Profile, ThreadTrack
from diagnose.readers.frames import PROCESS_PSEUDO, THREAD_PSEUDO, is_native_frame, parse_tid

# collapsed frame: `name (file:line)` or `name (library.so)`
_COLLAPSED_FRAME = re.compile(r"^(.*) \(([^()]*?)(?::(\d+))?\)$", re.S)
# Text read per slice: its lines are split and dropped before the next slice is read.
SLICE_CHARS = 8 << 20


def parse_frame(text: str) -> Frame:
    match = _COLLAPSED_FRAME.match(text)
    if not match:
        return Frame(text, "", 0, is_native_frame(text, "", 0))
    name, file, line = match.group(1), match.group(2), int(match.group(3) or 0)
    return Frame(name, file, line, is_native_frame(name, file, line))


@dataclass(frozen=True)
class _Root:
    """What a line's first frame says: a thread pseudo-frame (its tid and name; skipped), a
    process pseudo-frame (all threads; skipped) or a real frame (all threads; kept)."""

    tid: int
    name: str
    skip: bool


def _root(text: str) -> _Root:
    match = THREAD_PSEUDO.match(text)
    if match:
        return _Root(parse_tid(match.group(1)), match.group(2) or "", True)
    return _Root(0, "all threads", PROCESS_PSEUDO.match(text) is not None)


@dataclass
class _Reader:
    profile: Profile
    lines: int = 0  # non-blank lines
    bad: int = 0  # non-blank lines that are not `stack COUNT`
    frame_ids: dict[str, int] = field(default_factory=dict)  # frame text -> frame id
    roots: dict[str, _Root] = field(default_factory=dict)
    # the text of a stack's frames (after a thread's pseudo-frame; None: no frames) -> stack id
    stack_of_text: dict[str | None, int] = field(default_factory=dict)
    # per line read: its thread's root, stack id and count (one array per slice)
    line_roots: list[list[_Root]] = field(default_factory=list)
    line_stacks: list[np.ndarray] = field(default_factory=list)
    line_counts: list[np.ndarray] = field(default_factory=list)

    def read(self, text: str) -> None:
        frame_ids, roots = self.frame_ids, self.roots
        intern = self.profile.intern_stack
        stack_of_text = self.stack_of_text
        line_roots: list[_Root] = []
        stacks, counts = [], []
        lines = bad = 0
        for line in text.splitlines():
            stack_text, _, count_text = line.rstrip().rpartition(" ")
            if not count_text:
                continue  # a blank line
            lines += 1
            if not stack_text or not count_text.isdigit():
                bad += 1
                continue
            first, more, rest = stack_text.partition(";")
            root = roots.get(first)
            if root is None:
                root = self._root(first)
            # the text of the stack's frames: the same text (another thread's line) is the
            # same stack, found without splitting and looking up its frames again
            frames_text = (rest if more else None) if root.skip else stack_text
            sid = stack_of_text.get(frames_text)
            if sid is None:
                parts = [] if frames_text is None else frames_text.split(";")
                try:
                    frames = tuple([frame_ids[p] for p in parts])
                except KeyError:
                    frames = tuple([self._frame(p) for p in parts])
                sid = stack_of_text[frames_text] = intern(frames)
            line_roots.append(root)
            stacks.append(sid)
            counts.append(int(count_text))
        self.lines += lines
        self.bad += bad
        self.line_roots.append(line_roots)
        self.line_stacks.append(np.array(stacks, dtype=np.int64))
        self.line_counts.append(np.array(counts, dtype=np.int64))

    def _root(self, text: str) -> _Root:
        root = self.roots.get(text)
        if root is None:
            root = self.roots[text] = _root(text)
        return root

    def _frame(self, text: str) -> int:
        fid = self.frame_ids.get(text)
        if fid is None:
            frame = parse_frame(text)
            self.profile.native = self.profile.native or frame.native
            fid = self.frame_ids[text] = self.profile.intern_frame(frame)
        return fid

    def tracks(self) -> list[ThreadTrack]:
        """One track per thread, threads and their rows in the order they first appear; the
        lines of one thread with the same stack are one row."""
        line_roots = [root for part in self.line_roots for root in part]
        stacks = np.concatenate(self.line_stacks)
        counts = np.concatenate(self.line_counts)
        thread_codes, thread_tids = pd.factorize(
            np.fromiter((r.tid for r in line_roots), dtype=np.int64, count=len(line_roots)))
        row_codes, keys = pd.factorize(thread_codes.astype(np.int64) * (int(stacks.max()) + 1) + stacks)
        first = _first_lines(row_codes, len(keys))
        summed = np.zeros(len(keys), dtype=np.int64)
        np.add.at(summed, row_codes, counts)
        row_thread = thread_codes[first]
        order = np.argsort(row_thread, kind="stable")  # rows already in first-seen order
        bounds = np.searchsorted(row_thread[order], np.arange(len(thread_tids) + 1))
        thread_first = _first_lines(thread_codes, len(thread_tids))
        out = []
        for k, tid in enumerate(thread_tids.tolist()):
            rows = order[bounds[k]:bounds[k + 1]]
            out.append(ThreadTrack(int(tid), line_roots[int(thread_first[k])].name,
                                   stacks[first[rows]].astype(np.int32),
                                   np.full(len(rows), self.profile.interval_s),
                                   counts=summed[rows], timed=False))
        return out


def _first_lines(codes: np.ndarray, n: int) -> np.ndarray:
    """For each of the `n` codes, the index of the first line that has it."""
    first = np.full(n, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    return first


def _slices(text: str):
    """The text in pieces of about SLICE_CHARS, each ending after a newline (a line is never
    cut; `\\r\\n` stays whole)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + SLICE_CHARS)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def load_collapsed(text: str, label: str = "profile") -> Profile:
    """Collapsed stacks (`py-spy record --format raw`): `a;b;c 12` per line, no sample order."""
    from diagnose.readers.visibility import assess_waits

    reader = _Reader(Profile(source="collapsed", instants="none"))
    for piece in _slices(text):
        reader.read(piece)
    if not reader.lines or reader.bad > reader.lines // 2:
        raise BadProfile(f"{label}: not a profile: expected a py-spy speedscope JSON file or "
                         f"collapsed stacks ('frame;frame;frame COUNT' per line)")
    profile = reader.profile
    profile.threads.extend(reader.tracks())
    assess_waits(profile)
    return profile
