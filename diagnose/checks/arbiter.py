"""The ranking policy, in one place.

1. Every check scores its own evidence, 0-100, without looking at other checks' findings: no
   check damps its score for another check's reason. Where one finding is the mechanism of
   another (GIL waits behind preprocessing, busy cores under far too many threads), the cause
   leads because it predicts the larger gain (preprocessing's share is not capped by the cores;
   fewer threads return the switching) or, at equal gain, by the causal order (rule 5).
2. Findings at critical strength (score >= 75) come first, ordered by what fixing them can buy:
   their predicted gain (Amdahl for a serialized share, capped by the cores the process leaves
   idle; the utilization law for a pipeline stage; kernels vs pool synchronisation for an
   intra-op pool; 1.0 where only the model itself can change). Two findings that both saturate
   the score are never ordered by noise in their scores.
   Exceptions, at critical strength, whatever the gains: first a finding that the service is
   hung (HUNG_FIRST: a deadlock; nothing on its threads runs again, so no throughput gain
   compares with it), then one that foretells a failure (FAILURE_FIRST: an unbounded backlog
   growing memory until the process is killed).
3. Weaker findings follow, by score.
4. Noise never picks the verdict. Each finding carries its score and gain at the ends of the 95%
   interval of the share its score rests on (base.ScoreBasis). When the first two findings' rank
   keys overlap within those intervals — one's interval straddles the critical line while the
   other is critical, their scores overlap below it, or their predicted gains tie within their
   intervals — either could have come first on another attach: they are co-primary (when the
   second is a contender: its interval reaches the critical line or it is a warning), put in the
   causal order (rule 5), and the verdict names both (engine.verdict_for).
5. Equal keys fall back to the causal order of engine.CHECKS: the more specific, more actionable
   diagnosis (a blocked loop, a stage, a lock) before its symptoms (busy cores, idle workers).
   Predicted gains under NO_GAIN_BELOW are no structural gain and rank as 1.0: 1.01x against
   1.02x (two findings on a machine with no idle core) is rounding, not a reason to lead.
6. Within a co-primary pair a finding whose own share is known too loosely (low confidence)
   never leads a well-measured one that is surely critical (its whole interval at or above the
   line): a few native samples may not displace thousands. Otherwise the causal order stands.
The verdict is the first finding (and its co-primary), unless it is weak (then the headline says
what the threads did). A verdict whose first finding rests on fewer than confidence.MIN_SAMPLES
samples says "low confidence" in its headline and is never critical (engine.verdict_for).
"""

from __future__ import annotations

from collections.abc import Callable

from diagnose.checks.base import Finding
from diagnose.model.vocab import CRITICAL_SCORE, INFO_SCORE, WARNING_SCORE

CRITICAL = CRITICAL_SCORE

# A finding's place in the causal order (engine.order_of).
OrderOf = Callable[[Finding], int]
# (critical or not, urgency, minus gain or score, causal order): smaller ranks first.
RankKey = tuple[int, int, float, int]


# Findings that foretell a failure (memory growing without bound until the process is killed):
# at critical strength they lead whatever the others' throughput gains, because no throughput
# matters once the process is gone.
FAILURE_FIRST = ("unbounded_backlog",)
# Findings that the service is hung (threads that will never run again): ahead even of those.
# A hung service has no throughput to gain a ratio of, so no gain can outrank it.
HUNG_FIRST = ("deadlock",)


def _urgency(finding: Finding) -> int:
    """0: the service is hung; 1: it will fail; 2: it is slow."""
    if finding.id in HUNG_FIRST:
        return 0
    return 1 if finding.id in FAILURE_FIRST else 2


# Below this ratio a predicted gain is no gain: paired runs on a shared machine do not resolve 5%,
# and the estimates behind a gain (Amdahl on a sampled share, the cores left idle) are no finer.
NO_GAIN_BELOW = 1.05


def _ranked_gain(gain: float | None) -> float:
    return 1.0 if gain is None or gain < NO_GAIN_BELOW else gain


def _key(finding: Finding, score: float, gain: float | None) -> tuple[int, int, float]:
    if score >= CRITICAL:
        return (0, _urgency(finding), -_ranked_gain(gain))
    return (1, 2, -score)


def rank_key(finding: Finding, order: int) -> RankKey:
    return (*_key(finding, finding.score, finding.predicted_gain), order)


def _best_key(finding: Finding, order: int) -> RankKey:
    return (*_key(finding, finding.score_range[1], finding.gain_range[1]), order)


def _worst_key(finding: Finding, order: int) -> RankKey:
    return (*_key(finding, finding.score_range[0], finding.gain_range[0]), order)


def within_noise(a: Finding, b: Finding, order_of: OrderOf) -> bool:
    """Either could rank first: each one's best rank key (at the favourable ends of its
    intervals) beats the other's worst. Equal keys are no noise: the causal order settles them
    the same way on every attach."""
    oa, ob = order_of(a), order_of(b)
    return _best_key(a, oa) < _worst_key(b, ob) and _best_key(b, ob) < _worst_key(a, oa)


def rank(findings: list[Finding], order_of: OrderOf) -> tuple[Finding, ...]:
    """`order_of(finding) -> int`: its place in the causal order. Co-primary findings (rule 4)
    come first in the causal order, whichever scored higher on this attach (but rule 6)."""
    ranked = sorted(findings, key=lambda f: rank_key(f, order_of(f)))
    if len(ranked) >= 2 and co_primary(ranked[0], ranked[1], order_of):
        ranked[:2] = in_pair_order(ranked[:2], order_of)
    return tuple(ranked)


def in_pair_order(pair: list[Finding], order_of: OrderOf) -> list[Finding]:
    """A co-primary pair as the verdict names it: the causal order (rule 4), unless the first
    is low-confidence and the second well-measured and surely critical (rule 6)."""
    first, second = sorted(pair, key=order_of)
    if (first.low_confidence and not second.low_confidence
            and second.score_range[0] >= CRITICAL):
        return [second, first]
    return [first, second]


def co_primary(first: Finding, second: Finding, order_of: OrderOf) -> bool:
    """The second of the first two findings shares the verdict: noise alone could have ranked it
    first, and it is a contender for the headline — it could be critical on another attach (its
    interval reaches the critical line) or it is a warning now. A finding that is at most "info"
    here is listed below the verdict, not named in it: naming it would turn on how near its
    point score came to the other's interval, which moves between attaches."""
    contender = second.score_range[1] >= CRITICAL or second.score >= WARNING_SCORE
    return (contender and first.score_range[1] >= INFO_SCORE
            and within_noise(first, second, order_of))


def noise_reason(a: Finding, b: Finding) -> str:
    """Why `a` and `b` share the verdict, in words with their intervals."""
    def score(f: Finding) -> str:
        low, high = f.score_range
        return f"{f.id} {f.score}" + (f" (95% interval {low}-{high})" if low != high else "")

    def gain(f: Finding) -> str:
        low, high = f.gain_range
        return f"{f.id} {f.predicted_gain or 1.0:.2f}x" + (f" ({low:.2f}-{high:.2f})" if low != high else "")

    critical = [f.score_range[0] >= CRITICAL for f in (a, b)]
    if all(critical):
        return (f"both are critical and their predicted gains tie within their intervals: "
                f"{gain(a)}, {gain(b)}")
    if any(f.score_range[1] >= CRITICAL for f in (a, b)):
        return (f"their scores straddle the critical line ({CRITICAL}) within their intervals: "
                f"{score(a)}, {score(b)}")
    return f"their scores overlap within their intervals: {score(a)}, {score(b)}"
