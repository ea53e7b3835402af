"""Synthetic stacks: queue operations and stage links, pool kernels vs synchronisation, ranking."""

from __future__ import annotations

import numpy as np

from diagnose.checks.arbiter import rank
from diagnose.checks.base import Finding
from diagnose.model.native_pools import pool_split
from diagnose.samples.profile import Frame, Profile, ThreadTrack
from diagnose.model.structure import loop_frame, queue_op, source_queue_ops

LIB = "/usr/lib/python3.11"
BLAS = "/srv/venv/lib/python3.11/site-packages/numpy.libs/libscipy_openblas64_-32a4b2a6.so"


def py(function, file, line=1):
    return Frame(function, file, line, False)


def native(function, lib):
    return Frame(function, lib, 0, True)


def test_a_stage_blocked_putting_into_a_full_queue_is_a_put_on_that_queue(tmp_path):
    source = tmp_path / "stages.py"
    source.write_text("def decode_stage(intake, decoded):\n"
                      "    while True:\n"
                      "        item = intake.get()\n"
                      "        decoded.put(item)\n")
    frames = [py("Thread.run", f"{LIB}/threading.py"), py("decode_stage", str(source), 4),
              py("Queue.put", f"{LIB}/queue.py", 140), py("Condition.wait", f"{LIB}/threading.py", 320)]
    assert loop_frame(frames) == 1
    op, name, caller = queue_op(frames)
    assert (op, name, caller) == ("put", "decoded", 1)
    assert source_queue_ops(frames[1]) == ({"intake"}, {"decoded"})


def test_pool_worker_loop_is_the_function_its_work_items_run():
    frames = [py("Thread.run", f"{LIB}/threading.py"), py("_worker", f"{LIB}/concurrent/futures/thread.py"),
              py("_WorkItem.run", f"{LIB}/concurrent/futures/thread.py"), py("handle", "/srv/app.py")]
    assert loop_frame(frames) == 3


def _profile(stacks_and_counts):
    profile = Profile(native=True)
    ids = []
    for frames, count in stacks_and_counts:
        sid = profile.intern_stack(tuple(profile.intern_frame(f) for f in frames))
        ids += [sid] * count
    profile.threads.append(ThreadTrack(7, "req", np.array(ids, dtype=np.int32), np.full(len(ids), 0.1)))
    return profile


def test_blas_caller_spinning_in_inner_thread_counts_as_pool_synchronisation():
    call = [py("Model.forward", "/srv/m.py", 9)]
    profile = _profile([(call + [native("inner_thread", BLAS)], 30),
                        (call + [native("inner_thread", BLAS), native("sched_yield", "/lib/libc.so.6")], 10),
                        (call + [native("sgemm_kernel_SKYLAKEX", BLAS)], 10)])
    (split,) = pool_split(profile)
    assert (split.library, split.knob) == ("OpenBLAS", "OPENBLAS_NUM_THREADS")
    assert (split.sync_samples, split.kernel_samples) == (40, 10)
    assert split.sync_share == 0.8 and 0.6 < split.sync_share_low < 0.8


def test_stacks_outside_native_pools_are_not_counted():
    profile = _profile([([py("work", "/srv/w.py")], 5)])
    assert pool_split(profile) == []


def _finding(check_id, score, gain):
    return Finding(check_id, check_id, score, "critical" if score >= 75 else "info", "", {},
                   predicted_gain=gain)


def test_saturated_findings_are_ordered_by_what_fixing_them_buys_not_by_score():
    order = {"lock_contention": 0, "scheduler_overhead": 1, "compute_bound": 2}.__getitem__
    order_of = lambda f: order(f.id)  # noqa: E731
    ranked = rank([_finding("lock_contention", 100, 1.0), _finding("compute_bound", 98, 1.0),
                   _finding("scheduler_overhead", 97, 3.4)], order_of)
    assert [f.id for f in ranked] == ["scheduler_overhead", "lock_contention", "compute_bound"]


def test_findings_that_predict_no_gain_follow_by_score_and_findings_under_info_come_last():
    order = {"a": 0, "b": 1, "c": 2, "d": 3}.__getitem__
    order_of = lambda f: order(f.id)  # noqa: E731
    # a, a warning that predicts 9x, leads; b and c predict nothing and follow by score; d (20,
    # under the info line) shows no problem and comes last whatever it predicts.
    ranked = rank([_finding("a", 40, 9.0), _finding("b", 60, 1.0), _finding("c", 80, 1.0),
                   _finding("d", 20, 5.0)], order_of)
    assert [f.id for f in ranked] == ["a", "c", "b", "d"]
    # Without a finding that predicts a gain, those that predict nothing still follow by score.
    ranked = rank([_finding("b", 60, 1.0), _finding("d", 20, 5.0), _finding("c", 80, 1.0)], order_of)
    assert [f.id for f in ranked] == ["c", "b", "d"]
