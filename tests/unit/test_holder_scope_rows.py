"""The holder search picks a scope's rows by their stacks before expanding them into instants
(model/waits.py `_holders`): the same holders as expanding every candidate row and keeping the
scope's instants afterwards, as it did before."""

from __future__ import annotations

import numpy as np
import pytest

from diagnose.classify.categories import Categorizer
from diagnose.model import waits
from diagnose.model.analysis import analyze_profile
from diagnose.samples.profile import sorted_distinct
from diagnose.vocab import ThreadState, WaitKind
from diagnose.readers.loaders import load_profile
from tests.conftest import RECORDED

RECORDINGS = ["lock_contention", "preprocess_bound", "scheduler_overhead", "underloaded", "compute_bound"]


def _expand_then_pick(analysis, all_samples, waiters, waiting, wait_ticks, kind):
    """The search as it was: every candidate row expanded, then the scope's instants kept."""
    interval = analysis.profile.interval_s or 0.01
    codes, categories = all_samples.state.codes, list(all_samples.state.categories)
    mask = waits._meets(all_samples, wait_ticks)
    mask &= codes != categories.index(ThreadState.LOCK)
    if kind == WaitKind.GIL:
        mask &= codes == categories.index(ThreadState.PYTHON)
    row_ids = np.flatnonzero(mask)
    if kind not in (WaitKind.GIL, WaitKind.LOGGING):
        site_id = int(waiters.loc[:, "site"].iloc[0])
        row_ids = row_ids[~waits._stacks_holding(analysis, all_samples.stack[row_ids], lambda f, fid: fid == site_id)]
    every = waits._instants_at(all_samples, row_ids, wait_ticks, waiting, interval)
    if kind == WaitKind.GIL:
        return waits._rank(analysis, every, len(wait_ticks), None), "running Python", waits._max_threads(every)
    frames = [analysis.frame(f) for f in analysis.profile.stacks[int(waiters.loc[:, "stack"].iloc[0])]]
    site_frame = analysis.frame(int(waiters.loc[:, "site"].iloc[0]))
    scopes = [site_frame]
    if kind == WaitKind.LOGGING:
        scopes = [f for f in frames if not f.native and f.file.endswith("logging/__init__.py")
                  and f.function.rsplit(".", 1)[-1] == "handle"][-1:] or scopes
    position = next((i for i, f in enumerate(frames) if f == site_frame), None)
    if position is not None:
        caller = next((f for f in reversed(frames[:position]) if not f.native), None)
        if caller is not None:
            scopes.append(caller)
    rows = np.arange(len(every))
    best = None
    for scope in scopes:
        in_scope = rows[waits._stacks_holding(analysis, every.stack, waits._in_function_of(scope))]
        coverage = len(sorted_distinct(every.tick[in_scope]))
        if coverage and (best is None or coverage > best[0]):
            best = (coverage, scope, in_scope)
        if best is not None and best[0] >= waits.MIN_SCOPE_COVERAGE * len(wait_ticks):
            break
    if best is None:
        return (), "", 0
    _, scope, in_scope = best
    inside = waits._Columns(all_samples, every.row[in_scope], every.tick[in_scope])
    return waits._rank(analysis, inside, len(wait_ticks), scope), scope.function, waits._max_threads(inside)


@pytest.mark.parametrize("name", RECORDINGS)
@pytest.mark.parametrize("native", [True, False])
def test_scope_rows_picked_before_expanding_give_the_same_holders(name: str, native: bool,
                                                                   monkeypatch) -> None:
    profile = load_profile(RECORDED / f"{name}.speedscope.json")
    native_profile = load_profile(RECORDED / f"{name}.native.speedscope.json") if native else None
    analysis = analyze_profile(profile, Categorizer(), native_profile=native_profile)
    now = waits.wait_sites(analysis, holders_for=8)
    monkeypatch.setattr(waits, "_holders", _expand_then_pick)
    before = waits.wait_sites(analysis, holders_for=8)
    assert now == before
    if name == "lock_contention" and native:  # a lock site's holders, found in its scope
        assert any(s.holders and s.kind != WaitKind.GIL for s in now)


def test_a_scope_with_no_candidate_rows_has_no_instants() -> None:
    analysis = analyze_profile(load_profile(RECORDED / "lock_contention.speedscope.json"), Categorizer())
    samples = analysis.samples
    rows = waits._Rows(thread=samples.loc[:, "thread"].to_numpy(), stack=samples.loc[:, "stack"].to_numpy(),
                       state=samples.loc[:, "state"].array, count=samples.loc[:, "count"].to_numpy(),
                       t=samples.loc[:, "t"].to_numpy(), steps=np.full(1 + int(samples.loc[:, "thread"].max()), np.nan),
                       interval=0.01)
    waiting = waits._Waited(np.array([0], dtype=np.int32), np.array([3], dtype=np.int64))
    found = waits._instants_at(rows, np.empty(0, dtype=np.int64), np.array([3]), waiting, 0.01)
    assert len(found) == 0
