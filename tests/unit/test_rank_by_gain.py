"""The verdict is the change that buys most (arbiter rules 2-4): a hang or a failure at critical
strength first; then every finding whose evidence shows a problem, by the gain its advice
predicts, those that predict nothing after those that predict at least LEADING_GAIN; findings under
the info line last. A score says how sure and how bad; it never orders findings that predict a
gain, so a point of score does not flip the verdict between attaches."""

from __future__ import annotations

import dataclasses

from diagnose.checks.arbiter import (CRITICAL, INFO_SCORE, LEADING_GAIN, NO_GAIN_BELOW, co_primary,
                                     gains_significantly,
                                     hung_or_failing, noise_reason, rank, within_noise)
from diagnose.checks.base import Finding, make_finding
from diagnose.checks.engine import order_of, verdict_for
from diagnose.checks.service_verdict import _stage_first
from diagnose.checks.spec import CheckSettings
from diagnose.vocab import Confidence, Severity


def finding(check_id: str, score: int, gain: float | None = None,
            scores: tuple[int, int] | None = None, gains: tuple[float, float] | None = None,
            pid: int | None = None) -> Finding:
    made = make_finding(check_id, CheckSettings(title=f"{check_id}: x"), score, f"{check_id} found",
                        {} if pid is None else {"pid": pid},
                        gain=None if gain is None else (gain, "estimate"))
    return dataclasses.replace(made, score_interval=scores, gain_interval=gains)


def ids(findings) -> list[str]:
    return [f.id for f in findings]


def test_a_hang_then_a_failure_at_critical_strength_lead_whatever_the_gains():
    locked = finding("lock_contention", 100, 3.0)
    hung = finding("deadlock", 80)
    failing = finding("unbounded_backlog", 90)
    assert hung_or_failing(hung) and hung_or_failing(failing) and not hung_or_failing(locked)
    assert ids(rank([locked, failing, hung], order_of)) == ["deadlock", "unbounded_backlog",
                                                            "lock_contention"]
    assert verdict_for(rank([locked, failing], order_of)).primary == "unbounded_backlog"


def test_a_hang_or_a_failure_below_critical_strength_ranks_by_its_gain_like_any_other():
    locked = finding("lock_contention", 60, 1.4)
    backlog = finding("unbounded_backlog", 70)  # predicts nothing
    assert not hung_or_failing(backlog)
    assert ids(rank([backlog, locked], order_of)) == ["lock_contention", "unbounded_backlog"]


def test_among_findings_that_predict_a_gain_the_larger_gain_leads_whatever_the_scores():
    sure_small = finding("lock_contention", 100, 1.3)
    weak_large = finding("scheduler_overhead", 30, 1.5)
    assert ids(rank([sure_small, weak_large], order_of)) == ["scheduler_overhead", "lock_contention"]
    # ...and a point of score either side of the critical line changes nothing.
    for score in (74, 76):
        assert ids(rank([finding("compute_bound", 100, 1.0), finding("lock_contention", score, 1.39)],
                        order_of)) == ["lock_contention", "compute_bound"]


def test_a_finding_that_predicts_nothing_leads_only_when_nothing_else_predicts_the_leading_gain():
    model = finding("compute_bound", 100, 1.0)
    assert LEADING_GAIN == 1.2
    # 1.15x is a gain (over NO_GAIN_BELOW) but under the leading gain: it ranks with those that
    # predict nothing, by score, and the model at 100 leads it.
    slight = finding("lock_contention", 60, 1.15)
    assert NO_GAIN_BELOW <= slight.predicted_gain < LEADING_GAIN
    assert ids(rank([slight, model], order_of)) == ["compute_bound", "lock_contention"]
    # 1.25x is a gain that leads: it goes before the model at any score that shows a problem.
    enough = finding("lock_contention", 30, 1.25)
    assert ids(rank([model, enough], order_of)) == ["lock_contention", "compute_bound"]
    assert verdict_for(rank([model, enough], order_of)).primary == "lock_contention"
    # Gains under NO_GAIN_BELOW are 1.0: by score, then the causal order.
    rounding = finding("lock_contention", 100, 1.02)
    assert ids(rank([rounding, finding("scheduler_overhead", 100, 1.01)], order_of)) == [
        "lock_contention", "scheduler_overhead"]


