"""Event-loop threads: how much of the time the loop waits in its selector, and what it runs.

An asyncio loop serves every request of its process on one thread. While a coroutine runs
synchronous code (model compute, a `time.sleep`, a blocking client call) the loop cannot read,
parse or answer anything else: requests queue behind it. py-spy shows a coroutine's frames only
while it runs, so every sample of the loop thread that holds an app frame above the loop's
dispatch is time the loop was blocked by that app code.

Recognising the loop, per stack:
- stdlib loops (selector and proactor): `BaseEventLoop._run_once` (asyncio/base_events.py) is on
  the stack; the callbacks run above `Handle._run` (asyncio/events.py); the loop idles in
  `selectors.py`.
- compiled loops (uvloop): no loop frames at all. The thread's innermost Python frame when idle
  is the runner (`asyncio.runners.run` / `Runner.run`, or `uvloop.run`), and coroutine frames sit
  directly above it when busy.
Frames above the dispatch are split into the server's own (framework: uvicorn, starlette,
fastapi, anyio, ...; the standard library) and the app's: the outermost app frame is the
coroutine or callback that ran, the innermost app frame of the same package is the call site.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

from diagnose.samples import source
from diagnose.samples.profile import Frame, own_frames_start, sorted_distinct
from diagnose.model.sampled import SampledProcess
from diagnose.vocab import BUSY, GIL_BOUND, CallbackKind, CodeOwner, LoopFlavor
# The loops are the report's own values (report/model/sections.py).
from diagnose.report.model.sections import Callback, CallSite, EventLoop

__all__ = ["Callback", "CallSite", "EventLoop", "event_loops", "classify_loop_stack", "frame_owner",
           "FRAMEWORK_PACKAGES", "LoopStack"]

LOOP_THREAD_SHARE = 0.8  # a thread whose samples carry a loop marker this often is a loop thread
SEPARATED_IDLE_SHARE = 0.2  # below this, consecutive requests' stretches merge: no estimate
_STDLIB = re.compile(r"/lib/python\d+(\.\d+)?/(?!site-packages/|dist-packages/)|^<frozen |^<string>")
_SITE = re.compile(r"/(site|dist)-packages/([^/]+)")
FRAMEWORK_PACKAGES = frozenset({
    "uvicorn", "starlette", "fastapi", "anyio", "sniffio", "h11", "httptools", "websockets",
    "wsproto", "uvloop", "gunicorn", "uvicorn_worker", "aiohttp", "sanic", "quart", "hypercorn",
    "pydantic", "pydantic_core", "asgiref", "tornado", "grpc", "grpclib", "litestar", "blacksheep",
    "typing_extensions", "annotated_types",
})
_SLEEP_LINE = re.compile(r"\bsleep\(")
_NETWORK = re.compile(r"(/socket\.py|/ssl\.py|/http/client\.py|/urllib/|/(requests|urllib3|httpx|httpcore|"
                      r"grpc|boto3|botocore)/)")
_DATABASE = re.compile(r"/(psycopg2?|pymysql|MySQLdb|sqlite3|redis|sqlalchemy|pymongo|cassandra|"
                       r"elasticsearch)/|_sqlite3|psycopg")
_FILE_IO = re.compile(r"^(_io\.|io\.|open$|read$|write$|readinto$)|_io_FileIO|_io__Buffered")
_RUNTIME_FILE = re.compile(r"(libc\.so|libc-|libpthread|ld-linux)")
_SLEEP_NATIVE = {"time_sleep", "pysleep", "clock_nanosleep", "__clock_nanosleep", "nanosleep",
                 "__nanosleep"}


@dataclass(frozen=True)
class LoopStack:
    """What one stack of a loop thread says about the loop."""

    flavor: LoopFlavor
    segment: CodeOwner  # IDLE, FRAMEWORK or APP
    coroutine: int  # frame id of the outermost app frame (-1: none)
    call_site: int  # frame id of the innermost app frame of the coroutine's package (-1: none)
    callee: str  # what the coroutine calls: the next Python frame's function, or the native leaf
    blocking: str  # "sleep", "network", "database", "file", "" (read from the frames)


@dataclass
class _CallbackTally:
    """One coroutine call's samples on the loop thread, counted as the samples are read."""

    samples: int = 0
    cpu: int = 0
    blocked: int = 0
    python: int = 0  # running Python (holding or wanting the GIL)
    phases: dict[str, int] = field(default_factory=dict)
    blocking: dict[str, int] = field(default_factory=dict)  # blocking kind -> samples


