"""Reads py-spy's `--format chrometrace` recording: stacks with the instants they were seen.

What py-spy (0.4.x) writes, checked on real recordings: a JSON list of trace events
`{"ph": "B"|"E", "ts": µs, "pid": P, "tid": T, "name", "args": {"filename", "line"}}`. `ts` is
microseconds since py-spy started; `tid` is the thread's pthread id (the OS thread id is in the
`thread (N): name` pseudo-frame that `--threads` adds, the process in `process P:"cmd"` that
`--subprocesses` adds). Events are differences: when a thread's stack changes between two
samples, the frames that left get "E" and the new ones "B", all at the instant of that sample;
a sample whose stack did not change writes nothing. The "previous stack" a trace is diffed
against is the previous trace of the same pthread id in *any* process (py-spy keys it by thread
id alone), and forked processes share their threads' pthread ids: `_changes` replays that. Every
thread of every process is read at the
same sampling instant (one timer for the whole tree; py-spy draws the gaps between instants from
an exponential distribution), and py-spy stamps each thread's events as it writes them: the
events of one instant lie within ~0.2 ms of each other, distinct instants were ~1 ms or more
apart in every recording we checked. At the end every open frame gets an "E" at the window's end.

So the recording holds, per thread, the instants its stack changed and the stack it held from
each change to the next. A sample at any instant is read off that: the stack a thread held at
instant t is the one set by its last change at or before t. We read every thread on one grid of
instants at the sampling interval, anchored at the window's start, from the instant the thread
was first seen to the instant it was gone: samples of different threads at the same grid instant
were held at the same moment, which is what holders, concurrency and the timeline compare.

Two things the format does not say, and how they are handled:
- when a thread exits: its last stack stays "open" until the window's end. A new thread that
  reuses the pthread id shows as the same `tid` with another OS thread id in its pseudo-frame:
  the old thread ended there. Otherwise `close_exited_threads` ends it with the /proc record of
  the same window (the first /proc tick that no longer lists the thread).
- the sampling rate: the caller passes it when known (`attach`); offline it is estimated from the
  number of distinct sampling instants seen (a lower bound: an instant at which no thread's stack
  changed leaves no event), rounded up to 10 Hz.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import numpy as np

from diagnose.errors import BadProfile
from diagnose.samples.profile import Frame, Profile, ThreadTrack
from diagnose.readers.visibility import assess_waits
from diagnose.readers.frames import PROCESS_PSEUDO, THREAD_PSEUDO, is_native_frame, parse_tid

SAME_INSTANT_US = 500  # events closer than this belong to one sampling instant
MAX_OS_TID = 1 << 22  # Linux pid_max ceiling: larger ids are pthread ids, not OS thread ids
_PROCESS_PID = re.compile(r"^process (\d+):")
GONE_CONFIRM_TICKS = 2  # /proc ticks without a thread, to the window's end, that end it
EXIT_MARGIN_S = 0.05  # /proc and py-spy clocks start a few ms apart: never end a thread sooner


def _events(data: list, label: str):
    """(ts, pid, tid, phase, frame) per B/E event, in recording order."""
    out = []
    for index, event in enumerate(data):
        if not isinstance(event, dict):
            raise BadProfile(f"{label}: trace event {index} is not an object")
        phase = event.get("ph")
        if phase not in ("B", "E"):
            continue  # metadata ("M") and anything else py-spy may add
        try:
            ts = float(event["ts"])
            pid = int(event.get("pid") or 0)
            tid = event["tid"]
            args = event.get("args") or {}
            frame = (str(event["name"]), str(args.get("filename") or ""),
                     int(args.get("line") or 0))
        except (KeyError, TypeError, ValueError):
            raise BadProfile(f"{label}: trace event {index} lacks ts/pid/tid/name")
        if not math.isfinite(ts):
            raise BadProfile(f"{label}: trace event {index} has a timestamp that is not a number")
        out.append((ts, pid, tid, phase, frame))
    return out


def _on_instants(events):
    """The events with each timestamp replaced by its sampling instant's (the first timestamp of
    the run of timestamps less than SAME_INSTANT_US apart): py-spy stamps each thread's events
    as it writes them, a few µs after the previous thread's, but they were all read at once."""
    distinct = np.unique(np.fromiter((e[0] for e in events), dtype=np.float64, count=len(events)))
    starts = np.concatenate(([0], np.flatnonzero(np.diff(distinct) > SAME_INSTANT_US) + 1))
    instant = distinct[starts][np.searchsorted(starts, np.arange(len(distinct)), side="right") - 1]
    mapping = dict(zip(distinct.tolist(), instant.tolist()))
    return [(mapping[e[0]],) + e[1:] for e in events]


