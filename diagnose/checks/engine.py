"""Runs every check, ranks findings by score, and names the verdict."""

from __future__ import annotations

from dataclasses import dataclass

from diagnose.checks import (compute_bound, event_loop_blocked, gil_contention, lock_contention,
                             logging_lock, pool_wait, preprocess_bound, scheduler_overhead,
                             unbounded_backlog, underloaded)
from diagnose.checks.base import Finding, NotApplicable, load_check_settings

# Order breaks score ties: the more specific, more actionable diagnosis first.
CHECKS = (event_loop_blocked, lock_contention, pool_wait, logging_lock, unbounded_backlog, gil_contention,
          preprocess_bound, scheduler_overhead, compute_bound, underloaded)


@dataclass(frozen=True)
class Verdict:
    primary: str
    headline: str
    severity: str


@dataclass(frozen=True)
class CheckResults:
    findings: tuple[Finding, ...]
    not_applicable: tuple[NotApplicable, ...]
    verdict: Verdict


def run_checks(analysis, user_rules: dict | None = None) -> CheckResults:
    settings = load_check_settings(user_rules)
    findings, skipped = [], []
    for order, check in enumerate(CHECKS):
        result = check.run(analysis, settings[check.ID])
        (skipped if isinstance(result, NotApplicable) else findings).append((order, result))
    ranked = tuple(f for _, f in sorted(findings, key=lambda p: (-p[1].score, p[0])))
    return CheckResults(ranked, tuple(s for _, s in skipped), verdict_for(ranked))


def verdict_for(findings: tuple[Finding, ...]) -> Verdict:
    if not findings:
        return Verdict("none", "No check could run on this data.", "ok")
    top = findings[0]
    if top.severity == "ok":
        return Verdict("none", f"No clear bottleneck: the strongest signal is weak "
                               f"({top.title.lower()}: {top.summary}).", "ok")
    return Verdict(top.id, f"{top.title.split(':')[0]} — {top.summary}", top.severity)
