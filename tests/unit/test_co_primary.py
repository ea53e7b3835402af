"""Noise never picks the verdict: two findings within the noise of each other share it, in the
causal order, whichever scored higher on this attach; clearly separated findings do not."""

from __future__ import annotations

import dataclasses
import json

from diagnose.checks.arbiter import CRITICAL, LEADING_GAIN, rank, within_noise
from diagnose.checks.base import ScoreBasis, amdahl, make_finding, ramp
from diagnose.checks.spec import CheckSettings
from diagnose.checks.engine import order_of, verdict_for
from diagnose.cli.common import gate
from diagnose.model.structure import Edge, Stage, Structure, _bottleneck, is_entry
from diagnose.render.html import render_html
from diagnose.render.markdown import md_text, render_markdown
from diagnose.report.model.codec import encode
from tests.report_data import as_finding, as_verdict, decided_report

SAMPLES = 2000
LOCK_ADVICE = "Start the service with OPENBLAS_NUM_THREADS=1 and re-measure."
MODEL_ADVICE = "Use a cheaper model or more cores."


def lock(share: float, samples: int = SAMPLES):
    """lock_contention as the check scores it: a ramp on the lock-wait share, Amdahl's gain."""
    score_of = lambda s: ramp(s, 0.05, 0.4)  # noqa: E731
    return make_finding("lock_contention", CheckSettings(title="Lock contention: x"),
                        score_of(share), f"{share:.0%} of request time waits on a lock",
                        {"lock_wait_share": share}, advice=[LOCK_ADVICE],
                        gain=(amdahl(share), "estimate"), samples=samples,
                        basis=ScoreBasis("lock_wait_share", score_of, amdahl))


def compute(share: float = 0.95, gain: float = 1.0, gain_of=None):
    score_of = lambda s: ramp(s, 0.4, 0.8)  # noqa: E731
    return make_finding("compute_bound", CheckSettings(title="Compute bound: x"),
                        score_of(share), "cores busy with the model", {"model_share_of_busy": share},
                        advice=[MODEL_ADVICE], gain=(gain, "estimate"), samples=SAMPLES,
                        basis=ScoreBasis("model_share_of_busy", score_of, gain_of))


def share_for(score: float) -> float:
    return 0.05 + score / 100 * 0.35


def model_gaining(gain: float):
    """compute_bound measured on thousands (surely critical) whose advice predicts `gain`, known
    to about +/-0.01 (the share's interval moves it one for one)."""
    return compute(gain=gain, gain_of=lambda s: gain + (s - 0.95))


def tied_pair():
    """A warning-level lock (60: about 1.35x, 1.32-1.39) and a critical model whose advice
    predicts 1.36x: their gains tie within their intervals, whichever is higher on this attach."""
    return [model_gaining(1.36), lock(share_for(60))]


def test_a_score_interval_comes_from_the_share_interval_through_the_checks_formula():
    finding = lock(share_for(73))
    low, high = finding.score_interval
    assert low < finding.score == 73 < high
    assert high >= CRITICAL  # 2000 samples: the share is known to about +/-2 points
    assert finding.gain_interval[0] < finding.predicted_gain < finding.gain_interval[1]


def test_a_warning_that_predicts_a_gain_leads_a_critical_that_predicts_nothing_on_every_attach():
    """Severity says how sure and how bad, not what to change first: a lock at 73 or 77 (either
    side of the critical line, about 1.4x) leads a model at 100 whose advice buys nothing, and a
    point of score no longer flips the verdict between attaches."""
    below = rank([compute(), lock(share_for(73))], order_of)
    above = rank([compute(), lock(share_for(77))], order_of)
    assert below[0].severity == "warning" and above[0].severity == "critical"
    for ranked in (below, above):
        assert [f.id for f in ranked] == ["lock_contention", "compute_bound"]
        assert ranked[0].gain_range[0] >= LEADING_GAIN
        verdict = verdict_for(ranked)
        assert (verdict.primary, verdict.co_primary) == ("lock_contention", None)
        assert verdict.first_advice == (LOCK_ADVICE,) and not verdict.co_primary_reason
        assert "within the noise" not in verdict.headline


