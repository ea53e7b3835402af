"""Imbalance is never the verdict over a resource every request queues on (arbiter rule 8): when a
finding shows the requests queue on one shared resource (a lock, the GIL, a pool, a logging
handler, an asyncio primitive) at a score that shows a problem, it ranks before worker_imbalance,
whatever gain balancing predicts: the uneven load is the queue's symptom."""

from __future__ import annotations

from diagnose.checks.arbiter import QUEUE_FINDINGS, rank
from diagnose.checks.base import ScoreBasis, make_finding, ramp
from diagnose.checks.engine import order_of, verdict_for
from diagnose.checks.spec import CheckSettings
from diagnose.vocab import INFO_SCORE

BALANCE_ADVICE = "Hand the work out from one shared queue so every worker takes the next item."
LOCK_ADVICE = "Shrink the critical section to the shared state alone."


def uneven(score: int = 82, gain: float = 1.88):
    """worker_imbalance's uneven load, from /proc: exact, predicting the busiest worker's load
    spread over all of them."""
    return make_finding("worker_imbalance", CheckSettings(title="Worker processes are unevenly loaded"),
                        score, "2 worker processes carry uneven load: from 0.06 to 0.95 cores each",
                        {"load_coefficient_of_variation": 0.88}, advice=[BALANCE_ADVICE],
                        gain=(gain, "estimate: the busiest worker's load spread evenly"))


def queue(check_id: str = "lock_contention", share: float = 0.74, samples: int = 2000):
    """A wait on a shared resource scored as lock_contention scores it (a ramp on the wait
    share), predicting nothing: the cores are full."""
    score_of = lambda s: ramp(s, 0.05, 0.4)  # noqa: E731
    return make_finding(check_id, CheckSettings(title=f"{check_id}: x"), score_of(share),
                        f"{share:.0%} of request-thread time waits", {"wait_share": share},
                        advice=[LOCK_ADVICE], gain=(1.0, "estimate"), samples=samples,
                        basis=ScoreBasis("wait_share", score_of))


def compute():
    return make_finding("compute_bound", CheckSettings(title="Compute bound: x"), 82,
                        "cores busy with the model", {}, gain=(1.0, "estimate"))


def ids(ranked) -> list[str]:
    return [f.id for f in ranked]


def test_a_lock_every_request_queues_on_leads_uneven_workers_that_predict_a_larger_gain():
    for findings in ([uneven(), queue()], [queue(), uneven()]):
        ranked = rank(findings, order_of)
        assert ids(ranked) == ["lock_contention", "worker_imbalance"]
        verdict = verdict_for(ranked)
        assert (verdict.primary, verdict.co_primary) == ("lock_contention", None)
        assert verdict.first_advice == (LOCK_ADVICE,)


def test_the_queue_leads_however_much_higher_the_imbalance_scores_and_predicts():
    lock = queue(share=0.2)
    assert INFO_SCORE <= lock.score_range[0] and lock.score < 50
    ranked = rank([uneven(score=100, gain=3.0), lock], order_of)
    assert ids(ranked) == ["lock_contention", "worker_imbalance"]
    assert verdict_for(ranked).co_primary is None


def test_every_kind_of_shared_queue_leads_uneven_workers():
    for check_id in QUEUE_FINDINGS:
        assert rank([uneven(), queue(check_id)], order_of)[0].id == check_id


def test_a_queue_that_shows_no_problem_leaves_the_uneven_workers_the_verdict():
    faint = queue(share=0.06)
    assert faint.score_range[1] < INFO_SCORE
    ranked = rank([faint, uneven()], order_of)
    assert ids(ranked) == ["worker_imbalance", "lock_contention"]
    assert verdict_for(ranked).primary == "worker_imbalance"


def test_a_queue_whose_score_may_show_no_problem_shares_the_verdict_with_uneven_workers():
    # 60 samples: the lock's score straddles the info line, so on another attach it would show
    # no problem and the spread would lead; both are named rather than flipping between attaches
    maybe = queue(share=0.15, samples=60)
    assert maybe.score_range[0] < INFO_SCORE <= maybe.score
    verdict = verdict_for(rank([uneven(), maybe], order_of))
    assert (verdict.primary, verdict.co_primary) == ("lock_contention", "worker_imbalance")


def test_uneven_workers_still_lead_a_finding_that_is_no_queue():
    ranked = rank([compute(), uneven()], order_of)
    assert ids(ranked) == ["worker_imbalance", "compute_bound"]
