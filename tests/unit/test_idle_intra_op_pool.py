"""An intra-op pool that never ran fans nothing out: scheduler_overhead counts only the native
threads that used a core over the window (Analysis.working_native_threads). A numpy import
creates OpenBLAS's threads whether or not a model large enough to split ever runs on them (an
image service whose PIL decode oversubscribes the cores was told "33 request threads each fan
out into a pool of ~5 intra-op threads" by its sleeping OpenBLAS threads)."""

from __future__ import annotations

import dataclasses

from diagnose.checks import scheduler_overhead
from diagnose.checks.scheduler_overhead import Settings
from diagnose.model.os_summary import ProcThread
from tests.unit.test_recorded_verdicts import analyse_recording

NATIVE_TIDS = (900001, 900002, 900003)


def with_native_threads(analysis, cpu_s: float):
    """`analysis` with three native threads (no Python frames) that used `cpu_s` each."""
    os_ = analysis.os
    threads = dict(os_.threads)
    for tid in NATIVE_TIDS:
        threads[tid] = ProcThread(tid=tid, comm="openblas", cpu_s=cpu_s, runqueue_wait_s=0.0,
                                  voluntary_ctx=10, involuntary_ctx=0, state_counts={"S": 30})
    return dataclasses.replace(analysis, os=dataclasses.replace(os_, threads=threads))


def test_sleeping_native_threads_are_not_a_working_pool():
    analysis, _ = analyse_recording("scheduler_overhead")
    idle = with_native_threads(analysis, cpu_s=0.0)
    assert idle.native_threads >= len(NATIVE_TIDS)
    assert idle.working_native_threads == analysis.working_native_threads


def test_native_threads_that_ran_are_a_working_pool():
    analysis, _ = analyse_recording("scheduler_overhead")
    busy = with_native_threads(analysis, cpu_s=0.5 * analysis.os.window_s)
    assert busy.working_native_threads == analysis.working_native_threads + len(NATIVE_TIDS)


def test_an_idle_pool_leaves_the_advice_on_the_request_threads():
    analysis, _ = analyse_recording("scheduler_overhead")
    idle = scheduler_overhead.run(with_native_threads(analysis, cpu_s=0.0), Settings())
    busy = scheduler_overhead.run(with_native_threads(analysis, cpu_s=0.5 * analysis.os.window_s),
                                  Settings())
    assert analysis.native_threads == 0  # the recording's own threads all run Python
    assert "intra-op" in busy.advice[0]
    assert busy.value("fix").value["knob"] != "request_threads"
    assert "intra-op" not in idle.advice[0]
    assert idle.value("fix").value == {"knob": "request_threads",
                                       "value": int(analysis.os.usable_cores)}