def test_findings_under_the_info_line_follow_whatever_they_predict_by_score():
    quiet_large = finding("lock_contention", INFO_SCORE - 5, 3.0)
    quieter = finding("pool_wait", INFO_SCORE - 10, 5.0)
    shown = finding("compute_bound", INFO_SCORE + 1, 1.0)
    assert ids(rank([quieter, quiet_large, shown], order_of)) == ["compute_bound", "lock_contention",
                                                                  "pool_wait"]


def test_equal_keys_fall_back_to_the_causal_order_with_no_co_primary():
    first, second = finding("compute_bound", 90, 1.5), finding("lock_contention", 60, 1.5)
    ranked = rank([first, second], order_of)
    assert ids(ranked) == ["lock_contention", "compute_bound"]
    assert verdict_for(ranked).co_primary is None


def named(*findings: Finding) -> tuple[str | None, str | None, str]:
    verdict = verdict_for(rank(list(findings), order_of))
    return verdict.primary, verdict.co_primary, verdict.co_primary_reason


def test_findings_whose_gain_intervals_overlap_are_co_primary_in_causal_order():
    model = finding("compute_bound", 95, 1.5, scores=(90, 100), gains=(1.4, 1.6))
    locked = finding("lock_contention", 60, 1.45, scores=(55, 65), gains=(1.35, 1.55))
    assert within_noise(model, locked, order_of)
    primary, co, reason = named(model, locked)
    assert (primary, co) == ("lock_contention", "compute_bound")
    assert reason.startswith("their predicted gains tie within their intervals: lock_contention 1.45x")
    # Apart, the larger gain alone.
    apart = finding("lock_contention", 60, 1.2, scores=(55, 65), gains=(1.15, 1.25))
    assert named(model, apart) == ("compute_bound", None, "")


def test_findings_that_predict_nothing_are_co_primary_when_their_scores_overlap():
    model = finding("compute_bound", 80, 1.0, scores=(72, 88))
    busy = finding("cpu_bound", 76, scores=(70, 82))
    primary, co, reason = named(busy, model)
    assert (primary, co) == ("compute_bound", "cpu_bound")
    assert reason.startswith("neither predicts a gain and their scores overlap within their intervals")


def test_a_gain_interval_straddling_the_leading_gain_never_leads_a_finding_that_predicts_nothing():
    # A gain noise alone could have made a lever does not lead (batching on CPython 3.11: a GIL
    # finding at 1.11-1.17x beside the model's 1.00x took the verdict on two attaches in five).
    model = finding("compute_bound", 90, 1.0, scores=(85, 95))
    slight = finding("lock_contention", 60, 1.22, scores=(55, 65), gains=(1.14, 1.3))
    assert not gains_significantly(slight)
    assert not within_noise(slight, model, order_of)
    assert named(model, slight) == ("compute_bound", None, "")
    # Surely over the leading gain: it leads alone.
    surely = finding("lock_contention", 60, 1.3, scores=(55, 65), gains=(1.22, 1.38))
    assert gains_significantly(surely)
    assert named(model, surely) == ("lock_contention", None, "")


def test_a_gain_resting_on_a_score_that_may_show_no_problem_never_orders_by_its_size():
    faint = finding("lock_contention", 30, 1.5, scores=(20, 40), gains=(1.45, 1.55))
    sure = finding("scheduler_overhead", 60, 1.3, scores=(55, 65), gains=(1.25, 1.6))
    assert faint.score_range[0] < INFO_SCORE <= faint.score_range[1]
    assert not gains_significantly(faint) and gains_significantly(sure)
    assert not co_primary(faint, sure, order_of)
    assert named(sure, faint) == ("scheduler_overhead", None, "")
    # Clear of the line, the larger gain leads.
    clear = finding("lock_contention", 40, 1.5, scores=(30, 50), gains=(1.45, 1.55))
    assert named(sure, clear)[0] == "lock_contention"


def test_a_hang_whose_score_straddles_the_critical_line_shares_the_verdict_with_the_largest_gain():
    hung = finding("deadlock", 80, scores=(70, 90))
    locked = finding("lock_contention", 100, 2.0, gains=(1.9, 2.1))
    assert within_noise(hung, locked, order_of)
    primary, co, reason = named(locked, hung)
    assert (primary, co) == ("deadlock", "lock_contention")
    assert reason.startswith(f"their scores straddle the critical line ({CRITICAL})")
    assert noise_reason(hung, locked) == reason
    # Surely critical: the hang alone.
    assert named(locked, finding("deadlock", 90))[:2] == ("deadlock", None)