def _owner(stack: tuple, fallback: int, owners: dict) -> int:
    """The process a stack belongs to: its innermost `process P:"cmd"` pseudo-frame (py-spy
    puts the sampled process under its ancestors' frames, outermost first), else the event's
    pid (a recording without --subprocesses holds one process)."""
    owner = fallback
    for frame in stack:
        if frame[1]:
            break  # a real frame: the pseudo-frames are over
        pid = owners.get(frame[0], -1)
        if pid == -1:
            match = _PROCESS_PID.match(frame[0])
            pid = owners[frame[0]] = int(match.group(1)) if match else None
        if pid is None:
            break  # the thread's pseudo-frame follows its process's
        owner = pid
    return owner


def _changes(events) -> dict:
    """Per (pid, pthread id): [(ts, raw stack root→leaf)] after each trace py-spy wrote; an
    empty stack ends the thread.

    py-spy's writer diffs each trace against the previous trace of the same pthread id, in any
    process (src/chrometrace.rs keys `prev_traces` by thread id alone), and stamps the events
    with the new trace's pid. Forked processes share their threads' pthread ids, so the "E"
    events of a trace close frames another process opened. The events are replayed the same
    way, one open stack per pthread id; each stack the replay reaches is the whole stack of one
    trace, credited to the process its root names. One trace's events are consecutive and share
    the instant, pid and pthread id: a change of any of the three starts the next trace."""
    events = sorted(events, key=lambda e: e[0])  # stable: py-spy's E-before-B order kept
    open_frames: dict = {}
    changes: dict = {}
    owners: dict = {}  # pseudo-frame name -> its process's pid (None: not a process frame)
    cur_ts = cur_pid = cur_tid = None
    stack: list | None = None
    for ts, pid, tid, phase, frame in events:
        if ts != cur_ts or tid != cur_tid or pid != cur_pid:
            if stack is not None:
                assert cur_pid is not None  # set by the event that opened this stack
                held = tuple(stack)
                changes.setdefault((_owner(held, cur_pid, owners), cur_tid), []).append(
                    (cur_ts, held))
            cur_ts, cur_pid, cur_tid = ts, pid, tid
            stack = open_frames.get(tid)
            if stack is None:
                stack = open_frames[tid] = []
        if phase == "B":
            assert stack is not None  # a ts is never None: the first event opens a stack
            stack.append(frame)
        elif stack:
            # py-spy closes frames innermost first; tolerate a foreign writer's order
            if stack[-1] == frame:
                stack.pop()
            elif frame in stack:
                del stack[len(stack) - 1 - stack[::-1].index(frame)]
    if stack is not None:
        assert cur_pid is not None  # set by the event that opened this stack
        held = tuple(stack)
        changes.setdefault((_owner(held, cur_pid, owners), cur_tid), []).append((cur_ts, held))
    return changes


class _Thread:
    __slots__ = ("pid", "tid", "name", "times", "stacks", "end")

    def __init__(self, pid: int, tid: int, name: str):
        self.pid, self.tid, self.name = pid, tid, name
        self.times: list[float] = []
        self.stacks: list[int] = []
        self.end: float | None = None


def _drop_torn_reads(profile: Profile, thread: _Thread) -> None:
    """A thread's outermost frame never changes while it lives (`<module>`, threading's
    bootstrap): a stack that starts elsewhere is a torn read — py-spy's non-blocking mode walks
    the frame chain while the thread runs and can stop part-way, keeping only the innermost
    frames. Such a change is dropped: the thread is read as holding its previous stack until its
    next whole one, as for any instant whose read is missing. A read with no frame at all is torn
    too when it falls between two whole reads whose root is a frame the thread is born in and
    leaves only at its end (a forked worker's main thread read empty once mid-window, then whole
    again). A thread read before its first frame keeps that read (it was born there); a thread a
    native library runs Python on (a callback's root) is empty between calls, and keeps those."""
    if len(thread.stacks) < 3:
        return
    roots: dict[int, int] = {}
    for sid in thread.stacks:
        stack = profile.stacks[sid]
        if stack:
            roots[stack[0]] = roots.get(stack[0], 0) + 1
    if not roots:
        return
    root, count = max(roots.items(), key=lambda item: item[1])
    if count * 2 <= len(thread.stacks):
        return  # no root most reads agree on: nothing to tell a torn read by
    whole = [k for k, sid in enumerate(thread.stacks) if profile.stacks[sid][:1] == (root,)]
    born_in = _lives_as_long_as_its_thread(profile.frames[root])
    keep = [k for k, sid in enumerate(thread.stacks)
            if profile.stacks[sid][:1] == (root,)
            or (not profile.stacks[sid] and not (born_in and whole[0] < k < whole[-1]))]
    if len(keep) == len(thread.stacks):
        return
    thread.times = [thread.times[k] for k in keep]
    thread.stacks = [thread.stacks[k] for k in keep]


