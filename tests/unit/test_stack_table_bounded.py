"""A recording of more distinct stacks than the report carries: the report's stack table keeps
the heaviest rows and folds the rest per thread, state and category into labelled rows, so every
total still adds up, the verdict and findings are those of the whole table, the notes (shown on
the page) say what was folded, and the speedscope output still has every stack."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from diagnose.model import stack_rows as stack_table
from diagnose.report.model import Report, StackRow, Stacks
from diagnose.run.pipeline import from_file
from tests.conftest import RECORDED, report_of

PROFILE = RECORDED / "lock_contention.native.speedscope.json"


def _report(tmp_path, name: str) -> tuple[Report, str, dict]:
    """The report as written (its .json read back), its page, and its speedscope file."""
    out = from_file(PROFILE, tmp_path / name, None)
    return (report_of(out.json), out.html.read_text(encoding="utf-8"),
            json.loads(out.speedscope.read_text()))


def _totals(stacks: Stacks, keys: tuple[str, ...]) -> Counter:
    totals: Counter = Counter()
    for row in stacks.samples:
        totals[tuple(getattr(row, k) for k in keys)] += row.count
    return totals


def _named(report: Report, rows: tuple[StackRow, ...]) -> list[tuple]:
    """Rows with their frames spelled out (frame numbering may differ between reports)."""
    f = report.stacks.frames
    return [(tuple(f[i].function + f[i].file + str(f[i].line) for i in r.stack),
             r.tid, r.thread, r.pid, r.role, r.state, r.category, r.count) for r in rows]


@pytest.fixture
def whole_and_folded(tmp_path, monkeypatch):
    whole = _report(tmp_path, "whole")
    rows = len(whole[0].stacks.samples)
    assert rows > 10  # the recording has enough rows to fold some
    monkeypatch.setattr(stack_table, "MAX_STACK_ROWS", rows // 3)
    return whole, _report(tmp_path, "folded"), rows // 3


def test_folded_table_keeps_the_heaviest_rows_and_every_total(whole_and_folded):
    (whole, _, _), (folded, _, _), cap = whole_and_folded
    kept = folded.stacks.samples[:cap]
    rest = folded.stacks.samples[cap:]
    frames = folded.stacks.frames
    assert rest and all(frames[r.stack[0]].function == stack_table.FOLDED_FUNCTION
                        and len(r.stack) == 1 for r in rest)
    assert _named(folded, kept) == _named(whole, whole.stacks.samples[:cap])
    for keys in (("tid",), ("state",), ("category",), ("tid", "state", "category")):
        assert _totals(folded.stacks, keys) == _totals(whole.stacks, keys)
    # one folded row per (thread, state, category) the folded rows had
    lighter = whole.stacks.samples[cap:]
    assert len(rest) == len({(r.tid, r.state, r.category) for r in lighter})


def test_folding_leaves_verdict_findings_and_speedscope_as_they_were(whole_and_folded):
    (whole, _, whole_speedscope), (folded, _, folded_speedscope), _ = whole_and_folded
    for key in ("verdict", "findings", "waits", "threads", "structure", "event_loops"):
        assert getattr(folded, key) == getattr(whole, key)
    assert folded_speedscope == whole_speedscope


def test_the_notes_and_the_page_say_what_was_folded(whole_and_folded):
    (whole, _, _), (folded, html, _), cap = whole_and_folded
    assert not any("folded" in n for n in whole.sampling.notes)
    note = next(n for n in folded.sampling.notes if stack_table.FOLDED_FUNCTION in n)
    rows = len(whole.stacks.samples)
    assert f"the {cap:,} heaviest of {rows:,}" in note and f"the other {rows - cap:,}" in note
    assert ".speedscope.json" in note
    assert stack_table.FOLDED_FUNCTION in html
