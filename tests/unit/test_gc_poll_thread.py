"""The collector readers of a tree share one poll thread (collect/gc_state.py): each process
keeps its own record and pace, the thread ends with its last sampler. Read in-process: the
test's own interpreter is the target (its memory through /proc/self/mem, as root)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from diagnose.collect.gc_state import GcPollThread, GcStateSampler


def _poll_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "diagnose-gc"]


def _wait_until(condition, seconds: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


@pytest.fixture
def readable() -> None:
    probe = GcStateSampler(os.getpid())
    probe.start()
    _wait_until(lambda: probe.record.polls > 0 or probe.record.unreadable is not None)
    record = probe.finish()
    if record.unreadable is not None:
        pytest.skip(f"this interpreter's collector is not readable: {record.unreadable}")
    _wait_until(lambda: not _poll_threads())


def test_samplers_given_one_poll_thread_are_polled_by_that_thread_alone(readable) -> None:
    polls = GcPollThread()
    samplers = [GcStateSampler(os.getpid(), polls) for _ in range(3)]
    for sampler in samplers:
        sampler.start()
    assert _wait_until(lambda: all(s.record.polls >= 5 for s in samplers))
    assert len(_poll_threads()) == 1
    records = [s.finish() for s in samplers]
    for record in records:
        assert record.unreadable is None and record.failed_polls == 0, record
        assert record.polled_s > 0 and len(record.collections_last) == 3, record


def test_the_poll_thread_ends_with_its_last_sampler_and_starts_again_for_a_new_one(readable) -> None:
    polls = GcPollThread()
    first = GcStateSampler(os.getpid(), polls)
    first.start()
    assert _wait_until(lambda: first.record.polls >= 2)
    first.finish()
    assert _wait_until(lambda: not _poll_threads()), "the poll thread outlived its samplers"
    polls_then = first.record.polls
    second = GcStateSampler(os.getpid(), polls)
    second.start()
    assert _wait_until(lambda: second.record.polls >= 2)
    assert len(_poll_threads()) == 1
    second.finish()
    assert first.record.polls == polls_then, "a finished sampler was polled again"


def test_a_sampler_whose_window_opened_counts_only_the_polls_after_it(readable) -> None:
    sampler = GcStateSampler(os.getpid(), GcPollThread())
    sampler.start()
    assert _wait_until(lambda: sampler.record.polls >= 10)
    opened = time.monotonic()
    sampler.window_opened()
    assert _wait_until(lambda: sampler._restarted and sampler.record.polls >= 2)
    record = sampler.finish()
    since = time.monotonic() - opened
    # the polled time restarts at the window's opening: without it, the 0.2 s and more before
    assert 0 < record.polled_s <= since, (record, since)


def test_a_sampler_that_fails_unexpectedly_is_marked_unreadable_and_the_others_are_still_polled(
        readable, monkeypatch) -> None:
    from diagnose.collect import gc_state

    real = gc_state.locate
    calls = []

    def locate_failing_first(mem, pid):
        calls.append(pid)
        if len(calls) == 1:
            raise KeyError("runtime_interpreters_head")  # an offsets table missing a key
        return real(mem, pid)

    monkeypatch.setattr(gc_state, "locate", locate_failing_first)
    polls = GcPollThread()
    broken, healthy = GcStateSampler(os.getpid(), polls), GcStateSampler(os.getpid(), polls)
    broken.start()
    healthy.start()
    assert _wait_until(lambda: healthy.record.polls >= 5)
    assert "KeyError" in (broken.finish().unreadable or "")
    assert healthy.finish().unreadable is None
