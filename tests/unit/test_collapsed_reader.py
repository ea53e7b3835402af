"""The collapsed-stack reader finds a stack by the text of its frames (another thread's line with
the same frames is the same stack, not split again): it must give exactly the frames, stacks,
threads and counts of a plain line-by-line reading, on well-formed and odd lines alike."""

from __future__ import annotations

import numpy as np
import pytest

from diagnose.samples.profile import Profile
from diagnose.readers import collapsed
from diagnose.readers.collapsed import _root, load_collapsed, parse_frame


def _plain(text: str) -> tuple[Profile, list[tuple[int, str, list[int], list[int]]]]:
    """The line-by-line reading: each line's frames split and looked up, its stack interned."""
    profile = Profile(source="collapsed", instants="none")
    frame_ids: dict[str, int] = {}
    rows: dict[int, dict[int, int]] = {}
    names: dict[int, str] = {}
    for line in text.splitlines():
        stack_text, _, count_text = line.rstrip().rpartition(" ")
        if not count_text or not stack_text or not count_text.isdigit():
            continue
        parts = stack_text.split(";")
        root = _root(parts[0])
        frames = []
        for part in parts[root.skip:]:
            if part not in frame_ids:
                frame = parse_frame(part)
                profile.native = profile.native or frame.native
                frame_ids[part] = profile.intern_frame(frame)
            frames.append(frame_ids[part])
        sid = profile.intern_stack(tuple(frames))
        names.setdefault(root.tid, root.name)
        thread = rows.setdefault(root.tid, {})
        thread[sid] = thread.get(sid, 0) + int(count_text)
    return profile, [(tid, names[tid], list(r), list(r.values())) for tid, r in rows.items()]


def _same_as_plain(text: str) -> None:
    expected, threads = _plain(text)
    profile = load_collapsed(text)
    assert profile.frames == expected.frames
    assert profile.stacks == expected.stacks
    assert profile.native == expected.native
    assert [(t.tid, t.name, t.stack_ids.tolist(), t.counts.tolist())
            for t in profile.threads] == threads


_ODD = [
    # the same frames on two threads' lines, and again under another root text
    "thread (1): a;f (m.py:1);g (m.py:2) 3\nthread (2): b;f (m.py:1);g (m.py:2) 4\n"
    "f (m.py:1);g (m.py:2) 5\n",
    # blank lines, trailing whitespace, Windows line ends, a line without a count
    "\n\nthread (1): a;f (m.py:1) 2  \r\n\r\nthread (1): a;f (m.py:1)\nthread (2): b;f (m.py:1) 1\t\n",
    # a thread line with no frames, one with an empty frame after the root, empty frames inside
    "thread (1): a 7\nthread (1): a; 2\nthread (2): b;;f (m.py:1);; 3\nthread (2): b 1\n",
    # frames with spaces and semicolon-free parentheses, native frames, hex thread ids
    "thread (0x1f): w;Model.predict (/srv/a b/m.py:9);0x7f00 (/lib/libc.so.6) 2\n"
    "thread (31): w;Model.predict (/srv/a b/m.py:9) 1\n",
    # a process pseudo-frame, a root that is a real frame, counts that are not numbers
    "process 3: x;thread (8): a;f (m.py:1) 1\nmain (app.py:3);f (m.py:1) 2\n"
    "thread (8): a;f (m.py:1) x\nthread (8): a;f (m.py:1) 1.5\n",
    # a frame text that is a line's rest elsewhere, and a thread pseudo-frame inside a stack
    "thread (1): a;f (m.py:1);thread (2): b 1\nthread (2): b;f (m.py:1);thread (2): b 2\n",
]


@pytest.mark.parametrize("text", _ODD)
def test_odd_lines_read_as_line_by_line(text):
    _same_as_plain(text)


def test_a_deep_stack_read_as_line_by_line():
    deep = ";".join(f"f{i} (/srv/deep.py:{i + 1})" for i in range(10_000))
    _same_as_plain("".join(f"thread ({100 + k}): w{k};{deep} {k + 1}\n" for k in range(3)))


def test_stacks_shared_across_slices_read_as_one_piece(monkeypatch):
    lines = "".join(f"thread ({k % 4}): t;f{k % 7} (m.py:1);g{k % 5} (m.py:2) {k}\n"
                    for k in range(1, 200))
    _same_as_plain(lines)
    monkeypatch.setattr(collapsed, "SLICE_CHARS", 50)  # a stack met in one slice, seen again later
    _same_as_plain(lines)


def test_a_file_of_one_line_repeated_stays_one_row():
    profile = load_collapsed("thread (1): a;f (m.py:1) 2\n" * 100_000)
    assert len(profile.stacks) == 1
    assert [t.counts.tolist() for t in profile.threads] == [[200_000]]
    assert np.array_equal(profile.threads[0].stack_ids, [0])
