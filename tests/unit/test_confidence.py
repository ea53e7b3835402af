"""Shares carry their sample counts and 95% intervals; thin evidence gives a low-confidence verdict."""

from diagnose.checks.base import make_finding
from diagnose.checks.spec import CheckSettings
from diagnose.checks.engine import verdict_for
from diagnose.model.confidence import MIN_SAMPLES, intervals_for, wilson
from diagnose.report.model import Interval
from diagnose.report.model.codec import decode


def test_wilson_interval_contains_the_share_and_narrows_with_samples():
    low_few, high_few = wilson(0.35, 40)
    low_many, high_many = wilson(0.35, 4000)
    assert low_few < 0.35 < high_few
    assert low_many < 0.35 < high_many
    assert (high_many - low_many) < (high_few - low_few) / 5


def test_wilson_at_the_edges_stays_inside_zero_and_one():
    assert wilson(1.0, 20)[1] == 1.0 and wilson(1.0, 20)[0] < 1.0
    assert wilson(0.0, 20)[0] == 0.0 and wilson(0.0, 20)[1] > 0.0


def test_only_share_keys_get_intervals():
    got = intervals_for({"lock_wait_share": 0.5, "threads_waiting": 4, "busy_samples": 900,
                         "stage_busy_share": 0.9, "estimated": True}, 812)
    assert set(got) == {"lock_wait_share", "stage_busy_share"}
    share = decode(Interval, got["lock_wait_share"])  # as the finding carries it
    assert share.samples == 812
    assert share.low < 0.5 < share.high


def _finding(samples):
    return make_finding("lock_contention", CheckSettings(title="Lock contention: x"), 100,
                        "95% of request-thread time waits on the lock", {"lock_wait_share": 0.95},
                        samples=samples)


def test_a_verdict_on_few_samples_says_low_confidence_and_is_not_critical():
    verdict = verdict_for((_finding(41),))
    assert verdict.headline.startswith("low confidence: 41 samples; sample longer")
    assert verdict.confidence == "low"
    assert verdict.severity == "warning"


def test_a_verdict_on_enough_samples_keeps_its_severity():
    verdict = verdict_for((_finding(MIN_SAMPLES * 10),))
    assert verdict.confidence == "ok"
    assert verdict.severity == "critical"
    assert "low confidence" not in verdict.headline


def test_a_profile_that_cannot_show_waits_gives_no_verdict_only_what_its_busy_time_shows():
    verdict = verdict_for((_finding(MIN_SAMPLES * 10),), hidden_waits="recorded without --idle")
    assert verdict.primary == "inconclusive"
    assert verdict.headline.startswith("Inconclusive: this profile cannot show waits (recorded without --idle)")
    assert "py-spy record --idle" in verdict.headline
    assert verdict.severity != "critical"


def _based(share: float, samples: int):
    from diagnose.checks.base import ScoreBasis

    return make_finding("lock_contention", CheckSettings(title="Lock contention: x"), 100 * share,
                        f"{share:.0%} of request-thread time waits on the lock",
                        {"lock_wait_share": share}, samples=samples,
                        basis=ScoreBasis("lock_wait_share", lambda s: 100 * s))


def test_a_share_known_tightly_from_few_samples_is_no_low_confidence():
    # 61 samples all waiting: 94-100%; a verdict resting on it is not "low confidence"
    assert not _based(1.0, 61).low_confidence
    verdict = verdict_for((_based(1.0, 61),))
    assert verdict.confidence == "ok" and "low confidence" not in verdict.headline


def test_a_loosely_known_share_says_its_interval_in_the_headline():
    finding = _based(0.5, 60)
    assert finding.low_confidence
    verdict = verdict_for((finding,))
    assert verdict.headline.startswith("low confidence: 60 samples; sample longer (the share it "
                                       "rests on is known only to ")


def test_a_services_share_pools_the_samples_of_its_workers():
    from diagnose.checks.service_verdict import _pooled_confidence

    workers = [_based(0.6, 30), _based(0.5, 30), _based(0.55, 30)]
    assert all(f.low_confidence for f in workers)
    samples, low = _pooled_confidence(workers, workers[0])
    assert samples == 90 and low  # 55% of 90: 45-65%, still wider than +/-10 points
    three = [_based(0.55, 60) for _ in range(3)]  # each 42-67%: low on its own
    assert all(f.low_confidence for f in three)
    samples, low = _pooled_confidence(three, three[0])
    assert samples == 180 and not low  # pooled: 48-62%


def test_a_services_score_interval_narrows_with_its_workers_pooled_samples():
    from diagnose.checks.service_verdict import _narrowed

    finding = _based(0.5, 60)  # score 50, interval from the share's 38-62%
    low, high = finding.score_interval
    pooled = _narrowed(finding, 60, 240)  # four workers' samples: half the width
    assert pooled.score_interval[0] > low and pooled.score_interval[1] < high
    assert abs((pooled.score_interval[1] - pooled.score_interval[0]) - (high - low) / 2) <= 1
    assert _narrowed(finding, 60, 60) is finding


def test_calibrated_states_are_as_sure_as_the_native_samples_behind_them_not_the_samples_they_label():
    import pandas as pd
    from diagnose.model.confidence import calibrated_samples
    # 1,000 Python samples of one stack whose state mix came from 12 native samples, plus 1,000
    # measured samples: the calibrated half is known about as well as 12 samples weighted by 1/4
    rows = pd.DataFrame({"stack": [0] * 1000 + [1] * 1000, "count": [1] * 2000,
                         "state_source": ["calibrated"] * 1000 + ["measured"] * 1000,
                         "calibration_support": [12] * 1000 + [0] * 1000})
    effective = calibrated_samples(rows)
    assert 40 < effective < 50  # 1 / (1/2000 + 0.25/12) = 46.9
    measured = rows.assign(state_source="measured", calibration_support=0)
    assert calibrated_samples(measured) == 2000


def test_workers_calibrated_by_the_same_native_samples_pool_their_sampling_not_their_calibration():
    from diagnose.checks.service_verdict import _pooled_count
    # three workers: 2,000 samples each, states calibrated to an effective 48 by one native recorder
    calibrated = [(0.5, 48, 2000)] * 3
    assert 45 <= _pooled_count(calibrated) <= 50  # not 144: the same dozen native samples thrice
    independent = [(0.5, 61, 0)] * 3
    assert _pooled_count(independent) == 183  # measured samples add up


def test_a_low_confidence_verdict_on_counters_and_one_sampled_share_counts_that_shares_samples():
    """A finding of /proc counters whose score rests on one sampled share (pool_transfer: the
    requests' wait on the pool, over one request thread's samples) has no samples of its own:
    the headline counts the share's, never "None samples"."""
    from diagnose.checks.base import ScoreBasis

    finding = make_finding("lock_contention", CheckSettings(title="Lock contention: x"), 60,
                           "59% of the requests' time waits on the pool", {"lock_wait_share": 0.59},
                           share_samples={"lock_wait_share": 68},
                           basis=ScoreBasis("lock_wait_share", lambda s: 100 * s))
    assert finding.samples is None and finding.low_confidence
    verdict = verdict_for((finding,))
    assert verdict.headline.startswith("low confidence: 68 samples; sample longer")
    assert verdict.samples == 68