def _lives_as_long_as_its_thread(frame: Frame) -> bool:
    """A frame a thread starts in and leaves only when it ends: a program's or a forked
    child's `<module>`, runpy's entry, threading's bootstrap."""
    file = frame.file
    return (frame.function == "<module>" or file.endswith("runpy.py") or file == "<frozen runpy>"
            or (file.endswith("threading.py") and frame.function.endswith("_bootstrap")))


def estimated_rate_hz(timestamps: np.ndarray, window_us: float) -> int:
    """A grid rate at least as fine as the sampling instants seen (offline: py-spy's rate is
    not in the file). The final instant (the closing events) is not a sample."""
    distinct = np.unique(timestamps)
    if len(distinct) < 2 or window_us <= 0:
        return 100
    # distinct instants, less the closing one
    instants = int((np.diff(distinct) > SAME_INSTANT_US).sum())
    observed = instants / (window_us / 1e6)
    return int(min(1000, max(10, 10 * math.ceil(observed / 10))))


def _thread_named(raw: tuple) -> tuple[int | None, str]:
    """The OS thread id and name a raw stack's `thread (N): name` pseudo-frame gives; the
    pseudo-frames lead, processes first (outermost first), then the thread. (None, "") without
    one."""
    for frame in raw:
        if frame[1]:
            break
        match = THREAD_PSEUDO.match(frame[0])
        if match:
            return parse_tid(match.group(1)), match.group(2) or ""
    return None, ""


def _track(slot: list[_Thread], end_us: float) -> ThreadTrack:
    """One track for the OS threads that ran one after another behind one (pid, pthread id):
    each a segment, their stack changes joined, its stacks left to regrid."""
    first = slot[0]
    name = first.name or next((t.name for t in slot if t.name), "")
    empty = np.empty(0, dtype=np.int32)
    return ThreadTrack(
        first.tid, name, empty, np.empty(0), pid=first.pid, times=np.empty(0),
        segments=[[t.tid, t.times[0] / 1e6, (t.end if t.end is not None else end_us) / 1e6]
                  for t in slot],
        changes=(np.concatenate([np.asarray(t.times, dtype=np.float64) for t in slot]) / 1e6,
                 np.concatenate([np.asarray(t.stacks, dtype=np.int32) for t in slot])))


def load_chrometrace(data, label: str = "profile", rate_hz: float | None = None) -> Profile:
    """A Profile from py-spy's chrometrace events: each (pid, pthread id)'s replayed stack
    changes credited to the OS threads behind it, then read on a grid at `rate_hz` (else the
    rate the recording shows)."""
    if not isinstance(data, list):
        raise BadProfile(f"{label}: JSON but not a chrometrace recording (not a list of events)")
    events = _events(data, label)
    if not events:
        raise BadProfile(f"{label}: the chrometrace file holds no samples")
    events = _on_instants(events)
    profile = Profile(source="chrometrace", instants="measured")
    frame_ids: dict = {}  # raw frame -> interned id, None for a pseudo-frame

    def frame_id(raw):
        fid = frame_ids.get(raw, -1)
        if fid == -1:
            name, file, line = raw
            if not file and (THREAD_PSEUDO.match(name) or PROCESS_PSEUDO.match(name)):
                fid = None
            else:
                native = is_native_frame(name, file, line)
                profile.native = profile.native or native
                fid = profile.intern_frame(Frame(name, file, line, native))
            frame_ids[raw] = fid
        return fid

    slots: list[list[_Thread]] = []  # per (pid, pthread id): the OS threads that ran there
    for (pid, key_tid), points in _changes(events).items():
        slot: list[_Thread] = []
        thread = None
        for ts, raw in points:
            if not raw:  # every frame closed: the recording ended (or the thread did)
                if thread is not None:
                    thread.end = ts
                    thread = None
                continue
            tid, name = _thread_named(raw)
            if thread is None or (tid is not None and tid != thread.tid):
                # another OS thread behind the same pthread id: the previous one had exited
                if thread is not None:
                    thread.end = ts
                thread = _Thread(pid, tid if tid is not None else _key_tid(key_tid), name)
                slot.append(thread)
            elif name and not thread.name:
                thread.name = name
            stack = tuple(f for f in (frame_id(r) for r in raw) if f is not None)
            sid = profile.intern_stack(stack)
            if thread.stacks and thread.stacks[-1] == sid:
                continue  # only a pseudo-frame changed (a thread renamed)
            thread.times.append(ts)
            thread.stacks.append(sid)
        for thread in slot:
            _drop_torn_reads(profile, thread)
        slot = [t for t in slot if t.times]
        if slot:
            slots.append(slot)
    all_ts = np.fromiter((e[0] for e in events), dtype=np.float64, count=len(events))
    start_us = min((slot[0].times[0] for slot in slots), default=float(all_ts.min()))
    end_us = float(all_ts.max())
    profile.window = (start_us / 1e6, end_us / 1e6)
    for slot in sorted(slots, key=lambda s: (s[0].times[0], s[0].pid, s[0].tid)):
        profile.threads.append(_track(slot, end_us))
    regrid(profile, float(rate_hz) if rate_hz else estimated_rate_hz(all_ts, end_us - start_us))
    if not profile.threads:
        raise BadProfile(f"{label}: the chrometrace file holds no samples")
    assess_waits(profile)
    return profile