def test_findings_whose_gains_tie_within_their_intervals_share_the_verdict_in_causal_order():
    """A warning and a critical finding whose predicted gains overlap: either could lead on another
    attach, so both are named, in the causal order (the lock first), whichever gain came out higher."""
    for ranked in (rank(tied_pair(), order_of), rank(tied_pair()[::-1], order_of)):
        assert [f.id for f in ranked] == ["lock_contention", "compute_bound"]
        verdict = verdict_for(ranked)
        assert (verdict.primary, verdict.co_primary) == ("lock_contention", "compute_bound")
        assert verdict.co_primary_reason.startswith("their predicted gains tie within their intervals")
        assert verdict.first_advice == (LOCK_ADVICE, MODEL_ADVICE)
        assert "within the noise of it: compute bound" in verdict.headline


def test_clearly_separated_findings_give_one_verdict():
    # Gains far apart, the larger at warning strength: the larger gain alone.
    model = model_gaining(1.6)
    weak_lock = lock(share_for(55))  # about 1.33x
    assert weak_lock.score_interval[1] < CRITICAL and weak_lock.gain_range[1] < model.gain_range[0]
    verdict = verdict_for(rank([weak_lock, model], order_of))
    assert (verdict.primary, verdict.co_primary) == ("compute_bound", None)
    assert verdict.first_advice == (MODEL_ADVICE,) and not verdict.co_primary_reason
    # Both surely critical, gains far apart: the larger gain alone.
    strong_lock = lock(share_for(100) + 0.3)
    verdict = verdict_for(rank([compute(), strong_lock], order_of))
    assert (verdict.primary, verdict.co_primary) == ("lock_contention", None)


def test_critical_findings_whose_gains_tie_within_their_intervals_share_the_verdict():
    strong_lock = lock(0.6)  # 100, about 2.5x
    model = compute(gain=2.6, gain_of=lambda s: 2.6 + (s - 0.95))
    assert within_noise(strong_lock, model, order_of)
    ranked = rank([model, strong_lock], order_of)
    verdict = verdict_for(ranked)
    assert (verdict.primary, verdict.co_primary) == ("lock_contention", "compute_bound")
    assert "predicted gains tie" in verdict.co_primary_reason


def test_the_verdicts_severity_and_the_gate_take_the_higher_of_the_two():
    verdict = verdict_for(rank(tied_pair(), order_of))
    assert (verdict.primary, verdict.co_primary) == ("lock_contention", "compute_bound")
    assert rank(tied_pair(), order_of)[0].severity == "warning"  # a warning on its own
    assert verdict.severity == "critical"  # its co-primary is critical
    assert gate(0, as_verdict(encode(verdict)), "critical", "the verdict") == 10
    alone = verdict_for((lock(share_for(60)),))
    assert alone.severity == "warning"
    assert gate(0, as_verdict(encode(alone)), "critical", "the verdict") == 0


def test_verdict_and_finding_intervals_survive_a_json_round_trip():
    ranked = rank(tied_pair(), order_of)
    verdict = verdict_for(ranked)
    # what a report's reader gets back is the verdict that was decided
    for decided in (verdict, verdict_for((compute(),))):
        assert as_verdict(json.loads(json.dumps(encode(decided)))) == decided
    row = as_finding(json.loads(json.dumps(encode(ranked[0]))))
    assert row.score_interval == ranked[0].score_interval
    assert row.gain_interval == ranked[0].gain_interval


def test_markdown_summary_names_both_findings_with_the_reason_and_each_first_advice():
    ranked = rank(tied_pair(), order_of)
    text = render_markdown(decided_report(verdict_for(ranked), ranked))
    assert "**Primary finding:** `lock_contention` · **co-primary:** `compute_bound`" in text
    assert "**Within the noise of each other:** their predicted gains tie within their intervals" in text
    assert f"**First advice for `lock_contention`:** {md_text(LOCK_ADVICE, 300)}" in text
    assert "**First advice for `compute_bound`:** Use a cheaper model or more cores." in text


