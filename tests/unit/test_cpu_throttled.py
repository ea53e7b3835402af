"""cpu_throttled on synthetic OS summaries: not applicable without a quota, nothing when the
quota is never hit, and a quota that throttles names itself, its gain and the pools' size."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from diagnose.checks import cpu_throttled
from diagnose.checks.base import NotApplicable
from diagnose.checks.registry import CHECKS
from diagnose.checks.settings import merged
from diagnose.model.os_summary import ProcessOS
from tests.replay import replay

SETTINGS = merged()[cpu_throttled.ID]


def _os(quota=0.5, periods=60, throttled=56, throttled_s=9.0, cpu_s=3.0, window=6.0, cores=2,
        runnable=4.0, idle=1.4, **kw) -> ProcessOS:
    return ProcessOS(window_s=window, cores=cores, cpu_quota_cores=quota, threads_max=5, cpu_s=cpu_s,
                     cpu_utilization=1.0, runqueue_wait_s=20.0, runqueue_ratio=6.0,
                     mean_runnable=runnable, involuntary_ctx_per_s=100.0, voluntary_ctx_per_s=10.0,
                     observer_stop_share=0.0, rss_start=None, rss_end=None, rss_slope_bytes_per_s=None,
                     rss_fit_r2=None, machine_idle_cores=idle, throttle_periods=periods,
                     throttled_periods=throttled, throttled_s=throttled_s, cpu_cgroup="v1:/q", **kw)


def _run(os_):
    return cpu_throttled.run(SimpleNamespace(os=os_), SETTINGS)


def test_it_comes_before_scheduler_overhead_in_the_causal_order():
    ids = [c.id for c in CHECKS]
    assert ids.index("cpu_throttled") < ids.index("scheduler_overhead")


def test_not_applicable_without_a_quota_or_its_counters():
    assert isinstance(_run(None), NotApplicable)
    no_quota = _run(_os(quota=None))
    assert isinstance(no_quota, NotApplicable) and "no cgroup CPU quota" in no_quota.reason
    assert isinstance(_run(_os(periods=None, throttled=None, throttled_s=None)), NotApplicable)


def test_a_quota_never_hit_scores_nothing():
    finding = _run(_os(quota=1.5, throttled=0, throttled_s=0.0, cpu_s=2.0))
    assert not isinstance(finding, NotApplicable)
    assert finding.score == 0 and finding.predicted_gain == 1.0


def test_a_quota_that_throttles_names_itself_its_gain_and_the_pools_size():
    finding = _run(_os())
    assert not isinstance(finding, NotApplicable)
    assert finding.score == 100 and finding.severity == "critical"
    ev = finding.evidence
    assert ev["cgroup_cpu_quota_cores"] == 0.5 and ev["affinity_cores"] == 2 and ev["usable_cores"] == 0.5
    assert ev["throttled_period_share"] == pytest.approx(56 / 60, abs=1e-4)
    assert ev["throttled_s"] == 9.0 and ev["throttled_cores"] == 1.5
    assert ev["runnable_per_core"] == 8.0  # 4 runnable threads on half a core
    # ran 0.5 cores, 1.5 cores' worth throttled, capped by 2 cores and 0.5 + 1.4 idle: 1.9 / 0.5
    assert finding.predicted_gain == pytest.approx(3.8)
    assert "conservative" in finding.gain_basis
    assert ev["fix"] == {"knob": "cpu_quota_cores", "value": 2}
    assert ev["pool_threads_for_quota"] == 1
    assert "raise the cpu quota from 0.5 to 2 cores" in finding.advice[0].lower()
    assert "OMP_NUM_THREADS=1" in finding.advice[1] and "torch.set_num_threads(1)" in finding.advice[1]
    assert "not the quota" in finding.advice[1]
    assert finding.levers and finding.levers[0].gain == pytest.approx(3.8)
    assert "throttled_period_share" in finding.intervals  # over the 60 periods


def test_pools_round_the_quota_up_and_the_gain_stays_within_the_cores():
    assert [cpu_throttled.pool_size(q) for q in (0.5, 1.0, 1.5, 2.0, 3.2)] == [1, 1, 2, 2, 4]
    finding = _run(_os(quota=1.5, cores=8, cpu_s=9.0, throttled_s=60.0, idle=None))
    assert not isinstance(finding, NotApplicable)
    assert finding.evidence["pool_threads_for_quota"] == 2
    assert finding.predicted_gain == pytest.approx(8 / 1.5, abs=0.01)  # no more than 8 cores
    assert finding.evidence["fix"] == {"knob": "cpu_quota_cores", "value": 8}


def test_rarely_throttled_scores_low():
    # 3 of 60 periods, 0.06 s: the quota is barely reached
    finding = _run(_os(quota=1.0, throttled=3, throttled_s=0.06, cpu_s=4.0))
    assert not isinstance(finding, NotApplicable)
    assert finding.score < 25


def test_a_machine_that_left_less_than_the_quota_hides_the_throttling_not_the_quota():
    # 0.4 cores run, none idle on the machine: 4 runnable threads on a 0.5-core quota ran out of
    # it in 8 of 40 periods for 0.1 s; the threads per core of quota say what the quota holds back
    finding = _run(_os(periods=40, throttled=8, throttled_s=0.1, cpu_s=1.6, window=4.0, idle=0.0))
    assert not isinstance(finding, NotApplicable)
    assert finding.score == 100 and finding.evidence["room_below_quota"] is True
    assert "other processes' load left it 0.40 cores" in finding.summary
    assert finding.predicted_gain == 1.0  # no idle core: raising the quota buys nothing today
    assert finding.evidence["fix"] == {"knob": "cpu_quota_cores", "value": 2}  # what 4 threads want


def test_with_room_under_the_quota_the_counters_alone_decide():
    # the same window with a core idle: the quota could have run out and did not, often
    finding = _run(_os(periods=40, throttled=8, throttled_s=0.1, cpu_s=1.6, window=4.0, idle=1.0))
    assert not isinstance(finding, NotApplicable)
    assert finding.score < 25 and finding.evidence["room_below_quota"] is False


def test_the_quota_leads_scheduler_overhead_on_a_machine_too_busy_to_throttle_it(tmp_path):
    """fixtures/recorded/cpu_quota_busy_machine: the quota fixture beside a busy loop while
    other attaches took the other core ran 0.40 of its 0.5 cores; it read scheduler_overhead."""
    report = replay("cpu_quota_busy_machine", "below_quota", tmp_path)
    assert report.verdict.primary == "cpu_throttled", report.verdict
    throttled = next(f for f in report.findings if f.id == "cpu_throttled")
    assert throttled.value("room_below_quota").value is True
    assert "other processes' load" in throttled.summary