def regrid(profile: Profile, rate_hz: float) -> None:
    """Reads every measured track on one grid of instants `1 / rate_hz` apart from the window's
    start, wherever one of its threads was alive (first seen to gone): at each, the stack set by
    the last change at or before it. A track whose threads all lived between two grid instants
    is left out (a sample at that rate would most likely have missed them too)."""
    step = 1.0 / rate_hz
    origin = profile.origin_s
    profile.interval_s = step
    keep = []
    for track in profile.threads:
        if track.changes is None:
            keep.append(track)
            continue
        changed, stacks = track.changes
        assert track.segments is not None  # a measured track has both (load_chrometrace)
        k = np.concatenate([np.arange(math.ceil((start - origin) / step - 1e-6),
                                      math.ceil((end - origin) / step - 1e-6))
                            for _tid, start, end in track.segments]).astype(np.int64)
        k = np.unique(k)
        grid = origin + step * k
        held = np.maximum(np.searchsorted(changed, grid + 1e-9, side="right") - 1, 0)
        track.stack_ids = stacks[held].astype(np.int32)
        track.weights = np.full(len(k), step)
        track.times = grid
        track.counts = None
        if len(k):
            keep.append(track)
    profile.threads = keep


def settle_rate(profile: Profile, samples_taken: int | None, slack: float = 0.9) -> float | None:
    """py-spy's --duration counts samples, not seconds: one that falls behind (a loaded machine,
    many threads) takes fewer samples per second than asked, over a longer window. The grid at
    the asked rate would then count more samples than were taken, and overstate what they
    support. With py-spy's own count of thread-samples, re-grid at the rate it achieved: that
    count over the thread-seconds it watched. Returns the new rate, None when unchanged."""
    if profile.instants != "measured" or not samples_taken:
        return None
    watched = sum(end - start for t in profile.threads if t.segments
                  for _tid, start, end in t.segments)
    if watched <= 0:
        return None
    achieved = samples_taken / watched
    if achieved >= slack / profile.interval_s:
        return None
    regrid(profile, achieved)
    return achieved