def test_a_service_score_moves_the_interval_with_it():
    finding = lock(share_for(73))
    width = finding.score_interval[1] - finding.score_interval[0]
    moved = finding.rescored(60)
    assert moved.severity == "warning"
    assert moved.score_interval[0] < 60 < moved.score_interval[1]
    assert moved.score_interval[1] - moved.score_interval[0] == width


def _stage(name, function, file):
    return Stage(name=name, role="other", function=function, file=file, line=1,
                 tids=(1,), samples=100, busy_share=0.99, python_share=0.5, starved_share=0.0,
                 blocked_put_share=0.0, result_wait_share=0.0)


def test_a_module_body_or_the_interpreters_bootstrap_is_never_the_bottleneck_stage():
    assert is_entry("<module>", "/srv/app.py") and is_entry("_run_module_as_main", "<frozen runpy>")
    assert is_entry("_run_code", "/usr/lib/python3.11/runpy.py")
    assert not is_entry("decode_loop", "/srv/app.py")
    module = _stage("<module>", "<module>", "/srv/app.py")
    worker = _stage("worker", "worker", "/srv/app.py")
    edges = (Edge("worker", "starved", "queue jobs", "<module>", 0.5),)
    assert _bottleneck(Structure(stages=(module, worker), edges=edges)) is None
    edges += (Edge("<module>", "result", "results of queue jobs", "worker", 0.5),)
    assert _bottleneck(Structure(stages=(module, worker), edges=edges)) == "worker"


def test_the_html_fallback_headline_names_both_findings_and_escapes_them():
    ranked = rank(tied_pair(), order_of)
    verdict = dataclasses.replace(verdict_for(ranked),
                                  first_advice=("<script>alert(1)</script>", MODEL_ADVICE))
    report = decided_report(verdict, ranked)
    page = render_html({"report": report.to_json()}, report)
    fallback = page[page.index('<p id="noscript-co-primary">'):]
    fallback = fallback[:fallback.index("</ul>")]
    assert "Co-primary finding: compute_bound, within the noise of\nlock_contention" in fallback
    assert "First advice for compute_bound: Use a cheaper model or more cores." in fallback
    assert "&lt;script&gt;" in fallback and "<script>" not in fallback


def test_an_exact_tie_is_settled_by_the_causal_order_alone():
    # Two critical findings with the same point gain and no interval on it: the causal order
    # puts the same one first on every attach, so there is nothing to hedge.
    model = compute(gain=2.0)
    locked = make_finding("lock_contention", CheckSettings(title="Lock contention: x"), 100,
                          "every request waits on a lock", {}, gain=(2.0, "estimate"))
    verdict = verdict_for(rank([model, locked], order_of))
    assert (verdict.primary, verdict.co_primary) == ("lock_contention", None)


def test_a_finding_at_most_info_with_no_way_to_critical_is_listed_not_named_in_the_verdict():
    """A wide-interval lead (few calibration samples) overlaps a pointwise counter finding at 47:
    naming the 47 would turn on where the lead's interval happened to end on this attach."""
    lead = lock(share_for(72), samples=60)  # interval roughly 40-95, its gain about 1.2-1.9x
    counter = make_finding("scheduler_overhead", CheckSettings(title="Scheduler overhead: x"), 47,
                           "runnable threads queue for the cores", {"runnable_per_core": 2.1},
                           gain=(1.4, "estimate"))
    assert lead.gain_interval[0] < 1.4 < lead.gain_interval[1]
    assert within_noise(lead, counter, order_of)  # either could rank first on its gain...
    verdict = verdict_for(rank([lead, counter], order_of))
    assert (verdict.primary, verdict.co_primary) == ("lock_contention", None)  # ...but 47 is no contender


