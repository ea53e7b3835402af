"""Where request threads block, on what, and who holds it.

Wait sites are grouped by the acquiring Python frame (the `with lock:` / `.acquire()` /
`pool.get()` line) and kind. For the top sites, "holders" are read from the other threads at
the same sample instants: the threads that were inside the same function (the critical
section) without waiting at the site. For the GIL, the holders are the threads running Python.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import pandas as pd

from diagnose.samples.profile import Frame, sorted_distinct, sums_by_code
from diagnose.model.runs import instant_ticks, instants_per_row, row_slices, thread_steps
from diagnose.model.sampled import SampledProcess
from diagnose.vocab import CONTENDED, ThreadState, WaitKind
# The wait sites are the report's own values (report/model/sections.py).
from diagnose.report.model.sections import Holder, WaitSite

__all__ = ["Holder", "WaitSite", "wait_sites", "describe", "KIND_LABELS"]

KIND_LABELS = {
    WaitKind.LOCK: "Lock", WaitKind.RLOCK: "RLock", WaitKind.CONDITION: "Condition",
    WaitKind.SEMAPHORE: "Semaphore", WaitKind.QUEUE: "Queue", WaitKind.LOGGING: "logging handler lock",
    WaitKind.NATIVE_MUTEX: "native mutex", WaitKind.GIL: "GIL", WaitKind.EVENT: "Event",
    WaitKind.JOIN: "Thread.join", WaitKind.BARRIER: "Barrier", WaitKind.FUTURE: "Future.result",
}
HOLDER_PATH_FRAMES = 6
MIN_SCOPE_COVERAGE = 0.2


_SLICE_INSTANTS = 1 << 20  # instants expanded at a time: the transients stay a few tens of MB


@dataclass(frozen=True)
class _Rows:
    """The sample table's columns the holder search reads, as the table's own arrays (no copy),
    and each thread's run step (model/runs.py): a row may stand for a run of instants."""

    thread: np.ndarray
    stack: np.ndarray
    state: pd.Categorical
    count: np.ndarray
    t: np.ndarray
    steps: npt.NDArray[np.float64]
    interval: float

    @functools.cached_property
    def tick_span(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Each row's first and last tick (read once for every site's search)."""
        first = _ticks(self.t, self.interval)
        per = instants_per_row(self.thread, self.count, self.steps)
        if int(per.max(initial=1)) == 1:
            return first, first
        step = np.nan_to_num(self.steps, nan=0.0)[self.thread]
        return first, _ticks(self.t + (per - 1) * step, self.interval)


@dataclass(frozen=True)
class _Columns:
    """Instants of the sample table's rows: the row each belongs to and its tick. The other
    columns are read from the rows when asked (millions of instants hold 12 bytes each, not
    the 33 of every column)."""

    rows: _Rows
    row: np.ndarray  # int32 indices into `rows`
    tick: npt.NDArray[np.int64]

    @property
    def thread(self) -> np.ndarray:
        found: np.ndarray = self.rows.thread[self.row]
        return found

    @property
    def stack(self) -> np.ndarray:
        found: np.ndarray = self.rows.stack[self.row]
        return found

    @property
    def state(self) -> pd.Categorical:
        """The categorical itself: its codes are compared, its categories named."""
        return self.rows.state[self.row]

    @property
    def count(self) -> np.ndarray:
        """The samples each instant stands for: 1 in a run, a row's own count where the row is
        one instant."""
        count: np.ndarray = self.rows.count[self.row]
        merged = ~np.isnan(self.rows.steps)
        if not merged.any():
            return count
        # an instant of a run (count >= 1, the run's instants) stands for one sample
        found: np.ndarray = np.where(merged[self.rows.thread[self.row]], 1, count)
        return found

    def __len__(self) -> int:
        return len(self.tick)


def _ticks(t: np.ndarray, interval: float) -> npt.NDArray[np.int64]:
    ticks: npt.NDArray[np.int64] = np.round(t / interval).astype(np.int64)
    return ticks


@dataclass(frozen=True)
class _Waited:
    """The instants some threads waited at a site: (thread, tick) of each, a run expanded."""

    thread: np.ndarray
    tick: npt.NDArray[np.int64]

    @staticmethod
    def of(rows: pd.DataFrame, steps: npt.NDArray[np.float64], interval: float) -> "_Waited":
        thread, t, count = rows["thread"].to_numpy(), rows["t"].to_numpy(), rows["count"].to_numpy()
        threads, ticks = [], []
        for part in row_slices(np.arange(len(rows)), thread, count, steps, _SLICE_INSTANTS):
            found = instant_ticks(part, thread, t, count, steps, interval)
            threads.append(thread[found.row])
            ticks.append(found.tick)
        if not threads:
            return _Waited(thread[:0], np.empty(0, dtype=np.int64))
        return _Waited(np.concatenate(threads), np.concatenate(ticks))


def _weighted_mode(values: np.ndarray, weights: np.ndarray) -> int:
    """The most common value counting each row `weights` times (the smallest of the ties), as
    the mode of the rows laid out one per instant would be."""
    sums = pd.Series(weights).groupby(values).sum()
    return int(sums.idxmax())


def _is_waiting(samples: pd.DataFrame) -> pd.Series:
    return (samples["state"].isin(CONTENDED)) | (samples["wait_kind"] == WaitKind.NATIVE_MUTEX)


def wait_sites(analysis: SampledProcess, limit: int = 8, holders_for: int = 5) -> list[WaitSite]:
    req = analysis.request_samples()
    total = float(req["count"].sum())
    if total == 0:
        return []
    # the waiting rows, with only the columns read below (a copy of 6 columns, not 13)
    waiting = req.loc[_is_waiting(req).to_numpy(), ["thread", "t", "stack", "count", "wait_kind", "site"]]
    if waiting.empty:
        return []
    interval = analysis.profile.interval_s or 0.01
    kind_codes = waiting["wait_kind"].cat.codes.to_numpy()
    gil_code = list(waiting["wait_kind"].cat.categories).index(WaitKind.GIL)
    key_site = np.where(kind_codes == gil_code, -1, waiting["site"].to_numpy())
    # Grouped by (wait kind code, site), then put in the order grouping by the kind's text
    # would give (so the ranking below breaks ties as it always has).
    codes, sites_of_key, samples, threads = _group_by_site(
        kind_codes, key_site, waiting["count"].to_numpy(), waiting["thread"].to_numpy())
    categories = list(waiting["wait_kind"].cat.categories)
    names = [str(categories[int(code)]) for code in codes]
    grouped = pd.DataFrame({"samples": samples, "threads": threads},
                           index=pd.MultiIndex.from_arrays([names, sites_of_key], names=["kind", "key_site"]))
    grouped = grouped.sort_index().sort_values("samples", ascending=False).head(limit)
    timed = analysis.samples["t"].notna().all()
    steps = thread_steps(analysis.profile)
    # The columns the holder search reads, as the table's own arrays (no copy); rows are
    # expanded into instants only once they are known to meet a waiting instant.
    all_samples = (_Rows(thread=analysis.samples["thread"].to_numpy(),
                         stack=analysis.samples["stack"].to_numpy(),
                         state=analysis.samples["state"].array,
                         count=analysis.samples["count"].to_numpy(),
                         t=analysis.samples["t"].to_numpy(), steps=steps, interval=interval)
                   if timed else None)
    sites: list[WaitSite] = []
    for rank, ((kind, site_key), row) in enumerate(grouped.iterrows()):
        code = categories.index(kind)
        these = waiting[(kind_codes == code) & (key_site == site_key)]
        frame_id = int(site_key) if site_key >= 0 else _weighted_mode(
            these["site"].to_numpy(), instants_per_row(these["thread"].to_numpy(), these["count"].to_numpy(), steps))
        frame = analysis.frame(frame_id)
        max_concurrent = max_holders = 0
        holders: tuple[Holder, ...] = ()
        scope = ""
        if all_samples is not None:
            waited = _Waited.of(these, steps, interval)
            ticks = waited.tick
            max_concurrent = int(np.bincount(ticks - ticks.min()).max()) if len(ticks) else 0
            if rank < holders_for:
                holders, scope, max_holders = _holders(analysis, all_samples, these, waited,
                                                       sorted_distinct(ticks), kind)
        site = WaitSite(
            kind=kind, label=KIND_LABELS.get(kind, kind), function=frame.function, file=frame.file,
            line=frame.line, samples=int(row["samples"]),
            thread_seconds=round(float(row["samples"]) * interval, 4), threads=int(row["threads"]),
            max_concurrent=max_concurrent, share=round(float(row["samples"]) / total, 4),
            holders=holders, holder_scope=scope, max_holders=max_holders)
        sites.append(replace(site, summary=describe(site)))
    return sites


def _group_by_site(kind_codes: np.ndarray, key_site: np.ndarray, count: np.ndarray, thread: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct (wait kind code, site key), in that order: the code, the site key, the
    samples and the distinct threads (pandas' groupby().agg(sum, nunique), at a tenth of its
    cost on a process's few hundred waiting rows)."""
    # a site key is a frame id (>= 0) or -1: one int64 per pair, ordered as the pairs are
    pair = kind_codes.astype(np.int64) * (1 << 32) + (key_site.astype(np.int64) + 1)
    keys, at = np.unique(pair, return_inverse=True)
    samples = np.zeros(len(keys), dtype=np.int64)
    np.add.at(samples, at, count.astype(np.int64, copy=False))
    span = int(thread.max()) + 1 if len(thread) else 1
    distinct = np.unique(at.astype(np.int64) * span + thread.astype(np.int64))
    threads = np.bincount(distinct // span, minlength=len(keys)).astype(np.int64)
    codes = (keys >> 32).astype(kind_codes.dtype)
    sites = ((keys & 0xFFFFFFFF) - 1).astype(key_site.dtype)
    return codes, sites, samples, threads


def _thread_tick_keys(thread: np.ndarray, tick: np.ndarray) -> npt.NDArray[np.int64]:
    """One int64 per (thread, tick), for fast set membership with np.isin."""
    keys: npt.NDArray[np.int64] = thread.astype(np.int64) * (1 << 32) + tick.astype(np.int64)
    return keys


def _member(values: np.ndarray, members: np.ndarray) -> npt.NDArray[np.bool_]:
    """`np.isin(values, members)` for non-negative integers: a lookup table when the range is
    small enough (one pass, no sort), else np.isin."""
    if not len(values) or not len(members):
        return np.zeros(len(values), dtype=bool)
    low = min(int(values.min()), int(members.min()))
    high = max(int(values.max()), int(members.max()))
    if low >= 0 and high < (1 << 27):
        table = np.zeros(high + 1, dtype=bool)
        table[members] = True
        found: npt.NDArray[np.bool_] = table[values]
        return found
    return np.isin(values, members)


def _stacks_holding(analysis: SampledProcess, stack_ids: np.ndarray,
                    frame_test: Callable[[Frame, int], bool]) -> npt.NDArray[np.bool_]:
    """A row mask: the row's stack holds a frame for which `frame_test(frame, frame id)` is
    true. Each frame is tested once; the stacks are read by numpy (Profile.stacks_with_any)."""
    profile = analysis.profile
    marked = [bool(frame_test(f, fid)) for fid, f in enumerate(profile.frames)]
    holding: npt.NDArray[np.bool_] = profile.stacks_with_any(np.array(marked, dtype=bool))[stack_ids]
    return holding


def _meets(all_samples: _Rows, wait_ticks: np.ndarray) -> npt.NDArray[np.bool_]:
    """A row mask: some waiting tick (of the sorted `wait_ticks`) lies between the row's first
    and last instant. A run whose step is longer than the interval may skip it: the candidates
    are exact only once expanded, which the caller does."""
    first, last = all_samples.tick_span
    if first is last:
        return _member(first, wait_ticks)
    if not len(wait_ticks):
        return np.zeros(len(first), dtype=bool)
    low, high = int(min(first.min(initial=0), wait_ticks[0])), int(max(last.max(initial=0), wait_ticks[-1]))
    if high - low < (1 << 27):
        # waiting ticks up to each tick, by a prefix count over the ticks' range
        upto = np.zeros(high - low + 2, dtype=np.int64)
        upto[wait_ticks - low + 1] = 1
        np.cumsum(upto, out=upto)
        met: npt.NDArray[np.bool_] = upto[last - low + 1] > upto[first - low]
        return met
    found: npt.NDArray[np.bool_] = (np.searchsorted(wait_ticks, first, side="left")
                                    < np.searchsorted(wait_ticks, last, side="right"))
    return found


def _instants_at(all_samples: _Rows, row_ids: np.ndarray, wait_ticks: np.ndarray, waiting: _Waited,
                 interval: float) -> _Columns:
    """The instants of `row_ids` that fall on a waiting tick, but the waiters' own (threads
    waiting at this very site are waiters, not holders), in row order. Rows are expanded a
    slice at a time and only the instants kept are gathered."""
    if not len(row_ids):  # (a scope no candidate row is in: no table to build)
        return _Columns(all_samples, np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
    waiter_thread, waiter_tick = waiting.thread, waiting.tick
    threads = int(max(all_samples.thread.max(initial=0), waiter_thread.max(initial=0))) + 1
    # the kept instants' ticks are waiting ticks: the waiters' span bounds them
    span = int(waiter_tick.max(initial=0)) + 1
    first_tick = all_samples.tick_span[0]
    # an instant's tick is at least its row's first: none is negative when no row's first is
    table = (int(waiter_tick.min(initial=0)) >= 0 and int(first_tick.min(initial=0)) >= 0
             and threads * (span + 1) < (1 << 27))
    if table:
        # one thread x tick table of the cells to keep: a waiting tick, not a waiter's own;
        # a last column, never kept, for the ticks past the waiters' last
        width = span + 1
        cells = np.zeros((threads, width), dtype=bool)
        cells[:, wait_ticks] = True
        cells[waiter_thread, waiter_tick] = False
        keep_cells = cells.ravel()
    else:
        waiter_keys = _thread_tick_keys(waiter_thread, waiter_tick)
    kept_rows, kept_ticks = [], []
    for part in row_slices(row_ids, all_samples.thread, all_samples.count, all_samples.steps, _SLICE_INSTANTS):
        found = instant_ticks(part, all_samples.thread, all_samples.t, all_samples.count,
                              all_samples.steps, interval)
        tick = found.tick
        if table:
            cell = np.repeat(all_samples.thread[part].astype(np.int64) * width, found.per_row)
            cell += np.minimum(tick, span)
            keep = keep_cells[cell]
            del cell
        else:
            keep = _member(tick, wait_ticks)
            thread = all_samples.thread[found.row[keep]]
            keep[keep] = ~np.isin(_thread_tick_keys(thread, tick[keep]), waiter_keys)
        kept_rows.append(found.row[keep])
        kept_ticks.append(tick[keep])
    if not kept_rows:
        return _Columns(all_samples, np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
    return _Columns(all_samples, np.concatenate(kept_rows), np.concatenate(kept_ticks))


def _holders(analysis: SampledProcess, all_samples: _Rows, waiters: pd.DataFrame, waiting: _Waited,
             wait_ticks: np.ndarray, kind: str) -> tuple[tuple[Holder, ...], str, int]:
    """`waiting`: the waiters' instants; `wait_ticks`: the distinct ticks at which they waited."""
    # The other threads' rows that meet a waiting instant, chosen by one mask over the rows'
    # arrays, then expanded into their instants and kept at the waiting ticks.
    interval = analysis.profile.interval_s or 0.01
    state = all_samples.state
    codes = state.codes
    categories = list(state.categories)
    mask = _meets(all_samples, wait_ticks)
    # Threads blocked on a lock themselves (at another call site of the same logger, say) are
    # waiters too, not holders; for the GIL, the holders are the threads running Python, and
    # those running C code the interpreter named the holder in (json's decoder, a regex).
    mask &= codes != categories.index(ThreadState.LOCK)
    if kind == WaitKind.GIL:
        python = codes == categories.index(ThreadState.PYTHON)
        holding = analysis.gil_holding_stacks
        if holding and ThreadState.NATIVE in categories:
            python |= ((codes == categories.index(ThreadState.NATIVE))
                       & np.isin(all_samples.stack, np.fromiter(holding, dtype=np.int64)))
        mask &= python
    row_ids = np.flatnonzero(mask)
    # Threads anywhere inside the acquire call itself (waiting, or re-taking the GIL after it)
    # do not hold the resource yet. Not so for logging: the holder logs from the same call site
    # and is deep inside the handler's emit.
    if kind not in (WaitKind.GIL, WaitKind.LOGGING):
        site_id = int(waiters["site"].iloc[0])
        row_ids = row_ids[~_stacks_holding(analysis, all_samples.stack[row_ids], lambda f, fid: fid == site_id)]
    if kind == WaitKind.GIL:
        others = _instants_at(all_samples, row_ids, wait_ticks, waiting, interval)
        return (_rank(analysis, others, len(wait_ticks), scope_function=None), "running Python",
                _max_threads(others))
    stack = analysis.profile.stacks[int(waiters["stack"].iloc[0])]
    frames = [analysis.frame(f) for f in stack]
    site_frame = analysis.frame(int(waiters["site"].iloc[0]))
    # The critical section is the function that waits; for a pool whose acquire is a helper
    # (pool.acquire -> queue.get), the caller holds the resource while it works.
    scopes = [site_frame]
    if kind == WaitKind.LOGGING:
        # The handler's lock is taken in Handler.handle: its occupants are the holders.
        scopes = [f for f in frames if not f.native and f.file.endswith("logging/__init__.py")
                  and f.function.rsplit(".", 1)[-1] == "handle"][-1:] or scopes
    position = next((i for i, f in enumerate(frames) if f == site_frame), None)
    if position is not None:
        caller = next((f for f in reversed(frames[:position]) if not f.native), None)
        if caller is not None:
            scopes.append(caller)
    # The innermost scope that explains a fair share of the waiting instants wins: the lock's
    # own function (the with-block) before its caller (which holds a pooled resource). Rows are
    # chosen by their stacks alone, before they are expanded: a scope's instants are those of
    # its rows (expanding a row keeps or drops each instant by its thread and tick alone).
    stacks = all_samples.stack[row_ids]
    best: tuple[int, Frame, _Columns] | None = None
    for scope in scopes:
        scope_rows = row_ids[_stacks_holding(analysis, stacks, _in_function_of(scope))]
        in_scope = _instants_at(all_samples, scope_rows, wait_ticks, waiting, interval)
        coverage = len(sorted_distinct(in_scope.tick))
        if coverage and (best is None or coverage > best[0]):
            best = (coverage, scope, in_scope)
        if best is not None and best[0] >= MIN_SCOPE_COVERAGE * len(wait_ticks):
            break
    if best is None:
        return (), "", 0
    _, scope, inside = best
    return (_rank(analysis, inside, len(wait_ticks), scope_function=scope), scope.function,
            _max_threads(inside))


def _in_function_of(scope: Frame) -> Callable[[Frame, int], bool]:
    """A frame test for `_stacks_holding`: the frame runs the same function as `scope`."""
    return lambda f, fid: f.function == scope.function and f.file == scope.file


def _max_threads(samples: _Columns) -> int:
    """How many threads are usually inside the scope at once while others wait: the most
    common count over the waiting instants (a saturated pool is full whenever someone waits;
    the maximum would count torn or misaligned samples)."""
    if not len(samples):
        return 0
    # threads per instant from the distinct (tick, thread) pairs; then the most common count
    # (the largest, when several are as common)
    tick = samples.tick
    thread = samples.thread
    width = int(thread.max()) + 1
    keys = tick - tick.min()
    keys *= width
    keys += thread
    pairs = sorted_distinct(keys)
    del keys
    ticks = pairs // width  # sorted: each tick's pairs are one run
    starts = np.flatnonzero(np.r_[True, ticks[1:] != ticks[:-1]])
    per_instant = np.diff(np.r_[starts, len(ticks)])
    frequency = np.bincount(per_instant)
    return int(np.flatnonzero(frequency == frequency.max())[-1])


def _holder_path(analysis: SampledProcess, stack_id: int, scope: Frame | None
                 ) -> tuple[tuple[str, ...], str, Frame, int]:
    """(Python frames from the critical section down, the C call under them, the leaf Python
    frame, the first of those frames' line)."""
    frames = [analysis.frame(f) for f in analysis.profile.stacks[stack_id]]
    start = 0
    if scope is not None:
        start = max((i for i, f in enumerate(frames)
                     if f.function == scope.function and f.file == scope.file), default=0)
    python_frames = [f for f in frames[start:] if not f.native]
    if scope is None:
        python_frames = python_frames[-3:]  # GIL holders: the hot spot, not the thread's root
    last_python = max((i for i, f in enumerate(frames) if not f.native), default=-1)
    # The first resolved native frame under the last Python frame names the C call being made.
    entry = next((f.function for f in frames[last_python + 1:] if not f.function.startswith("0x")), "")
    leaf = python_frames[-1] if python_frames else frames[-1]
    names = [f.function for f in python_frames]
    if len(names) > HOLDER_PATH_FRAMES:
        names = names[:2] + ["…"] + names[-(HOLDER_PATH_FRAMES - 3):]
    return tuple(names), entry, leaf, python_frames[0].line if python_frames else 0


def _rank(analysis: SampledProcess, samples: _Columns, instants: int, scope_function: Frame | None
          ) -> tuple[Holder, ...]:
    """Holders grouped by their Python path (native leaves vary sample to sample), ranked by
    the share of waiting instants at which some thread was on that path."""
    if not len(samples) or instants == 0:
        return ()
    # Each distinct stack's path is read once; rows carry it as an integer code (int32: there
    # may be millions of instants, each column of them is read once or twice).
    stack_ids = samples.stack
    distinct = sorted_distinct(stack_ids)
    position = np.zeros(int(distinct[-1]) + 1, dtype=np.int32)
    position[distinct] = np.arange(len(distinct), dtype=np.int32)
    row_stack = position[stack_ids]
    del stack_ids
    paths = [_holder_path(analysis, int(sid), scope_function) for sid in distinct.tolist()]
    path_ids: dict[tuple[str, ...], int] = {}
    entry_ids: dict[str, int] = {}
    stack_path = np.array([path_ids.setdefault(p[0], len(path_ids)) for p in paths], dtype=np.int32)
    stack_entry = np.array([entry_ids.setdefault(p[1], len(entry_ids)) for p in paths], dtype=np.int32)
    path_names = list(path_ids)
    entry_names = list(entry_ids)
    row_path = stack_path[row_stack]
    state_names = [str(c) for c in samples.rows.state.categories]
    # distinct waiting instants per path, from the distinct (path, tick) pairs
    tick = samples.tick
    low = int(tick.min())
    span = int(tick.max()) - low + 1
    keys = row_path.astype(np.int64) * span
    keys += tick
    keys -= low
    pairs = sorted_distinct(keys)
    del keys
    per_path = np.bincount(pairs // span)
    present = np.flatnonzero(per_path)
    ticks_per_path = pd.Series(per_path[present], index=present)
    # Ranked as grouping by the path tuples themselves would (sorted by path, then by count).
    order = sorted(range(len(ticks_per_path)), key=lambda i: path_names[int(ticks_per_path.index[i])])
    per_path = pd.Series(ticks_per_path.to_numpy()[order],
                         index=pd.Index([path_names[int(ticks_per_path.index[i])] for i in order],
                                        tupleize_cols=False, dtype=object))
    per_path = per_path.sort_values(ascending=False).head(5)
    # per (path, entry) and (path, state): summed counts of all the instants in one pass each,
    # integer codes only (no string per sample), rather than a pass per ranked path
    row_count = samples.count
    n_entries, n_states = len(entry_names), len(state_names)
    by_entry = _sums_by_path(row_path, stack_entry[row_stack], n_entries, row_count, len(path_names))
    by_state = _sums_by_path(row_path, np.asarray(samples.state.codes), n_states, row_count, len(path_names))
    holders = []
    for path, n in per_path.items():
        path_id = path_ids[path]
        by_name = sorted(((entry_names[e], int(c)) for e, c in by_entry.get(path_id, [])), key=lambda x: x[0])
        best = max(c for _, c in by_name)
        entry = next(name for name, c in by_name if c == best)
        first = paths[int(row_stack[int(np.argmax(row_path == path_id))])]  # its first instant's
        leaf = first[2]
        stack = tuple(path) + ((entry,) if entry else ())
        states = [(state_names[k], int(c)) for k, c in by_state.get(path_id, [])]
        state = str(sorted(states, key=lambda kv: (-kv[1], kv[0]))[0][0]) if states else ""
        holders.append(Holder(stack, leaf.function, leaf.file, leaf.line,
                              round(n / instants, 4), int(n), first[3], state))
    return tuple(holders)


def _sums_by_path(path: np.ndarray, codes: np.ndarray, n_codes: int, counts: np.ndarray,
                  n_paths: int) -> dict[int, list[tuple[int, float]]]:
    """Per path: `sums_by_code` of the codes of its instants (code order, present codes)."""
    key = path.astype(np.int64) * n_codes
    key += codes
    found: dict[int, list[tuple[int, float]]] = {}
    for pair, total in sums_by_code(key, counts, n_paths * n_codes):
        found.setdefault(pair // n_codes, []).append((pair % n_codes, total))
    return found


def describe(site: WaitSite) -> str:
    """'while 6 threads waited at server.py:88, the holder was in A → B (82% of those instants)'"""
    where = f"{site.file.rsplit('/', 1)[-1]}:{site.line}"
    waited = f"while up to {site.max_concurrent} threads waited" if site.max_concurrent else "while threads waited"
    if site.kind == WaitKind.GIL:
        waited += " for the GIL"
        if site.holders:
            h = site.holders[0]
            return (f"{waited}, the GIL holder was running {' → '.join(h.stack[-3:])} "
                    f"({100 * h.share:.0f}% of those instants)")
        return waited
    if not site.holders:
        return f"{waited} at {where} ({site.label}), no holder was seen inside {site.function}"
    h = site.holders[0]
    return (f"{waited} at {where} ({site.label}), the holder was in {' → '.join(h.stack)} "
            f"({100 * h.share:.0f}% of those instants)")