@dataclass(frozen=True)
class _BlockEstimate:
    """Synchronous time per request (EventLoop's est_* fields): None where not measurable."""

    per_request_s: float | None
    min_s: float | None
    max_s: float | None
    basis: str


def _package_root(path: str) -> str:
    match = _SITE.search(path)
    if match:
        return match.group(2).split(".")[0]
    return path.rsplit("/", 1)[0]


def frame_owner(frame: Frame) -> CodeOwner:
    """RUNTIME (stdlib, native), FRAMEWORK (the server's packages) or APP."""
    if frame.native or _STDLIB.search(frame.file) or frame.file.startswith("<"):
        return CodeOwner.RUNTIME
    match = _SITE.search(frame.file)
    if match and match.group(2).split(".")[0].removesuffix(".py") in FRAMEWORK_PACKAGES:
        return CodeOwner.FRAMEWORK
    return CodeOwner.APP


def _is(frame: Frame, suffix: str, pattern: str) -> bool:
    return frame.file.endswith(suffix) and re.search(pattern, frame.function) is not None


def _may_mark_loop(frame: Frame) -> bool:
    """The frames `_loop_marker` looks for: without one, a stack is no loop's."""
    return (frame.file.endswith("asyncio/base_events.py") or _is(frame, "asyncio/runners.py", r"(^|\.)run$")
            or _is(frame, "uvloop/__init__.py", r"(^|\.)run$"))


def _loop_marker(frames: list[Frame]) -> tuple[LoopFlavor, int] | None:
    """(flavor, index of the frame above which callbacks run), or None for a non-loop stack. A
    loop in the frames a forked child keeps of its parent (a process pool's worker forked from
    a coroutine's `run_in_executor`) is the parent's loop, not the child's."""
    own = own_frames_start(frames)
    run_once = max((i for i, f in enumerate(frames[own:], own)
                    if _is(f, "asyncio/base_events.py", r"(^|\.)_run_once$")), default=-1)
    if run_once >= 0:
        dispatch = max((i for i, f in enumerate(frames[run_once:], run_once)
                        if _is(f, "asyncio/events.py", r"(^|\.)_run$")), default=run_once)
        return LoopFlavor.ASYNCIO, dispatch
    if any(f.file.endswith("asyncio/base_events.py") for f in frames[own:]):
        return None  # inside run_until_complete / run_forever set-up, not yet a running loop
    runner = max((i for i, f in enumerate(frames[own:], own)
                  if _is(f, "asyncio/runners.py", r"(^|\.)run$") or _is(f, "uvloop/__init__.py", r"(^|\.)run$")),
                 default=-1)
    if runner >= 0:
        return LoopFlavor.UVLOOP, runner
    return None


def _blocking_kind(frames: list[Frame], call_site_index: int, line_text: str) -> str:
    below = frames[call_site_index + 1:] if call_site_index >= 0 else frames
    names = {f.function for f in below}
    if names & _SLEEP_NATIVE or _SLEEP_LINE.search(line_text):
        return "sleep"
    if any(_DATABASE.search(f.file) or _DATABASE.search(f.function) for f in below):
        return "database"
    if any(_NETWORK.search(f.file) for f in below):
        return "network"
    if any(_FILE_IO.search(f.function) for f in below if not f.native):
        return "file"
    return ""


def _line_text(frame: Frame) -> str:
    return source.stripped_line(frame.file, frame.line)


def classify_loop_stack(frames: list[Frame], frame_ids: tuple[int, ...], state: str) -> LoopStack | None:
    marker = _loop_marker(frames)
    if marker is None:
        return None
    flavor, dispatch = marker
    above = [(i, f) for i, f in enumerate(frames[dispatch + 1:], dispatch + 1)
             if not f.native and not f.file.endswith("selectors.py")]
    owners = [(i, frame_owner(f)) for i, f in above]
    app = [i for i, owner in owners if owner == CodeOwner.APP]
    if not app:
        # Nothing above the dispatch and not running: the loop waits in its selector.
        segment = CodeOwner.IDLE if not above and state not in BUSY else CodeOwner.FRAMEWORK
        return LoopStack(flavor, segment, -1, -1, "", "")
    outer = app[0]
    package = _package_root(frames[outer].file)
    site = max(i for i in app if _package_root(frames[i].file) == package)
    # What to move off the loop: the call the coroutine makes (Model.forward, time.sleep).
    callee = next((f.function for f in frames[outer + 1:] if not f.native), "")
    if not callee:
        callee = next((f.function for f in frames[outer + 1:]
                       if not f.function.startswith("0x") and not _RUNTIME_FILE.search(f.file)), "")
    blocking = _blocking_kind(frames, site, _line_text(frames[site]))
    return LoopStack(flavor, CodeOwner.APP, frame_ids[outer], frame_ids[site], callee, blocking)