def test_a_warning_level_finding_within_the_noise_of_the_lead_is_named_beside_it():
    lead = lock(share_for(72), samples=60)
    counter = make_finding("scheduler_overhead", CheckSettings(title="Scheduler overhead: x"), 55,
                           "runnable threads queue for the cores", {"runnable_per_core": 2.6},
                           gain=(1.4, "estimate"))
    assert within_noise(lead, counter, order_of)
    verdict = verdict_for(rank([lead, counter], order_of))
    assert {verdict.primary, verdict.co_primary} == {"lock_contention", "scheduler_overhead"}


def gil(share: float, samples: int, gain: float):
    score_of = lambda s: ramp(s, 0.1, 0.5)  # noqa: E731
    return make_finding("gil_contention", CheckSettings(title="GIL: x"), score_of(share),
                        f"{share:.0%} of request time waits for the GIL", {"gil_wait_share": share},
                        gain=(gain, "estimate"), samples=samples,
                        basis=ScoreBasis("gil_wait_share", score_of, None))


def test_gains_under_five_percent_are_no_gain_and_the_causal_order_settles_them():
    """64 busy threads on 2 cores: fewer threads returns 1.01x, the GIL's Amdahl share capped by
    the cores 1.02x. Both are no gain: the thread count (earlier in the causal order) leads on
    every attach, whichever estimate came out a hundredth higher."""
    threads = make_finding("scheduler_overhead", CheckSettings(title="Scheduler overhead: x"), 100,
                           "runnable threads queue for the cores", {"runnable_per_core": 30.0},
                           gain=(1.01, "estimate"))
    ranked = rank([gil(0.6, SAMPLES, 1.02), threads], order_of)
    assert [f.id for f in ranked][:2] == ["scheduler_overhead", "gil_contention"]
    assert verdict_for(ranked).co_primary is None  # equal keys: no noise to hedge
    # A gain that is one still ranks by its size.
    assert rank([gil(0.6, SAMPLES, 1.3), threads], order_of)[0].id == "gil_contention"


def test_a_low_confidence_finding_never_leads_a_noise_tie_over_a_well_measured_one():
    """A GIL share calibrated from few native samples, whose gain ties with a model's measured on
    thousands: the verdict names both, the well-measured one (surely critical) first."""
    loose = gil(0.45, 40, 1.13)
    assert loose.low_confidence and loose.score_interval[1] >= CRITICAL
    model = model_gaining(1.13)
    assert model.score_range[0] >= CRITICAL and within_noise(loose, model, order_of)
    verdict = verdict_for(rank([loose, model], order_of))
    assert (verdict.primary, verdict.co_primary) == ("compute_bound", "gil_contention")


def test_a_well_measured_finding_that_is_not_surely_critical_leaves_the_causal_order():
    """Threads spinning in Python: a loosely known GIL share at 94 beside busy cores at 68 (interval
    reaching 79). Neither is surely stronger, so the cause (the GIL) leads on every attach."""
    loose = gil(0.47, 40, 1.0)
    assert loose.low_confidence and loose.score >= CRITICAL > loose.score_range[0]
    busy = make_finding("cpu_bound", CheckSettings(title="CPU bound: x"), 68, "cores busy",
                        {}, samples=SAMPLES)
    busy = dataclasses.replace(busy, score_interval=(56, 79))
    verdict = verdict_for(rank([busy, loose], order_of))
    assert (verdict.primary, verdict.co_primary) == ("gil_contention", "cpu_bound")


def test_the_html_fallback_of_a_single_primary_states_its_first_advice_escaped():
    ranked = rank(tied_pair(), order_of)
    verdict = dataclasses.replace(verdict_for(ranked), co_primary=None, co_primary_reason=None,
                                  first_advice=("<script>alert(1)</script> shrink the lock",))
    report = decided_report(verdict, ranked)
    page = render_html({"report": report.to_json()}, report)
    assert ('<p id="noscript-first-advice">First advice: &lt;script&gt;alert(1)&lt;/script&gt; '
            'shrink the lock</p>') in page
    assert "noscript-co-primary" not in page
