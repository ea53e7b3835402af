"""Which advice leads a finding, and which knob is its fix: chosen once, from a ranked list.

A check that finds several things to advise collects each as a `Lead`: its rank (lower leads),
why it ranks there, its advice and the knob it sets. `choose` orders them by rank (equal ranks
keep the order given) and gives the finding's advice in that order and its fix: the knob of the
best-ranked lead that has one. A lead may carry advice without a knob (words that must come
first but set nothing) or a knob without words of its own (the declared advice says it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from diagnose.report.model.findings import Fix


@dataclass(frozen=True)
class Lead:
    rank: int
    reason: str  # why it ranks there: read with the code, never shown
    advice: str | None = None
    fix: Fix | None = None


@dataclass(frozen=True)
class Chosen:
    advice: tuple[str, ...]
    fix: Fix | None


def choose(leads: Iterable[Lead]) -> Chosen:
    ranked = sorted(leads, key=lambda lead: lead.rank)
    return Chosen(tuple(lead.advice for lead in ranked if lead.advice is not None),
                  next((lead.fix for lead in ranked if lead.fix is not None), None))


def declared(advice: Iterable[str], rank: int, reason: str) -> list[Lead]:
    """The check's declared advice as leads of one rank (they keep their declared order)."""
    return [Lead(rank, reason, text) for text in advice]
