"""The process's structure, read from the samples: which threads play which part, and who waits
for whom.

Threads are grouped by what they loop on: the outermost user function of their stacks (the
function a `threading.Thread` runs, the function a pool worker's work items run). A group is a
*stage* when its threads take work from a queue at the top of their loop (`q.get()` in the loop
function) — pipeline stages and batchers; the queues join the stages, matched by the name the
code gives the queue at its `get` / `put` sites (`decoded.put(...)` in one stage and
`decoded.get()` in another are one queue). Wait-for edges:

- starved: a stage waiting in `get` on its input queue waits for the stage that puts to it;
- backpressure: a stage blocked in `put` into a full queue waits for the stage that gets from it;
- result: a thread waiting for its own result (`Future.result()`, `Event.wait()`) waits for the
  stage that serves the queue it submitted to (the `put` / `submit` just above the wait);
- lock / GIL: from the wait-site table (model/waits.py) — a lock waits for its holder.

The bottleneck stage, by the utilization law: the stage whose threads are busiest serving (a GIL
wait on the way back from a get, a put or a result wait is the handoff's, not service; other GIL
waits serve the stage in the share of the process's running Python its own threads hold, and
otherwise wait behind the stage that holds the GIL) relative
to their number while a neighbour waits on it (its upstream blocked on put, its downstream starved
on get, or threads waiting for their results).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import pandas as pd

from diagnose.samples import source
from diagnose.samples.profile import Frame, frame_is, sorted_distinct
from diagnose.model.sampled import SampledProcess
from diagnose.vocab import (BUSY, GIL_BOUND, HANDOFF_EDGES, HELD_KINDS, EdgeKind, ProcessRole,
                                  StageRole, ThreadRole, ThreadState, WaitKind)
# The structure is the report's own value (report/model/sections.py).
from diagnose.report.model.sections import Edge, EventLoop, Stage, Structure, WaitSite

__all__ = ["Edge", "Stage", "Structure", "StageThreads", "build_structure", "is_entry",
           "loop_frame", "queue_op", "source_queue_ops"]


_QUEUE_CALL = re.compile(r"([A-Za-z_][\w]*)\s*(?:\[[^\]]*\])?\s*\.\s*(get|put|get_nowait|put_nowait|"
                         r"submit|append|appendleft|popleft)\s*\(")
_QUEUE_FILES = ("queue.py",)
_RESULT_WAIT = re.compile(r"^((Future\.)?result|(Event\.)?wait)$")
_PLUMBING = (("threading.py", re.compile(r"(_bootstrap|_bootstrap_inner|run)$")),
             ("concurrent/futures/thread.py", re.compile(r"(_worker|run)$")))
SUBMIT_LOOKBACK_LINES = 25  # how far above a result wait to look for the put/submit that fed it


def _queue_calls(text: str) -> list[tuple[str, str]]:
    """(object name, method) of each queue-like call on a source line."""
    calls: list[tuple[str, str]] = _QUEUE_CALL.findall(text)
    return calls


class _Views(SampledProcess, Protocol):
    """The structure reads, beside the samples, the process's event loops and wait sites."""

    @property
    def event_loops(self) -> list[EventLoop]: ...

    @property
    def waits(self) -> list[WaitSite]: ...


def is_entry(function: str, file: str) -> bool:
    """Where a thread started, not a loop that takes work: a module body (`<module>`, a script's
    top level) or the interpreter's bootstrap (runpy). Such a group is never a stage and never
    the bottleneck; the source "around" a module-level line is not a loop body to read."""
    return function == "<module>" or file.endswith("runpy.py") or file == "<frozen runpy>"


# The analysis's thread indices of each stage, by the stage's (function, file): the report's
# Stage carries its threads' tids; the checks read the samples of its threads by index.
StageThreads = dict[tuple[str, str], tuple[int, ...]]


def stage_key(stage: Stage) -> tuple[str, str]:
    return (stage.function, stage.file)


