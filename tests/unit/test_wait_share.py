"""checks/wait_share.py: the skeleton lock_contention, pool_wait and logging_lock share."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from diagnose.checks import pool_wait
from diagnose.checks.base import Site, ramp, serial_gain
from diagnose.checks.wait_share import WaitShare, line_of, wait_finding, where
from diagnose.vocab import POOL_KINDS, WaitKind
from diagnose.report.model.sections import WaitSite


def _analysis(*waits: WaitSite) -> SimpleNamespace:
    samples = pd.DataFrame({"count": [600, 400]})
    return SimpleNamespace(waits=list(waits), os=None, request_threads=[1, 2, 3, 4], chains=(),
                           request_samples=lambda: samples)


QUEUE = WaitSite(kind=WaitKind.QUEUE, label="queue.get", function="borrow", file="/srv/app/pool.py",
                 line=12, thread_seconds=3.0, threads=4, max_concurrent=3, share=0.3, max_holders=2)
SEMAPHORE = WaitSite(kind=WaitKind.SEMAPHORE, label="Semaphore.acquire", function="limit",
                     file="/srv/app/gate.py", line=7, thread_seconds=1.0, threads=2, share=0.1)
LOCK = WaitSite(kind=WaitKind.LOCK, label="Lock", function="step", file="/srv/app/model.py", line=3,
                thread_seconds=5.0, share=0.5)


def test_two_kinds_sum_and_others_are_left_out():
    measured = WaitShare.of(_analysis(LOCK, QUEUE, SEMAPHORE), POOL_KINDS)
    assert measured.waits == (QUEUE, SEMAPHORE)
    assert (measured.share, measured.thread_seconds) == (0.3 + 0.1, 4.0)
    assert measured.top is QUEUE
    kept = WaitShare.of(_analysis(QUEUE, SEMAPHORE), POOL_KINDS, lambda w: w.function != "borrow")
    assert kept.waits == (SEMAPHORE,) and kept.top is SEMAPHORE
    none = WaitShare.of(_analysis(LOCK), POOL_KINDS)
    assert (none.waits, none.share, none.top) == ((), 0, None)


def test_the_top_site_in_words():
    assert line_of(QUEUE) == "app/pool.py:12"
    assert where(QUEUE) == "app/pool.py:12 (borrow)"
    assert where(QUEUE, QUEUE.label) == "app/pool.py:12 (borrow, queue.get)"


def test_the_finding_rests_on_the_share():
    analysis = _analysis(QUEUE, SEMAPHORE)
    measured = WaitShare.of(analysis, POOL_KINDS)
    settings = pool_wait.Settings()
    finding = wait_finding("pool_wait", settings, analysis, measured, "pool_wait_share", "words",
                           {"pool_wait_share": measured.share}, "waiting for the pool")
    assert finding.score == round(ramp(measured.share, settings.low, settings.high))
    gain, basis = serial_gain(measured.share, analysis, "waiting for the pool")
    assert (finding.predicted_gain, finding.gain_basis) == (round(gain, 2), basis)
    assert finding.samples == 1000 and finding.basis_key == "pool_wait_share"
    assert [s.line for s in finding.sites] == [12, 7]
    assert finding.gain_interval is not None
    # The check's own gain: no gain interval from the share; leading sites come first.
    lead = Site("flock", "/srv/app/io.py", 40, 0.2)
    own = wait_finding("pool_wait", settings, analysis, measured, "pool_wait_share", "words",
                       {"pool_wait_share": measured.share}, "", gain=(1.5, "its own"), lead=[lead])
    assert (own.predicted_gain, own.gain_basis, own.gain_interval) == (1.5, "its own", None)
    assert [s.line for s in own.sites][:1] == [40]


def test_pool_wait_sums_both_pool_kinds():
    finding = pool_wait.run(_analysis(QUEUE, SEMAPHORE), pool_wait.Settings())
    evidence = finding.evidence
    assert evidence["pool_wait_share"] == 0.4 and evidence["pool_wait_thread_seconds"] == 4.0
    assert evidence["acquire_site"] == "app/pool.py:12" and evidence["pool_size_estimate"] == 2
    assert finding.summary == ("40% of request-thread time waits for a pooled resource at "
                               "app/pool.py:12 (borrow, queue.get); about 2 held at once (the pool size?)")
