"""Can this recording show waits at all?

py-spy records only the threads that are running unless told `--idle`: a thread blocked on a
lock, a queue, I/O or a sleep is then never sampled, and every wait is invisible. Such a
recording is recognisable: no thread is ever seen waiting or idle, and the threads have unequal
sample counts (with `--idle` every thread is read at every sampling instant it is alive, so
threads that live through the window have the same count: a pool's threads sharing the largest
count says --idle, counts spread below it say running threads only, whatever waits still show).
A timestamped recording (whose
samples hold each thread's last stack until its next change) says it differently: a process's
main thread is first seen after its other threads. A recording without timestamps
(speedscope, collapsed) then does not tell its window's length either: the busiest thread's
samples only bound it from below.
"""

from __future__ import annotations

import numpy as np

from diagnose.classify.state import FULL_SYMBOL_MARKERS, every_stack_state
from diagnose.vocab import WAITING
from diagnose.samples.profile import Profile

MOSTLY_WAITING = 0.5  # a thread whose samples are at least this share waiting or idle...
SIZEABLE = 0.25  # ...among threads with at least this share of the largest sample count
FULL_COUNT = 0.98  # "at the largest count": py-spy may miss a read or two of a thread
# A thread below the largest count by more than py-spy's missed reads is "unequal": without
# --idle, busy threads' counts differ by scheduling noise alone (6 threads of ~100 samples
# landed within 10% of each other in one recording of nine), so any looser bound lets a
# recording of running threads pass as complete.
EQUAL_COUNTS = FULL_COUNT
LIFETIME_SLACK_S = 0.5  # a main thread first seen later than this after its process's others
SPREAD_MIN_THREADS = 3  # a process's threads, to judge their counts' spread
SPREAD_LOW = 0.5  # "between half of the largest count and it"


def assess_waits(profile: Profile) -> None:
    """Sets `profile.waits_visible` / `waits_reason` (left as they are when nothing says the
    recording dropped idle samples).

    With --idle nearly every service has a thread that waits most of the window (its main
    thread, idle pool workers, an accept loop). Without it a thread is sampled only while it
    runs, and the few samples taken at a wait's line (caught entering or leaving it) leave it
    far from "mostly waiting"; threads that mostly wait have few samples at all."""
    if not profile.threads or len(profile.threads) < 2:
        return  # one thread: nothing to compare its count with
    if profile.instants == "measured":
        late = _main_thread_late(profile)
        if late is not None:
            profile.waits_visible, profile.waits_reason = False, (
                f"{late}: py-spy recorded only running threads (no --idle)")
        return
    full_symbols = any(f.function in FULL_SYMBOL_MARKERS for f in profile.frames)
    states = every_stack_state(profile, full_symbols).state
    # per stack id: waiting or idle (by the few distinct states, not per stack)
    waits_by_stack = np.zeros(len(states), dtype=bool)
    for kind in WAITING:
        waits_by_stack |= states == kind

    per_thread, waiting = [], []
    for track in profile.threads:
        ids, counts = track.stack_ids, track.counts
        # per distinct stack id of the track (ascending): its samples, by two count tables
        distinct = np.flatnonzero(np.bincount(ids)) if len(ids) else np.zeros(0, dtype=np.int64)
        per_stack = (np.bincount(ids, weights=counts)[distinct] if len(ids)
                     else np.zeros(0, dtype=np.float64))
        mask = waits_by_stack[distinct]
        per_thread.append(float(per_stack.sum()))
        waiting.append(float(per_stack[mask].sum()) if len(mask) else 0.0)
    largest = max(per_thread)
    if not largest:
        return
    spread = _spread_counts(profile, per_thread)
    if spread is not None:
        # Threads read unequally though they lived alike: whatever waits still show (a lock
        # wait py-spy judged active), the rest were dropped.
        _idle_less(profile, f"{spread}: py-spy recorded only running threads (no --idle)",
                   largest)
        return
    for count, waited in zip(per_thread, waiting):
        if count >= SIZEABLE * largest and waited >= MOSTLY_WAITING * count:
            return  # a thread was seen waiting: the recording shows waits
    unequal = _unequal_counts(profile, per_thread)
    if unequal is None:
        return
    _idle_less(profile, f"no thread was seen waiting or idle most of the time and {unequal}: "
                        f"py-spy recorded only running threads (no --idle)", largest)


def _idle_less(profile: Profile, reason: str, largest: float) -> None:
    if profile.window is None:
        reason += (f"; the window's length is not in the file (at least "
                   f"{largest * (profile.interval_s or 0.01):.1f} s, the busiest thread's samples)")
    profile.waits_visible, profile.waits_reason = False, reason


def _spread_counts(profile: Profile, per_thread: list[float]) -> str | None:
    """With --idle, threads that live through the window are read at every instant: a pool's
    threads share the largest count. Counts spread below the largest, with at most one thread
    at it, and most threads between half of it and just under it, are a recording of running
    threads only (short-lived threads, as a thread-per-request server has, sit far below half
    and do not count)."""
    groups: dict[int | None, list[float]] = {}  # pid -> samples per thread
    for track, count in zip(profile.threads, per_thread):
        groups.setdefault(track.pid, []).append(count)
    for group in groups.values():
        top = max(group)
        if len(group) < SPREAD_MIN_THREADS or not top:
            continue
        at_top = sum(1 for c in group if c >= FULL_COUNT * top)
        between = sum(1 for c in group if SPREAD_LOW * top <= c < FULL_COUNT * top)
        if at_top <= 1 and between >= len(group) / 2:
            return (f"the threads' sample counts spread from {int(min(group))} to {int(top)} "
                    f"with no two at the largest")
    return None


def _main_thread_late(profile: Profile) -> str | None:
    """Timestamped recordings: with --idle every thread of a process is read at every instant,
    its main thread (OS thread id = pid) from the process's first instant on. Without it, a
    thread is recorded from the first instant it runs, and a service's main thread mostly waits.
    (Nothing else works there: the format holds a thread's last stack until its next change, so
    a thread last seen entering a wait shows waiting long after.)"""
    for pid in profile.pids:
        segments = [seg for t in profile.threads if t.pid == pid and t.segments
                    for seg in t.segments]
        if not segments or any(tid >= 1 << 22 for tid, _s, _e in segments):
            continue  # thread ids that are not OS thread ids: the main thread is not known
        first = min(start for _tid, start, _end in segments)
        main = [start for tid, start, _end in segments if tid == pid]
        if main and min(main) - first > LIFETIME_SLACK_S:
            return (f"the main thread of process {pid} was first seen "
                    f"{min(main) - first:.1f} s after its other threads")
    return None


def _unequal_counts(profile: Profile, per_thread: list[float]) -> str | None:
    """How threads of one process that should have been read equally often were not (None
    when they were)."""
    groups: dict[int | None, list[float]] = {}  # pid -> samples per thread
    for track, count in zip(profile.threads, per_thread):
        groups.setdefault(track.pid, []).append(count)
    for group in groups.values():
        if len(group) >= 2 and min(group) < EQUAL_COUNTS * max(group):
            return f"the threads' sample counts differ ({int(min(group))} to {int(max(group))})"
    return None
