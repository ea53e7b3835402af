"""A profile's stacks are classified once per innermost part that decided their state
(`classify_profile_stack`): every stack must still get exactly what `classify_stack` gives it
alone, and a state that rested on frames near the root is never lent to another stack."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnose.classify import state
from diagnose.classify.state import (FULL_SYMBOL_MARKERS, SHARED_SUFFIX_MAX, _ReadFrames,
                                     classify_profile_stack, classify_stack,
                                     every_stack_state)
from diagnose.samples.profile import Frame, Profile
from diagnose.readers.loaders import load_profile

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "recorded"
RECORDINGS = sorted(p for p in RECORDED.iterdir()
                    if p.name.endswith((".speedscope.json", ".chrometrace.json")))


def _alone(profile: Profile, sid: int, full_symbols: bool):
    return classify_stack([profile.frames[i] for i in profile.stacks[sid]], profile.native,
                          full_symbols)


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.name for p in RECORDINGS])
def test_every_recorded_stack_gets_the_state_it_gets_alone(path: Path):
    profile = load_profile(path)
    full_symbols = any(f.function in FULL_SYMBOL_MARKERS for f in profile.frames)
    # in reverse too: a stack first met through another's innermost frames must still match
    for sid in [*range(len(profile.stacks)), *reversed(range(len(profile.stacks)))]:
        assert classify_profile_stack(profile, sid, full_symbols) == _alone(profile, sid, full_symbols)



@pytest.mark.parametrize("path", RECORDINGS, ids=[p.name for p in RECORDINGS])
def test_every_stack_at_once_gets_the_state_it_gets_alone(path: Path):
    profile = load_profile(path)  # loading already classified some stacks one by one
    full_symbols = any(f.function in FULL_SYMBOL_MARKERS for f in profile.frames)
    table = every_stack_state(profile, full_symbols)
    assert len(table.site) == len(profile.stacks)
    for sid in range(len(profile.stacks)):
        assert table.of(sid) == _alone(profile, sid, full_symbols)
        assert classify_profile_stack(profile, sid, full_symbols) == table.of(sid)


def test_every_stack_at_once_on_a_fresh_profile_and_after_new_stacks():
    wait = [_py("Queue.get", "/usr/lib/python3.11/queue.py", 171),
            _py("Condition.wait", "/usr/lib/python3.11/threading.py", 320),
            _native("lock_PyThread_acquire_lock"), _native("PyThread_acquire_lock_timed")]
    leaf = [_py("normalize", "prep.py", 9), _native("PyNumber_Multiply")]
    stacks = [[_py("main"), _py("handle"), *leaf], [_py("worker_loop", "pool.py", 5), *wait],
              [_py("serve", "server.py", 2), _py("worker_loop", "pool.py", 5), *wait],
              [_py("main"), _py("serve"), _py("route"), _py("handle"), *leaf], [], leaf[1:]]
    profile, ids = _profile(*stacks)
    table = every_stack_state(profile, False)
    assert [table.of(sid) for sid in ids] == [_alone(profile, sid, False) for sid in ids]
    more = profile.intern_stack(tuple(profile.intern_frame(f) for f in [_py("other"), *leaf]))
    table = every_stack_state(profile, False)  # a stack added since: the table grows
    assert table.of(more) == _alone(profile, more, False)


def _profile(*stacks: list[Frame], native: bool = True) -> tuple[Profile, list[int]]:
    profile = Profile(native=native)
    ids = [profile.intern_stack(tuple(profile.intern_frame(f) for f in stack)) for stack in stacks]
    return profile, ids


def _py(function: str, file: str = "app.py", line: int = 1) -> Frame:
    return Frame(function, file, line, False)


def _native(function: str, file: str = "libpython3.11.so") -> Frame:
    return Frame(function, file, 0, True)


def test_stacks_sharing_a_running_leaf_share_its_state_with_their_own_site(monkeypatch):
    leaf = [_py("normalize", "prep.py", 9), _native("PyNumber_Multiply")]
    short = [_py("main"), _py("handle"), *leaf]
    deep = [_py("main"), _py("serve"), _py("route"), _py("handle"), *leaf]
    profile, (a, b) = _profile(short, deep)
    calls = []
    monkeypatch.setattr(state, "classify_stack",
                        lambda *args: calls.append(args) or classify_stack(*args))
    first = classify_profile_stack(profile, a, False)
    second = classify_profile_stack(profile, b, False)
    assert len(calls) == 1  # the deeper stack was not classified again
    assert (first.state, second.state) == (_alone(profile, a, False).state,
                                           _alone(profile, b, False).state)
    # the site is the stack's own innermost Python frame, not the first stack's index
    assert (first.site, second.site) == (2, 4)
    assert second == _alone(profile, b, False)


def test_a_state_read_down_to_the_root_is_not_lent_to_a_longer_stack():
    # an idle pool worker: "waits for work" holds because the wait is the thread's own outermost
    # loop, which is read from the root; the same frames under a request handler are a real wait
    wait = [_py("Queue.get", "/usr/lib/python3.11/queue.py", 171),
            _py("Condition.wait", "/usr/lib/python3.11/threading.py", 320),
            _native("lock_PyThread_acquire_lock"), _native("PyThread_acquire_lock_timed")]
    idle = [_py("worker_loop", "pool.py", 5), *wait]
    busy = [_py("serve", "server.py", 2), _py("handle", "server.py", 7),
            _py("worker_loop", "pool.py", 5), *wait]
    profile, (a, b) = _profile(idle, busy)
    states = [classify_profile_stack(profile, sid, False) for sid in (a, b)]
    assert states == [_alone(profile, a, False), _alone(profile, b, False)]
    assert [s.state.value for s in states] == ["idle", "lock"]
    frames = _ReadFrames([profile.frames[i] for i in profile.stacks[a]])
    classify_stack(frames, True, False)
    assert frames.lowest == 0  # read from the root: kept for its own stack only


def test_reads_are_tracked_for_indexes_slices_and_walks():
    frames = _ReadFrames([_py(str(i)) for i in range(6)])
    assert frames.lowest == 6
    frames[4]
    assert frames.lowest == 4
    frames[-3]
    assert frames.lowest == 3
    frames[5:]
    assert frames.lowest == 3
    frames[1:2]
    assert frames.lowest == 1
    frames[4:2]  # empty: reads nothing
    assert frames.lowest == 1
    list(frames)
    assert frames.lowest == 0
    assert SHARED_SUFFIX_MAX >= 2