def _key_tid(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return parse_tid(str(value))


def name_by_kernel_ids(profile: Profile, pthread_tids: Mapping[int, Mapping[int, int]]) -> int:
    """Renames the threads py-spy named by pthread id (--nonblocking before CPython 3.11) by
    their kernel thread ids, per process (`pthread_tids`: pid -> pthread id -> tid, read from
    the processes' memory at the attach: collect/pthread_ids.py), so that the /proc counters of
    the same threads join them. Returns how many tracks were renamed."""
    renamed = 0
    for track in profile.threads:
        names = pthread_tids.get(track.pid) if track.pid is not None else None
        if not names or track.tid not in names:
            continue
        track.tid = names[track.tid]
        for segment in track.segments or []:
            segment[0] = names.get(int(segment[0]), segment[0])
        renamed += 1
    return renamed


def hold_through_torn_last_reads(profile: Profile, tree, margin_s: float = EXIT_MARGIN_S) -> int:
    """A thread's last reads with no frame at all, after whole reads rooted in a frame it leaves
    only at its end, are torn when /proc lists the thread alive after them (two ticks at least):
    the thread had not ended, py-spy's read of its frames failed. `_drop_torn_reads` drops such a
    read between two whole ones; a trailing one only the /proc record can tell from a thread that
    ended (or a main thread finalising its interpreter). The thread holds its last whole stack,
    as across any read that is missing. Run after `close_exited_threads`. Returns how many
    threads held."""
    if tree is None or profile.instants != "measured":
        return 0
    held = 0
    for track in profile.threads:
        if not track.segments or track.changes is None or track.pid is None:
            continue
        changed, stacks = track.changes
        if len(stacks) < 2 or profile.stacks[int(stacks[-1])]:
            continue  # its last read had frames
        tid, start, _end = track.segments[-1]
        empty = np.array([not profile.stacks[int(sid)] for sid in stacks], dtype=bool)
        last_whole = int(np.flatnonzero(~empty)[-1]) if (~empty).any() else -1
        if last_whole < 0 or changed[last_whole] < start:
            continue  # no whole read of this OS thread to hold
        root = profile.stacks[int(stacks[last_whole])][0]
        if not _lives_as_long_as_its_thread(profile.frames[root]):
            continue  # a callback's root: empty between calls is its true state
        record = tree.records.get(track.pid)
        if record is None or not record.state_samples:
            continue
        torn_at = float(changed[last_whole + 1])
        seen_after = {float(t) for t, seen, _state in record.state_samples
                      if int(seen) == int(tid) and float(t) > torn_at + margin_s}
        if len(seen_after) < GONE_CONFIRM_TICKS:
            continue
        track.changes = (changed[:last_whole + 1], stacks[:last_whole + 1])
        held += 1
    if held:
        regrid(profile, 1.0 / profile.interval_s)
    return held


def close_exited_threads(profile: Profile, tree, margin_s: float = EXIT_MARGIN_S) -> int:
    """Ends the threads that exited mid-window, which the chrometrace format leaves open until
    the window's end (or until a new thread reuses the pthread id), at the first /proc tick of
    the same window from which on it no longer lists them (two ticks at least) after their last
    stack change (or their process's last tick, when it exited). The /proc clock starts just
    before py-spy's (the recorders are started right after the /proc sampler), so a thread ends
    at most one /proc tick plus a few ms late, never early. Returns how many threads were ended."""
    if tree is None or profile.instants != "measured":
        return 0
    closed = 0
    by_pid: dict = {}
    for track in profile.threads:
        if track.segments:
            by_pid.setdefault(track.pid, []).append(track)
    for pid, tracks in by_pid.items():
        record = tree.records.get(pid) if pid is not None else None
        if record is None or not record.state_samples:
            continue
        seen_at: dict[float, set] = {}
        last_seen: dict[int, float] = {}
        for t, tid, _state in record.state_samples:
            seen_at.setdefault(float(t), set()).add(int(tid))
            last_seen[int(tid)] = max(float(t), last_seen.get(int(tid), float(t)))
        ticks = np.array(sorted(seen_at))
        known = set().union(*seen_at.values()) | set(record.first)
        if not any(seg[0] in known for track in tracks for seg in track.segments):
            continue  # the recording's thread ids are not OS thread ids: cannot match them
        gap = float(np.median(np.diff(ticks))) if len(ticks) > 1 else 0.0
        process_end = float(ticks[-1]) + gap if record.target_exited else None
        for track in tracks:
            changed = track.changes[0]
            for segment in track.segments:
                tid, start, end = segment
                if tid >= MAX_OS_TID:
                    continue
                inside = changed[(changed >= start) & (changed < end)]
                last_change = float(inside[-1]) if len(inside) else start
                # Gone at the first tick after which /proc never listed it again, and only when
                # a second tick confirms it: one tick that missed a thread /proc lists again
                # later (a read that failed, the last tick cut short) is not its exit.
                after = ticks[(ticks > last_change + margin_s) & (ticks > last_seen.get(tid, -1.0))]
                gone = float(after[0]) if len(after) >= GONE_CONFIRM_TICKS else None
                candidates = [e for e in (gone, process_end) if e is not None]
                if candidates and min(candidates) < end:
                    segment[2] = max(start, min(candidates))
                    closed += 1
    if closed:
        regrid(profile, 1.0 / profile.interval_s)
    return closed
