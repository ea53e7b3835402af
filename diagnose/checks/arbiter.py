"""The ranking policy, in one place.

1. Every check scores its own evidence, 0-100, without looking at other checks' findings: no
   check damps its score for another check's reason. Where one finding is the mechanism of
   another (GIL waits behind preprocessing, busy cores under far too many threads), the cause
   leads because it predicts the larger gain (preprocessing's share is not capped by the cores;
   fewer threads return the switching) or, at equal gain, by the causal order (rule 4).
2. Findings at critical strength (score >= 75) come first, ordered by what fixing them can buy:
   their predicted gain (Amdahl for a serialized share, capped by the cores the process leaves
   idle; the utilization law for a pipeline stage; kernels vs pool synchronisation for an
   intra-op pool; 1.0 where only the model itself can change). Two findings that both saturate
   the score are never ordered by noise in their scores.
   Exception: a finding that foretells a failure (FAILURE_FIRST: an unbounded backlog growing
   memory until the process is killed) leads at critical strength, whatever the gains.
3. Weaker findings follow, by score.
4. Equal keys fall back to the causal order of engine.CHECKS: the more specific, more actionable
   diagnosis (a blocked loop, a stage, a lock) before its symptoms (busy cores, idle workers).
The verdict is the first finding, unless it is weak (then the headline says what the threads did).
A verdict whose first finding rests on fewer than confidence.MIN_SAMPLES samples says "low
confidence" in its headline and is never critical (engine.verdict_for).
"""

from __future__ import annotations

from diagnose.checks.base import Finding

CRITICAL = 75


# Findings that foretell a failure (memory growing without bound until the process is killed):
# at critical strength they lead whatever the others' throughput gains, because no throughput
# matters once the process is gone.
FAILURE_FIRST = ("unbounded_backlog",)


def rank_key(finding: Finding, order: int) -> tuple:
    if finding.score >= CRITICAL:
        failure = 0 if finding.id in FAILURE_FIRST else 1
        return (0, failure, -(finding.predicted_gain or 1.0), order)
    return (1, 1, -finding.score, order)


def rank(findings: list[Finding], order_of) -> tuple[Finding, ...]:
    """`order_of(finding) -> int`: its place in the causal order."""
    return tuple(sorted(findings, key=lambda f: rank_key(f, order_of(f))))