def loop_frame(frames: list[Frame]) -> int:
    """Index of the thread's loop function: the outermost frame that is not thread or pool
    plumbing (a pool worker's loop is the function its work items run)."""
    for i, f in enumerate(frames):
        if f.native or any(frame_is(f, s, p) for s, p in _PLUMBING):
            continue
        return i
    return -1


def _line(frame: Frame) -> str:
    try:
        return source.getline(frame.file, frame.line) if frame.line else ""
    except Exception:  # unreadable source is no evidence
        return ""


def queue_op(frames: list[Frame]) -> tuple[str, str, int] | None:
    """(op, queue name, caller index) when the stack is inside `queue.Queue.get/put`."""
    for i in range(len(frames) - 1, -1, -1):
        f = frames[i]
        if f.native or not f.file.endswith(_QUEUE_FILES):
            continue
        op = f.function.rsplit(".", 1)[-1]
        if op not in ("get", "put"):
            continue
        caller = next((j for j in range(i - 1, -1, -1)
                       if not frames[j].native and not frames[j].file.endswith(_QUEUE_FILES)), -1)
        if caller < 0:
            return None
        return op, _queue_name(frames[caller], op), caller
    return None


def _queue_name(frame: Frame, op: str) -> str:
    for name, call in _queue_calls(_line(frame)):
        if call.startswith(op):
            return name
    return f"{frame.function}:{frame.line}"


def source_queue_ops(frame: Frame) -> tuple[set[str], set[str]]:
    """(queues got from, queues put to) by the function of `frame`, read from its source: a
    stage's loop names its queues even when the samples never caught it inside get or put."""
    gets: set[str] = set()
    puts: set[str] = set()
    number = frame.line
    try:
        while number > 0:
            text = source.getline(frame.file, number)
            if not text:
                return gets, puts
            if re.match(r"\s*(async\s+)?def\s", text):
                break
            number -= 1
        if number <= 0:
            return gets, puts
        indent = len(text) - len(text.lstrip())
        for k in range(number + 1, number + 400):
            text = source.getline(frame.file, k)
            if not text:
                break
            if text.strip() and len(text) - len(text.lstrip()) <= indent:
                break
            for name, call in _queue_calls(text):
                (gets if call in ("get", "get_nowait", "popleft") else puts).add(name)
    except Exception:  # unreadable source: no evidence
        pass
    return gets, puts


def _may_queue_or_wait(f: Frame) -> bool:
    """The frames `queue_op` and `result_wait` look for: without one, a stack has neither."""
    if f.native:
        return False
    if f.file.endswith(_QUEUE_FILES) and f.function.rsplit(".", 1)[-1] in ("get", "put"):
        return True
    return bool((f.file.endswith("concurrent/futures/_base.py") and _RESULT_WAIT.match(f.function))
                or (f.file.endswith("threading.py") and f.function in ("Event.wait",)))


def result_wait(frames: list[Frame]) -> int | None:
    """Index of the caller when the stack waits for a result (Future.result / Event.wait)."""
    for i in range(len(frames) - 1, -1, -1):
        f = frames[i]
        if f.native:
            continue
        name = f.function
        if (f.file.endswith("concurrent/futures/_base.py") and _RESULT_WAIT.match(name)) or (
                f.file.endswith("threading.py") and name in ("Event.wait",)):
            caller = next((j for j in range(i - 1, -1, -1) if not frames[j].native
                           and not frames[j].file.endswith(("threading.py", "concurrent/futures/_base.py"))), -1)
            return caller if caller >= 0 else None
    return None


def _submitted_to(frame: Frame) -> str | None:
    """The queue a waiter fed: the nearest `x.put(` / `x.submit(` line above its wait line."""
    for number in range(frame.line - 1, max(0, frame.line - SUBMIT_LOOKBACK_LINES), -1):
        try:
            text = source.getline(frame.file, number)
        except Exception:
            return None
        for name, call in _queue_calls(text):
            if call in ("put", "put_nowait", "submit", "append", "appendleft"):
                return name
        if re.match(r"\s*(async\s+)?def\s", text):
            return None
    return None


