"""The finding's advice and knob are chosen once from ranked leads (checks/leads.py)."""

from __future__ import annotations

from diagnose.checks.leads import Lead, choose, declared
from diagnose.report.model.findings import Fix


def test_the_advice_follows_the_rank_and_equal_ranks_keep_their_order():
    leads = [*declared(("first declared", "second declared"), 5, "declared"),
             Lead(1, "leads", "leading"), Lead(3, "between", "middle")]
    assert choose(leads).advice == ("leading", "middle", "first declared", "second declared")


def test_the_fix_is_the_best_ranked_lead_that_sets_a_knob():
    leads = [Lead(7, "a knob without words", fix=Fix("model_instances", 2)),
             Lead(0, "words without a knob", "first"),
             Lead(2, "a knob with words", "second", Fix("sidecars", 3))]
    chosen = choose(leads)
    assert chosen.fix == Fix("sidecars", 3)
    assert chosen.advice == ("first", "second")
    assert choose([Lead(0, "no knob", "only")]).fix is None
