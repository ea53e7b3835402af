"""Synthetic stacks: a lock in front of a BLAS pool that admits one caller at a time. The first
advice is the one-thread pool, and its figure is the calibrated half of the caller's wait in the
pool, with all of it as the upper bound (checks/lock_contention.py)."""

from __future__ import annotations

from dataclasses import replace

from diagnose.checks import lock_contention
from diagnose.checks.base import amdahl
from diagnose.checks.engine import load_check_settings
from tests.unit.test_roles_and_counters import (BLAS, HANDLER_COMPUTING, HANDLER_ON_LOCK, build, native,
                                                process_os)

SETTINGS = load_check_settings()["lock_contention"]
IN_POOL = HANDLER_COMPUTING + [native("cblas_sgemm", BLAS)]


def locked_model(pool_threads: int):
    """8 handlers queue on one lock; its holder's native samples in OpenBLAS are 80 waiting for
    the pool (inner_thread) and 20 in its kernel; `pool_threads` pool threads ran beside it."""
    threads = {4000 + i: ([(IN_POOL + [native("inner_thread", BLAS)], 10),
                           (IN_POOL + [native("sgemm_kernel_HASWELL", BLAS)], 3),
                           (HANDLER_ON_LOCK, 87)], 1.0) for i in range(8)}
    (view,) = build([(400, None, ("python", "server.py"), threads)])
    cpu = {tid: seconds for tid, (_, seconds) in threads.items()}
    cpu |= {4100 + i: 8.0 for i in range(pool_threads)}
    return replace(view.analysis, os=process_os(cpu))


def test_a_serializing_pool_is_sized_first_at_the_calibrated_half_of_its_wait():
    analysis = locked_model(pool_threads=1)
    (split,) = analysis.pool_splits
    found = lock_contention.run(analysis, SETTINGS)
    assert "OPENBLAS_NUM_THREADS=1" in found.advice[0]
    assert found.predicted_gain is not None
    assert round(found.predicted_gain, 2) == round(amdahl(lock_contention.SHED_OF_WAIT * split.sync_share_low), 2)
    assert f"at most {amdahl(split.sync_share_low):.2f}x (an upper bound)" in found.gain_basis
    assert found.gain_basis.startswith("calibrated:")


def test_without_pool_threads_the_library_serializes_nothing():
    # a library pinned to one thread: the lock is the lock, a pool of instances its advice
    found = lock_contention.run(locked_model(pool_threads=0), SETTINGS)
    assert "OPENBLAS_NUM_THREADS=1" not in found.advice[0]
    assert "thread pool" not in (found.gain_basis or "")
