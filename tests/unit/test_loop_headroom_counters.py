"""The event loop's headroom bounds async_wait's gain: a loop out of its selector all the time
serves no more. Out of its selector is serving only while it runs or blocks in the app's code; a
loop waiting for a core or for the GIL is out of its selector too, and its /proc counters deny
that it served. CI once read a capacity limiter's gain as 1.00x: "the event loop was out of its
selector 100% of its samples" while the loop's work is a few percent of a core."""

from __future__ import annotations

from types import SimpleNamespace

from diagnose.checks.async_wait import little_gain, loop_load
from diagnose.report.model.sections import Callback, EventLoop
from diagnose.vocab import CallbackKind


def analysis_with(*loops: EventLoop) -> SimpleNamespace:
    return SimpleNamespace(event_loops=loops)


def test_a_loop_the_counters_show_on_a_cpu_briefly_keeps_the_counters_share():
    load = loop_load(analysis_with(EventLoop(busy_share=1.0, idle_share=0.0, cpu_share_os=0.08)))
    assert load is not None and load.sampled == 1.0 and load.serving == 0.08
    assert little_gain(0.9, load.serving) > 9  # the waits' 10x, not the 1.00x the samples gave


def test_a_loop_blocked_in_the_apps_call_is_serving_whatever_its_cpu():
    blocked = Callback(function="handler", file="app.py", line=3, share=0.7,
                       kind=CallbackKind.BLOCKING_CALL)
    load = loop_load(analysis_with(EventLoop(busy_share=0.9, cpu_share_os=0.1, callbacks=(blocked,))))
    assert load is not None and load.serving == 0.8
    assert little_gain(0.9, load.serving) == 1.25


def test_without_counters_the_samples_share_is_the_bound():
    load = loop_load(analysis_with(EventLoop(busy_share=0.5, cpu_share_os=None)))
    assert load is not None and load.serving == 0.5


def test_the_busiest_loop_bounds_the_gain():
    quiet = EventLoop(tid=1, busy_share=0.9, cpu_share_os=0.05)
    busy = EventLoop(tid=2, busy_share=0.6, cpu_share_os=0.6)
    load = loop_load(analysis_with(quiet, busy))
    assert load is not None and load.serving == 0.6 and loop_load(analysis_with()) is None