def build_structure(analysis: _Views) -> tuple[Structure, StageThreads]:
    """The process's structure, and the thread indices of each of its stages."""
    if analysis.samples.empty:
        return Structure(), {}
    rows = _stage_rows(analysis, _loop_frames(analysis), _queue_ops_by_stack(analysis))
    stages = []
    stage_threads: StageThreads = {}
    for (function, file), threads in _loop_groups(rows).items():
        stages.append(_stage(analysis, rows, function, file, threads))
        stage_threads[(function, file)] = tuple(threads)
    structure = Structure(stages=tuple(sorted(stages, key=lambda s: -s.busy_thread_seconds)))
    return _link(structure, analysis), stage_threads


# A stack's queue op (op, queue name, caller index) and the queue a result wait in it fed
_StackOps = tuple[tuple[str, str, int] | None, str | None]


def _loop_frames(analysis: _Views) -> np.ndarray:
    """Per stack, the frame id of its loop frame (`loop_frame`), -1 for none. Each frame is
    tested once, whether it is a loop function's candidate; each stack's loop frame is then its
    first candidate, found by numpy."""
    profile = analysis.profile
    flat, offsets = profile.stack_frames()
    candidate = np.array([not (f.native or any(frame_is(f, s, p) for s, p in _PLUMBING))
                          for f in profile.frames], dtype=bool)
    hits = np.flatnonzero(candidate[flat]) if len(flat) else np.zeros(0, dtype=np.int64)
    at = np.searchsorted(hits, offsets[:-1])
    found = at < len(hits)
    first = np.where(found, hits[np.minimum(at, max(len(hits) - 1, 0))] if len(hits) else -1, -1)
    first = np.where(found & (first < offsets[1:]), first, -1)
    return np.where(first >= 0, flat[np.maximum(first, 0)] if len(flat) else -1, -1)


def _queue_ops_by_stack(analysis: _Views) -> dict[int, _StackOps]:
    """(queue op, queue a result wait fed), for the sampled stacks that have one. Only stacks
    holding a queue get/put (`queue_op`) or a result wait (`result_wait`) are read frame by
    frame."""
    profile, samples = analysis.profile, analysis.samples
    reading = profile.stacks_with_any([_may_queue_or_wait(f) for f in profile.frames])
    per_stack: dict[int, _StackOps] = {}
    used = sorted_distinct(samples["stack"].to_numpy())
    for sid in used[reading[used]].tolist():
        frames = [profile.frames[i] for i in profile.stacks[sid]]
        op = queue_op(frames)
        waiter = result_wait(frames) if op is None else None
        submitted = _submitted_to(frames[waiter]) if waiter is not None else None
        if op is not None or submitted is not None:
            per_stack[sid] = (op, submitted)
    return per_stack


@dataclass(frozen=True, eq=False)
class _StageRows:
    """The samples summed per (thread, stack, state), in the order each first appears: every sum
    of build_structure is over these few rows, not over the samples (the first row to show a
    stack is the first sample that did, so "the first ..." reads the same). Beside them, what
    every stage is measured against."""

    thread: np.ndarray
    stack: np.ndarray
    state: np.ndarray  # str
    count: np.ndarray
    loop_frame_id: np.ndarray  # per stack (_loop_frames)
    key_of_frame: dict[tuple[str, str], int]  # (function, file) of a frame -> its key
    row_key: np.ndarray  # per row: its loop frame's key, -1 for none
    row_op: list[_StackOps] | None  # per row, None when no stack has a queue op or result wait
    loop_threads: set[int]  # the tids of the event loops
    master: bool  # the process is a pre-fork master
    all_python: float  # the process's samples running Python
    interval: float  # seconds a sample stands for