def event_loops(analysis: SampledProcess) -> list[EventLoop]:
    """Every event-loop thread of one process's analysis, busiest first."""
    profile = analysis.profile
    samples = analysis.samples
    if samples.empty:
        return []
    stack_state = analysis.stacks.state
    per_stack: dict[int, LoopStack | None] = {}
    # A stack can be a loop's only if one of its frames is a loop marker (`_loop_marker`): each
    # frame is tested once, and only the stacks that hold one are read frame by frame.
    candidate = profile.stacks_with_any([_may_mark_loop(f) for f in profile.frames])
    used = sorted_distinct(samples["stack"].to_numpy())
    for sid in used[candidate[used]].tolist():
        stack = profile.stacks[sid]
        frames = [profile.frames[i] for i in stack]
        per_stack[sid] = classify_loop_stack(frames, stack, str(stack_state[sid]))
    loops = []
    interval = profile.interval_s or 0.01
    # Per thread, the share of its samples whose stack carries a loop marker: summed by numpy
    # over stack ids (the stacks were read once each above).
    marked_stack = np.zeros(len(profile.stacks), dtype=bool)
    marked_stack[[sid for sid, info in per_stack.items() if info is not None]] = True
    stack_ids = samples["stack"].to_numpy()
    counts_all = samples["count"].to_numpy()
    per_thread = pd.DataFrame({"thread": samples["thread"].to_numpy(), "count": counts_all,
                               "marked": np.where(marked_stack[stack_ids], counts_all, 0)})
    sums = per_thread.groupby("thread", sort=True)[["count", "marked"]].sum()
    for thread, total, marked in zip(sums.index.tolist(), sums["count"].tolist(), sums["marked"].tolist()):
        if not total or marked / total < LOOP_THREAD_SHARE:
            continue
        group = samples[samples["thread"].to_numpy() == thread]
        info = [per_stack.get(int(s)) for s in group["stack"].to_numpy()]
        counts = group["count"].to_numpy()
        loops.append(_measure_loop(analysis, int(thread), group, info, counts, int(total), interval))
    return sorted(loops, key=lambda loop: -loop.app_share)


def _measure_loop(analysis: SampledProcess, thread: int, group: pd.DataFrame, info: list[LoopStack | None],
                  counts: np.ndarray, total: int, interval: float) -> EventLoop:
    row = analysis.threads.loc[thread]
    segments = {CodeOwner.IDLE: 0, CodeOwner.FRAMEWORK: 0, CodeOwner.APP: 0}
    by_callback: dict[tuple[int, int, str], _CallbackTally] = {}
    states = group["state"].astype(str).to_numpy()
    phases = group["phase"].astype(str).to_numpy()
    flavors: dict[LoopFlavor, int] = {}
    for loop_stack, count, state, phase in zip(info, counts, states, phases):
        if loop_stack is None:
            segments[CodeOwner.FRAMEWORK] += count
            continue
        flavors[loop_stack.flavor] = flavors.get(loop_stack.flavor, 0) + count
        # An app frame on the loop thread is the loop blocked, whatever that frame waits on.
        segment = loop_stack.segment
        segments[segment] += count
        if segment != CodeOwner.APP:
            continue
        key = (loop_stack.coroutine, loop_stack.call_site, loop_stack.callee)
        entry = by_callback.setdefault(key, _CallbackTally())
        entry.samples += count
        if state in BUSY:
            entry.cpu += count
        else:
            entry.blocked += count
        entry.python += count if state in GIL_BOUND else 0
        entry.phases[phase] = entry.phases.get(phase, 0) + count
        if loop_stack.blocking:
            entry.blocking[loop_stack.blocking] = entry.blocking.get(loop_stack.blocking, 0) + count
    callbacks = [_callback(analysis, key, entry, total) for key, entry in by_callback.items()]
    callbacks.sort(key=lambda c: -c.samples)
    runs, mean_run = _runs(info, counts, group["t"].to_numpy())
    tid = int(row["tid"])
    cpu_share = None
    os_ = analysis.os
    if os_ is not None and tid in os_.threads and os_.window_s:
        cpu_share = round(os_.threads[tid].cpu_s / os_.window_s, 4)
    pid = row["pid"] if "pid" in row.index else None
    estimate = _per_request_estimate(analysis, segments[CodeOwner.APP] / total, segments[CodeOwner.IDLE] / total,
                                     runs, mean_run, interval)
    return EventLoop(
        pid=None if pid is None or pd.isna(pid) else int(pid), tid=tid,
        thread=str(row["name"]), flavor=max(flavors, key=flavors.__getitem__) if flavors else LoopFlavor.ASYNCIO,
        samples=total, idle_share=round(segments[CodeOwner.IDLE] / total, 4),
        busy_share=round(1 - segments[CodeOwner.IDLE] / total, 4),
        app_share=round(segments[CodeOwner.APP] / total, 4),
        framework_share=round(segments[CodeOwner.FRAMEWORK] / total, 4), cpu_share_os=cpu_share,
        callbacks=tuple(callbacks[:8]), block_runs=runs, interval_s=round(interval, 6),
        est_block_per_request_s=estimate.per_request_s, est_block_min_s=estimate.min_s,
        est_block_max_s=estimate.max_s, est_basis=estimate.basis)