class _Pipeline:
    consumer_pid = 1
    producer_pids = (2, 3)


def test_a_critical_stage_leads_its_own_processes_findings_but_never_a_hang():
    staged = finding("stage_bound", 90, 1.3)
    worker = finding("cpu_bound", 80, 2.0, pid=2)
    hung = finding("deadlock", 90, pid=1)
    ranked = rank([staged, worker, hung], order_of)
    assert ids(ranked) == ["deadlock", "cpu_bound", "stage_bound"]
    assert ids(_stage_first(ranked, staged, _Pipeline())) == ["deadlock", "stage_bound", "cpu_bound"]
    # A stage that shows no problem even at the high end of its interval stays where its gain
    # puts it.
    faint = finding("stage_bound", 10, 1.3, scores=(2, 20))
    ranked = rank([faint, worker], order_of)
    assert ids(_stage_first(ranked, faint, _Pipeline())) == ["cpu_bound", "stage_bound"]


def test_a_stage_that_shows_a_problem_leads_its_processes_findings_at_any_strength():
    # dataloader_job on CPython 3.11 and 3.13: the workers' /proc busy share moved the stage's
    # score across 75 (74-100) between attaches, and under that line the workers'
    # preprocessing took the verdict. The stage names the whole, its transform included.
    worker = finding("preprocess_bound", 96, 2.0, pid=2)
    for score, scores in ((74, (74, 74)), (40, (20, 60)), (100, (81, 100))):
        staged = finding("stage_bound", score, 1.78, scores=scores)
        ranked = rank([staged, worker], order_of)
        assert ids(_stage_first(ranked, staged, _Pipeline())) == ["stage_bound", "preprocess_bound"]


def test_a_lever_doubted_only_for_its_score_shares_the_verdict_with_a_finding_that_predicts_nothing():
    # forked_workers on CPython 3.12, 4 s attaches: preprocessing at 39 (26-53) led the model's
    # share four times; the fifth, at 35 (23-49), its 1.27x could not order and the model's 1.0x
    # took the verdict alone. Which of them is named must not turn on those few points.
    model = finding("compute_bound", 57, 1.0, scores=(41, 70))
    lever = finding("preprocess_bound", 35, 1.27, scores=(23, 49), gains=(1.23, 1.32))
    assert not gains_significantly(lever)
    primary, co, reason = named(model, lever)
    assert (primary, co) == ("preprocess_bound", "compute_bound")  # the causal order: the lever first
    assert "would lead if its score cleared the line" in reason and "23-49" in reason
    # Its score clear of the line: it leads alone, as on the other attaches.
    assert named(model, finding("preprocess_bound", 39, 1.27, scores=(26, 53),
                                gains=(1.23, 1.32))) == ("preprocess_bound", None, "")
    # A gain that itself straddles the leading gain is no such lever: the model leads alone.
    doubtful = finding("preprocess_bound", 35, 1.22, scores=(23, 49), gains=(1.15, 1.3))
    assert named(model, doubtful) == ("compute_bound", None, "")


def test_a_lone_finding_whose_score_interval_reaches_the_info_line_is_named_as_possible_either_side():
    # hostile_names on CPython 3.11: a GIL wait scored 21-29 on five attaches, each interval
    # straddling the info line; by the point score the verdict was "none" three times in five.
    for score, scores in ((22, (4, 47)), (24, (4, 52)), (27, (9, 51))):
        verdict = verdict_for(rank([finding("gil_contention", score, 1.22, scores=scores,
                                            gains=(1.13, 1.36))], order_of))
        assert verdict.primary == "gil_contention", (score, verdict)
    below = verdict_for(rank([finding("gil_contention", 22, 1.22, scores=(4, 47))], order_of))
    assert below.headline.startswith("Possibly gil_contention") and "4-47" in below.headline
    # the title's own capitals kept ("the GIL"), its first letter lowered after "Possibly"
    titled = dataclasses.replace(finding("gil_contention", 22, 1.22, scores=(4, 47)),
                                 title="Threads wait for the GIL: x")
    assert verdict_for((titled,)).headline.startswith("Possibly threads wait for the GIL — ")
    assert below.confidence == Confidence.LOW and below.severity == Severity.INFO
    # An interval wholly under the line shows no problem on any attach: no verdict.
    assert verdict_for(rank([finding("gil_contention", 10, 1.1, scores=(0, 20))],
                            order_of)).primary == "none"