def _stage_rows(analysis: _Views, loop_frame_id: np.ndarray,
                per_stack: dict[int, _StackOps]) -> _StageRows:
    """The rows every stage is summed over (_StageRows)."""
    profile, samples = analysis.profile, analysis.samples
    agg = (samples.groupby(["thread", "stack", "state"], sort=False, observed=True)["count"].sum()
           .reset_index())
    agg_stack = agg["stack"].to_numpy()
    agg_state = agg["state"].astype(str).to_numpy()
    agg_count = agg["count"].to_numpy()
    key_of_frame: dict[tuple[str, str], int] = {}
    frame_key = np.array([key_of_frame.setdefault((f.function, f.file), len(key_of_frame))
                          for f in profile.frames] + [-1], dtype=np.int64)
    return _StageRows(
        thread=agg["thread"].to_numpy(), stack=agg_stack, state=agg_state, count=agg_count,
        loop_frame_id=loop_frame_id, key_of_frame=key_of_frame,
        row_key=frame_key[loop_frame_id[agg_stack]],  # loop_frame_id -1 -> the trailing -1
        row_op=[per_stack.get(s, (None, None)) for s in agg_stack.tolist()] if per_stack else None,
        loop_threads={loop.tid for loop in analysis.event_loops},
        master=analysis.process_role == ProcessRole.MASTER,
        # Who holds the GIL a stage's threads wait for: the threads running Python. Over the
        # window, a stage's own share of the process's Python samples is the share of its GIL
        # waits its own threads served (its own contention: busy); the rest waited on other
        # threads' bytecode.
        all_python=float(agg_count[agg_state == ThreadState.PYTHON].sum()),
        interval=profile.interval_s or 0.01)


def _loop_groups(rows: _StageRows) -> dict[tuple[str, str], list[int]]:
    """The threads by their loop function: the (function, file) of their stacks' loop frames
    with the most samples, ties to the one the thread showed first; by group sums over integer
    codes."""
    keys = list(rows.key_of_frame)
    has = rows.row_key >= 0
    tallies = (pd.DataFrame({"thread": rows.thread[has], "key": rows.row_key[has],
                             "count": rows.count[has], "first": np.flatnonzero(has)})
               .groupby(["thread", "key"], sort=False).agg(count=("count", "sum"), first=("first", "min"))
               .reset_index().sort_values(["thread", "count", "first"], ascending=[True, False, True],
                                          kind="stable")
               .drop_duplicates("thread"))
    groups: dict[tuple[str, str], list[int]] = {}
    for thread, key in zip(tallies["thread"].tolist(), tallies["key"].tolist()):
        groups.setdefault(keys[key], []).append(int(thread))
    return groups


@dataclass(frozen=True)
class _QueueWaits:
    """A stage's rows inside a queue op or a result wait: the ops, the queues fed, and the
    samples waiting on a neighbour (starved, blocked putting, waiting for results) or re-taking
    the GIL on the way out (the handoff)."""

    ops: list[tuple[str, str, int] | None]
    submits: list[str | None]
    starved: float = 0
    blocked: float = 0
    waiting: float = 0
    handoff_gil: float = 0


def _queue_waits(rows: _StageRows, mine: np.ndarray, state: np.ndarray,
                 counts: np.ndarray) -> _QueueWaits:
    """The queue waits of the stage whose rows are `mine` (`state` and `counts` of those)."""
    if not rows.row_op:  # no row has a queue op or a result wait: every sum is 0
        return _QueueWaits([], [])
    row_op = rows.row_op
    at = np.flatnonzero(mine).tolist()
    ops = [row_op[r][0] for r in at]
    submits = [row_op[r][1] for r in at]
    # Inside a get, a put or a result wait a thread waits on its neighbour, asleep on the
    # queue's condition or re-taking the GIL on the way out (the handoff below): both
    # serve nothing. A pure-Python consumer holding the GIL kept its producers' wake-ups
    # queued for it, so their blocked put read 9-18% where they waited on it ~85%.
    starved = sum(c for o, c, s in zip(ops, counts, state) if o and o[0] == "get" and s in WAITING_ON_NEIGHBOUR)
    blocked = sum(c for o, c, s in zip(ops, counts, state) if o and o[0] == "put" and s in WAITING_ON_NEIGHBOUR)
    waiting = sum(c for w, c, s in zip(submits, counts, state) if w and s in WAITING_ON_NEIGHBOUR)
    # A thread woken from a get, a put or a result wait and re-taking the GIL is still in
    # the handoff: it serves nothing yet (8 request threads woken by one batcher's
    # results looked busier than the batcher).
    handoff_gil = sum(c for o, w, c, s in zip(ops, submits, counts, state)
                      if (o or w) and s == ThreadState.GIL)
    return _QueueWaits(ops, submits, starved, blocked, waiting, handoff_gil)


