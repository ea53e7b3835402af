"""gil_contention's first advice says what to do at the holder's line (the report's first screen
and the Markdown summary show it as "What to do"), not a description of the contention; advice a
user's rules set stays as written."""

from __future__ import annotations

import dataclasses

from diagnose.checks import gil_contention
from diagnose.checks.base import Finding
from tests.replay import replay
from tests.unit.test_gc_pressure import GIL_WAIT, PYTHON, analysis


def contended():
    # one thread runs gather_candidates (line 12) holding the GIL, three wait for it
    return analysis({1: [(PYTHON, 60)], **{tid: [(GIL_WAIT, 60)] for tid in (2, 3, 4)}})


def test_the_first_advice_names_the_holders_line_and_the_levers():
    found = gil_contention.run_with_floor(contended(), gil_contention.Settings())
    assert isinstance(found, Finding) and found.sites[0].function == "gather_candidates"
    first = found.advice[0]
    assert first.startswith("Vectorize gather_candidates (")
    assert ":12)" in first and "process pool" in first
    # the rest of the default advice follows it, the replaced lines not repeated
    assert found.advice[1:] == gil_contention.Settings().advice[2:]


def test_advice_set_by_a_users_rules_is_kept_as_written():
    mine = ("Move the scoring to the batch job.", "Then measure again.")
    found = gil_contention.run_with_floor(contended(), dataclasses.replace(gil_contention.Settings(), advice=mine))
    assert isinstance(found, Finding) and found.advice == mine


def test_a_holder_spread_over_many_lines_is_not_a_loop_to_vectorise(tmp_path):
    # fixtures/servers/metrics_emitter.py under gunicorn gthread: 4 threads re-take the GIL after
    # each of 400 sendto calls a request; the top holder line (the server's selector) was seen at
    # 6% of the instants threads waited. It read "Vectorize _PollLikeSelector.register".
    report = replay("kernel", "metrics_per_datagram_gthread", tmp_path)
    found = next(f for f in report.findings if f.id == "gil_contention")
    assert found.sites[0].share < gil_contention.DIFFUSE_HOLDER_SHARE
    assert "no line held it long: the holder was spread over many lines" in found.summary
    assert found.advice[0] == gil_contention.DIFFUSE_ADVICE
    assert found.advice[1:] == gil_contention.Settings().advice[2:]
