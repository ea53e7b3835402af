"""Synthetic stacks: an intra-op pool's threads compute the model beside the thread that calls
it; no Python sample sees them, the kernel's counters do (checks/compute_bound.py)."""

from __future__ import annotations

from dataclasses import replace

from diagnose.checks import compute_bound
from diagnose.checks.engine import load_check_settings
from tests.unit.test_pipeline_bottleneck_gain import ON_LOCK, RUN
from tests.unit.test_roles_and_counters import BLAS, LIB, build, native, process_os, py

SETTINGS = load_check_settings()["compute_bound"]

SOURCE = '''import queue

def batcher_loop(intake):
    while True:
        batch = collect(intake)
        logits = model.forward(batch)
        publish(batch, logits)


def request_loop(intake):
    while True:
        intake.put(1)
'''


def batching_server(tmp_path, pool_cpu_s: float | None, kernel_leaf: str = "sgemm_kernel_HASWELL"):
    """A batcher whose running samples are half the model (in OpenBLAS, leaf `kernel_leaf`) and
    half its own Python; 4 request threads waiting on it; a native pool thread with
    `pool_cpu_s` of CPU (none when None)."""
    src = str(tmp_path / "server.py")
    (tmp_path / "server.py").write_text(SOURCE)
    forward = [RUN, py("batcher_loop", src, 6), py("Model.forward", src, 6), native("cblas_sgemm", BLAS),
               native(kernel_leaf, BLAS)]
    collect = [RUN, py("batcher_loop", src, 5), py("collect", src, 5)]
    put = [RUN, py("request_loop", src, 12), py("Queue.put", f"{LIB}/queue.py", 140),
           py("Condition.wait", f"{LIB}/threading.py", 320)]
    threads = {3001: ([(forward, 100), (collect, 100)], 4.0)}
    for tid in range(3002, 3006):
        threads[tid] = ([(put + ON_LOCK, 200)], 0.1)
    (view,) = build([(300, None, ("python", "server.py"), threads)])
    if pool_cpu_s is None:
        return view.analysis
    # the pool's thread: in /proc, never in a Python sample
    cpu = {tid: seconds for tid, (_, seconds) in threads.items()} | {3100: pool_cpu_s}
    return replace(view.analysis, os=process_os(cpu))


def test_the_pool_threads_cpu_counts_as_the_models_compute(tmp_path):
    alone = compute_bound.run(batching_server(tmp_path, None), SETTINGS)
    pooled = compute_bound.run(batching_server(tmp_path, 4.0), SETTINGS)
    assert alone.evidence["model_share_of_busy"] == pooled.evidence["model_share_of_busy"] == 0.5
    assert "model_share_with_pool" not in alone.evidence
    # (0.5 x 4 CPU-s of the batcher + 4 CPU-s of the pool) / 8 CPU-s
    assert pooled.evidence["model_share_with_pool"] == 0.75
    assert pooled.score > alone.score
    assert "intra-op pool thread it calls (4.0 CPU-s, the kernel)" in pooled.summary
    # the interval is the folded share's too: narrower than the batcher's samples alone give
    assert pooled.score_range[1] - pooled.score_range[0] < alone.score_range[1] - alone.score_range[0]


def test_native_threads_the_caller_never_hands_work_to_are_not_the_models(tmp_path):
    # the batcher's native samples pass through no pool library's kernel: the busy native
    # thread beside it is something else's (a tokenizer's, a server's)
    found = compute_bound.run(batching_server(tmp_path, 4.0, kernel_leaf="blas_thread_server"),
                              SETTINGS)
    assert "model_share_with_pool" not in found.evidence