def _stage(analysis: _Views, rows: _StageRows, function: str, file: str,
           threads: list[int]) -> Stage:
    """The stage of the threads whose loop function is `function` in `file`: its role, queues,
    shares of its samples, and its utilization (_serving)."""
    mine = np.isin(rows.thread, threads)
    state = rows.state[mine]
    counts = rows.count[mine]
    total = float(counts.sum())
    busy = float(counts[np.isin(state, BUSY)].sum())
    python = float(counts[np.isin(state, GIL_BOUND)].sum())
    queued = _queue_waits(rows, mine, state, counts)
    ops, submits = queued.ops, queued.submits
    tids = tuple(int(analysis.threads.loc[t, "tid"]) for t in threads)
    first_row = np.flatnonzero(mine & (rows.row_key == rows.key_of_frame[(function, file)]))
    loop = (analysis.profile.frames[int(rows.loop_frame_id[rows.stack[first_row[0]]])]
            if len(first_row) else None)
    entry = is_entry(function, file)
    source_gets, source_puts = (source_queue_ops(loop) if loop is not None and not entry
                                else (set(), set()))
    gets = sorted({o[1] for o in ops if o and o[0] == "get"} | source_gets)
    puts = sorted({o[1] for o in ops if o and o[0] == "put"} | {w for w in submits if w}
                  | source_puts)
    role = _role(threads, tids, rows.loop_threads, rows.master, analysis, [] if entry else gets,
                 busy / total if total else 0)
    return Stage(
        name=function, role=role, function=function, file=file,
        line=loop.line if loop is not None else 0,
        tids=tids, samples=int(total), busy_share=round(busy / total, 4) if total else 0.0,
        utilization=_serving(analysis, tids, state, counts, queued.handoff_gil, rows.all_python),
        python_share=round(python / busy, 4) if busy else 0.0,
        starved_share=round(queued.starved / total, 4) if total else 0.0,
        blocked_put_share=round(queued.blocked / total, 4) if total else 0.0,
        result_wait_share=round(queued.waiting / total, 4) if total else 0.0,
        gets=tuple(gets), puts=tuple(puts),
        busy_thread_seconds=round(busy * rows.interval, 4))


def _serving(analysis: _Views, tids: tuple[int, ...], state: np.ndarray, counts: np.ndarray,
             handoff_gil: float, all_python: float) -> float:
    """The utilization law's busy share: the time the stage serves, not its handoff GIL waits,
    nor its GIL waits behind another stage's Python (a pure-Python model stage holding the
    GIL made its decoders, queued for it, read busier than the model on a loaded machine)."""
    total = float(counts.sum())
    busy = float(counts[np.isin(state, BUSY)].sum())
    gil_waits = float(counts[state == ThreadState.GIL].sum()) - handoff_gil
    own_python = float(counts[state == ThreadState.PYTHON].sum())
    behind_others = gil_waits * (1.0 - own_python / all_python) if all_python else 0.0
    serving = round((busy - handoff_gil - behind_others) / total, 4) if total else 0.0
    # A GIL wait a thread sleeps in is no service; one it sat in on the run queue, signalled
    # but given no core by the machine's other load, is (the lone model thread beside a
    # busy core: its samples 16% GIL waits in its queue ops, yet /proc had it on a CPU or
    # runnable 96% of the window; by samples alone the stage read 84% busy).
    awake = _awake_share(analysis, tids)
    if awake is not None and total:
        serving = round(max(serving, min(busy / total, awake)), 4)
    return serving


# A thread's states inside a queue op or a result wait that wait on the other side: every one but
# running (the op's own bytecode and native work).
WAITING_ON_NEIGHBOUR = tuple(str(s) for s in ThreadState if s not in (ThreadState.PYTHON, ThreadState.NATIVE))


