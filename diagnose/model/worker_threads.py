"""The worker threads that serve work handed to threads: an executor's (concurrent.futures'
`_worker`: run_in_executor, asyncio.to_thread, a ThreadPoolExecutor) or AnyIO's (`WorkerThread`:
FastAPI / Starlette `def` endpoints, run_in_threadpool), found by their worker loop's frame, and
where, busy, they were: the innermost application frame and its call, and the state most of
those samples were in. async_wait reads them for a capacity's holders and a future's executor;
the chains of waits (model/task_chains.py) follow the request tasks' wait to them.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from diagnose.model.await_sites import WORKER_LOOP_FRAMES
from diagnose.model.event_loops import frame_owner
from diagnose.model.sampled import SampledProcess
from diagnose.samples import source
from diagnose.samples.profile import Frame, frame_is
from diagnose.vocab import CodeOwner, ThreadState

_SITE_PACKAGES = re.compile(r"/(site|dist)-packages/")
_LIB = re.compile(r"/lib/python\d+(\.\d+)?/(?:(?:site|dist)-packages/)?")
_CALL = re.compile(r"([A-Za-z_][\w.]*)\s*\(")


@dataclass(frozen=True)
class ThreadHolders:
    """What the worker threads holding a capacity's tokens did, from the stack samples."""

    threads: int  # worker threads seen
    tids: tuple[int, ...]  # their kernel thread ids
    busy_avg: float  # of them, busy (not waiting for work) on average
    where: str  # "load_user → sock.recv": the innermost application frame and its call
    site: Frame | None  # that application frame (its line)
    share: float  # of the workers' busy samples, there
    state: ThreadState | None  # the state most of those samples were in
    samples: int  # busy samples of the worker threads


def _module(file: str) -> str:
    path = file.replace("\\", "/")
    match = _LIB.search(path)
    tail = path[match.end():] if match else path.rsplit("/", 1)[-1]
    return tail.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


def _is_app(frame: Frame) -> bool:
    return frame_owner(frame) == CodeOwner.APP and not _SITE_PACKAGES.search(frame.file)


def _call_on_line(frame: Frame) -> str:
    try:
        text = source.getline(frame.file, frame.line).split("#", 1)[0]
    except Exception:  # unreadable source is no evidence either way
        return ""
    calls = _CALL.findall(text)
    return calls[-1] if calls else ""


def _holder_path(frames: list[Frame]) -> tuple[str, Frame | None]:
    """("load_user → sock.recv", the load_user frame) for one worker stack (root first)."""
    own = [i for i, f in enumerate(frames) if not f.native and _is_app(f)]
    if not own:
        return "", None
    site = frames[own[-1]]
    below = next((f for f in frames[own[-1] + 1:] if not f.native), None)
    callee = f"{_module(below.file)}.{below.function}" if below is not None else _call_on_line(site)
    return (f"{site.function} → {callee}" if callee else site.function), site


def thread_holders(analysis: SampledProcess) -> ThreadHolders | None:
    """The framework's worker threads and where, busy, they were; None when none was seen."""
    profile = analysis.profile
    samples = analysis.samples
    if samples.empty or not profile.frames:
        return None
    loop_frames = np.array([any(frame_is(f, suffix, pattern) for suffix, pattern in WORKER_LOOP_FRAMES)
                            for f in profile.frames], dtype=bool)
    if not loop_frames.any():
        return None
    in_loop = profile.stacks_with_any(loop_frames)
    rows = samples[in_loop[samples["stack"].to_numpy()]]
    if rows.empty:
        return None
    threads = sorted(int(t) for t in rows["thread"].unique())
    tids = tuple(int(analysis.threads.loc[t, "tid"]) for t in threads)
    workers = samples[samples["thread"].isin(threads)]
    busy = workers[workers["state"] != ThreadState.IDLE]
    total = float(workers["count"].sum())
    per_thread = total / len(threads)
    busy_avg = float(busy["count"].sum()) / per_thread if per_thread else 0.0
    tally: Counter[tuple[str, str, int]] = Counter()
    states: dict[tuple[str, str, int], Counter[str]] = {}
    sites: dict[tuple[str, str, int], Frame | None] = {}
    paths: dict[int, tuple[str, Frame | None]] = {}
    for stack, state, count in zip(busy["stack"].to_numpy(), busy["state"].to_numpy(),
                                   busy["count"].to_numpy()):
        sid = int(stack)
        if sid not in paths:
            paths[sid] = _holder_path([profile.frames[f] for f in profile.stacks[sid]])
        where, site = paths[sid]
        key = (where, site.file if site else "", site.line if site else 0)
        tally[key] += int(count)
        states.setdefault(key, Counter())[str(state)] += int(count)
        sites[key] = site
    busy_total = sum(tally.values())
    if not busy_total:
        return ThreadHolders(len(threads), tids, busy_avg, "", None, 0.0, None, 0)
    key, count = tally.most_common(1)[0]
    state = ThreadState(states[key].most_common(1)[0][0])
    return ThreadHolders(len(threads), tids, busy_avg, key[0], sites[key], count / busy_total, state,
                         busy_total)