def _per_request_estimate(analysis: SampledProcess, app_share: float, idle_share: float, runs: int,
                          mean_run: float, interval: float) -> _BlockEstimate:
    os_ = analysis.os
    writes = os_.write_syscalls if os_ is not None else None
    window_s = os_.window_s if os_ is not None else 0.0  # read only where writes are known
    low = (app_share * window_s / writes) if writes and app_share > 0 else None
    # Stretches separate requests only when the loop idles between them; a loop that never
    # idles runs requests back to back and its stretches merge.
    high = mean_run * interval if runs and idle_share >= SEPARATED_IDLE_SHARE else None
    if low is not None and high is not None and low > high:
        low = high
    parts = []
    if low is not None:
        parts.append(f"at least {1000 * low:.1f} ms: {app_share:.0%} of the {window_s:.1f} s "
                     f"window over {writes} write syscalls (one or more per response)")
    if high is not None:
        parts.append(f"at most {1000 * high:.1f} ms: the mean of {runs} stretches of consecutive "
                     f"samples inside one coroutine at {1000 * interval:.0f} ms intervals")
    elif runs:
        parts.append(f"no upper bound: the loop idled {idle_share:.0%} of the time, so requests ran "
                     f"back to back and their stretches merge")
    best = high if high is not None else low
    return _BlockEstimate(per_request_s=None if best is None else round(best, 4),
                          min_s=None if low is None else round(low, 5),
                          max_s=None if high is None else round(high, 4),
                          basis="estimated; " + "; ".join(parts) if parts else "")


def _callback(analysis: SampledProcess, key: tuple[int, int, str], entry: _CallbackTally,
              total: int) -> Callback:
    coroutine, call_site, callee = key
    frame = analysis.frame(coroutine)
    site = analysis.frame(call_site) if call_site >= 0 else None
    kind = CallbackKind.CPU if entry.cpu >= entry.blocked else CallbackKind.BLOCKING_CALL
    blocking = max(entry.blocking, key=entry.blocking.__getitem__) if entry.blocking else ""
    if kind == CallbackKind.CPU and blocking == "sleep":
        kind = CallbackKind.BLOCKING_CALL  # a sleep is never CPU work, whatever the state estimate said
    phase = max(entry.phases, key=entry.phases.__getitem__) if entry.phases else "other"
    line = _line_text(site) if site is not None else ""
    detail = f"calls {callee}" if callee else ""
    if line:
        detail += f" at `{line[:100]}`"
    return Callback(
        function=frame.function, file=frame.file, line=frame.line,
        share=round(entry.samples / total, 4), kind=kind,
        call_site=None if site is None else CallSite(site.function, site.file, site.line),
        detail=detail.strip(), samples=int(entry.samples), phase=phase, blocking=blocking,
        python_share=round(entry.python / entry.samples, 4))


def _runs(info: list[LoopStack | None], counts: np.ndarray, times: npt.NDArray[np.float64]
          ) -> tuple[int, float]:
    """Stretches of consecutive samples inside the same app coroutine: each is at least one
    request's synchronous part (back-to-back requests merge into one stretch, so the mean
    overstates; a request shorter than the interval shows as one sample, so it cannot
    understate below one interval)."""
    if np.isnan(times).any():
        return 0, 0.0
    order = np.argsort(times, kind="stable")
    runs, lengths, current, length = 0, [], None, 0
    for index in order:
        loop_stack = info[index]
        key = loop_stack.coroutine if loop_stack is not None and loop_stack.segment == CodeOwner.APP else None
        if key is not None and key == current:
            length += int(counts[index])
            continue
        if current is not None:
            lengths.append(length)
        current, length = key, int(counts[index]) if key is not None else 0
        runs += key is not None
    if current is not None:
        lengths.append(length)
    return runs, float(np.mean(lengths)) if lengths else 0.0