def _awake_share(analysis: _Views, tids: tuple[int, ...]) -> float | None:
    """The share of the window the threads spent on a CPU or runnable waiting for one, by /proc
    (CPU time plus run-queue wait, over threads x window); None without those counters."""
    os_ = analysis.os
    if os_ is None or not tids or os_.window_s <= 0:
        return None
    counted = [os_.threads[t] for t in tids if t in os_.threads]
    if len(counted) < len(tids) or any(t.runqueue_wait_s is None for t in counted):
        return None
    awake = sum(t.cpu_s + (t.runqueue_wait_s or 0.0) for t in counted)
    return min(1.0, awake / (len(tids) * os_.window_s))


def _role(threads: list[int], tids: tuple[int, ...], loop_threads: set[int], master: bool,
          analysis: _Views, gets: list[str], busy_share: float) -> StageRole:
    if master:
        return StageRole.SUPERVISOR
    if any(t in loop_threads for t in tids):
        return StageRole.EVENT_LOOP
    if gets:
        return StageRole.STAGE
    roles = set(analysis.threads.loc[threads, "role"])
    if ThreadRole.REQUEST in roles:
        return StageRole.REQUEST
    return StageRole.IDLE if roles == {ThreadRole.IDLE} else StageRole.OTHER


def _link(structure: Structure, analysis: _Views) -> Structure:
    """The structure with its wait-for edges, whether it is a pipeline, and its bottleneck."""
    producers: dict[str, list[str]] = {}
    consumers: dict[str, list[str]] = {}
    for stage in structure.stages:
        for name in stage.puts:
            producers.setdefault(name, []).append(stage.name)
        for name in stage.gets:
            consumers.setdefault(name, []).append(stage.name)
    edges: list[Edge] = []
    for stage in structure.stages:
        for name in stage.gets:
            upstream = [p for p in producers.get(name, []) if p != stage.name]
            if stage.starved_share > 0:
                edges.append(_edge(stage.name, EdgeKind.STARVED, f"queue {name}",
                                      upstream[0] if upstream else None, stage.starved_share))
        for name in stage.puts:
            downstream = [c for c in consumers.get(name, []) if c != stage.name]
            if stage.blocked_put_share > 0 and downstream:
                edges.append(_edge(stage.name, EdgeKind.BACKPRESSURE, f"queue {name}", downstream[0],
                                      stage.blocked_put_share))
            if stage.result_wait_share > 0 and downstream:
                edges.append(_edge(stage.name, EdgeKind.RESULT, f"results of queue {name}",
                                      downstream[0], stage.result_wait_share))
    for wait in analysis.waits[:5]:
        if wait.kind in HELD_KINDS:
            holder = None
            if wait.holders:
                holder = wait.holders[0].stack[0] if wait.holders[0].stack else wait.holders[0].function
            edges.append(_edge(wait.function, EdgeKind.GIL if wait.kind == WaitKind.GIL else EdgeKind.LOCK,
                                  "GIL" if wait.kind == WaitKind.GIL else
                                  f"{wait.label} at {wait.file.rsplit('/', 1)[-1]}:{wait.line}",
                                  holder, wait.share))
    linked = {e.waiter for e in edges if e.holder and e.kind in HANDOFF_EDGES}
    linked |= {e.holder for e in edges if e.holder and e.kind in HANDOFF_EDGES}
    structure = replace(structure, edges=tuple(edges), pipeline=len(linked) >= 2)
    return replace(structure, bottleneck=_bottleneck(structure))


def _edge(waiter: str, kind: EdgeKind, resource: str, holder: str | None, share: float) -> Edge:
    return Edge(waiter, kind, resource, holder, round(float(share), 4))


def _bottleneck(structure: Structure) -> str | None:
    """The busiest stage relative to its threads that something waits on."""
    waited_on: dict[str, float] = {}
    for edge in structure.edges:
        if edge.holder and edge.kind in HANDOFF_EDGES:
            waited_on[edge.holder] = waited_on.get(edge.holder, 0.0) + edge.share
    candidates = [s for s in structure.stages if s.name in waited_on and not is_entry(s.function, s.file)]
    if not candidates:
        return None
    best = max(candidates, key=lambda s: (s.utilization, waited_on[s.name]))
    return best.name
