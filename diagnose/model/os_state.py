"""Thread states the frames cannot decide, settled by the thread's OS state from /proc.

A native leaf no table names (absl's futex through a bare `syscall`, a stripped library's
unnamed wait) reads as "running native code"; a Python-only sample of a thread blocked in C reads
as "running Python" (estimated). The /proc sampler saw the same thread over the same window: when
it was asleep (S / D / I) in nearly every observation and got next to no CPU, those samples were
waits. Samples whose own native frames show the interpreter running Python, and waits the frames
already name, are kept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from diagnose.classify.state import LOCK_LINE
from diagnose.samples import source
from diagnose.model.kernel_waits import Blocking, KernelView, WaitObject
from diagnose.samples.profile import Frame
from diagnose.vocab import PRIMITIVE_KINDS, RUNNING, ThreadState, WaitKind
from diagnose.vocab import ResourceKind

if TYPE_CHECKING:  # types only: the OS summary is read here, built elsewhere
    from diagnose.model.os_summary import ProcessOS

SLEEPING = ("S", "D", "I")
MIN_OBSERVATIONS = 5  # fewer /proc observations of a thread decide nothing
ASLEEP_SHARE = 0.9  # of the thread's observations (py-spy's own pauses excluded)
MAX_CORE_SHARE = 0.1  # CPU seconds over the window


def asleep_threads(os_: ProcessOS) -> set[int]:
    """Threads /proc saw asleep nearly always, using next to no CPU."""
    window = max(os_.window_s, 1e-6)
    found = set()
    for tid, thread in os_.threads.items():
        seen = sum(thread.state_counts.values())
        if seen < MIN_OBSERVATIONS:
            continue
        asleep = sum(n for state, n in thread.state_counts.items() if state in SLEEPING)
        if asleep / seen >= ASLEEP_SHARE and thread.cpu_s / window <= MAX_CORE_SHARE:
            found.add(int(tid))
    return found


def settle_with_os_state(samples: pd.DataFrame, os_: ProcessOS | None) -> pd.DataFrame:
    """Busy samples of asleep threads become waits (`io`) where the frames could not tell: an
    unnamed native leaf (state native, no wait kind) or a state estimated from Python frames."""
    if os_ is None or samples.empty:
        return samples
    asleep = asleep_threads(os_)
    if not asleep:
        return samples
    undecided = (((samples["state"] == ThreadState.NATIVE) & (samples["wait_kind"] == WaitKind.NONE))
                 | (samples["state"].isin(RUNNING) & samples["estimated"]))
    mask = samples["tid"].isin(asleep) & undecided
    if not mask.any():
        return samples
    out = samples.copy()
    out.loc[mask, "state"] = ThreadState.IO
    out.loc[mask, "wait_kind"] = WaitKind.IO
    return out


# A stack py-spy saw at this many consecutive samples was held between them: a /proc tick in
# that stretch saw the thread at it (the clocks agree to a few ms once the recorder's window
# start is added, readers/chrometrace.py).
STABLE_SAMPLES = 2
MIN_VOTES = 3  # ticks matched to a stack's samples before the kernel decides the stack...
AGREEMENT = 0.75  # ...and the share of them that must say the same
WHOLE_WINDOW = 0.95  # a thread the kernel saw this often on one object is on it in every sample


def settle_with_kernel(samples: pd.DataFrame, kernel: KernelView | None, interval_s: float,
                       origin_s: float = 0.0,
                       changes: Mapping[int, tuple[np.ndarray, np.ndarray]] | None = None,
                       decided: Mapping[int, WaitObject] | None = None,
                       frames: Sequence[Frame] = (),
                       pool_stacks: np.ndarray | None = None,
                       pool_present: bool = False) -> pd.DataFrame:
    """Samples the frames read as running, settled by what the kernel saw the thread wait on
    (model/kernel_waits.py): a lock's futex or a file lock is a lock wait, the GIL's futex a GIL
    wait, a pipe, socket, child or timer a wait outside the thread, a listening socket a wait for
    work. The frames' measured states are kept; a GIL wait is taken from the kernel only where no
    native sample calibrated the stack (the calibration already counts it). Samples the frames
    read as a wait outside the process, without a native sample of their own (`_hidden_gil`),
    are settled too, and only to a GIL wait.

    A thread and its stack are matched to the kernel in two ways. A thread the kernel saw on one
    object nearly all window waits on it in each of its samples. Otherwise each /proc tick inside a
    stretch over which py-spy saw the thread keep one stack (two samples at least) is a vote for
    that stack, and a stack whose votes mostly name one object takes it in all its samples: a
    wait and the work around it have different stacks (the line that blocks).
    `origin_s`: the recorder's window start on its clock, where the /proc clock starts.
    `changes`: per thread, the instants its stack changed and the stack then (a timestamped
    recording, on the recorder's clock): the instants py-spy really sampled it, where the sample
    table's rows stand on a grid that may lag them by a sampling interval. `decided`: stacks
    already decided from votes pooled over the service's processes (`pooled_decisions`): the
    workers of one program share their stacks, and one worker's few votes are too few.

    Where the votes are too few (a sparse sample), two readings of the frames against the kernel
    decide: a thread the kernel saw asleep on one held object (a lock, a file lock) most of the
    window spends most of its samples at the line that blocks, so its most sampled line, when it
    holds half its undecided samples, waits on that object; and a line whose source takes a file
    lock (`frames`: the profile's, to read it), in a thread the kernel saw wait for one, waits for
    it. `pool_stacks`: per stack, whether it runs in an intra-op pool's library (OpenBLAS,
    OpenMP, MKL, torch): a native mutex there is the pool's, elsewhere a lock requests queue on.

    A wait is a lock only where a lock is named. A Python lock's futex (most of its ticks fell
    where the frames read a wait on a Python primitive, or at a line that takes a lock) is waited
    for at the line that takes it: its ticks at another stack are the neighbouring wait's (the
    edge of a stretch of numpy work beside `with lock:`) and vote for nothing, and it is never
    what a native mutex elsewhere waits on (under a numpy call, the GIL's own). A futex no Python
    code waits on (a ctypes call's mutex) stays the lock of the native wait the frames show."""
    if kernel is None or samples.empty or not kernel.times:
        return samples
    rows = _kernel_rows(samples, origin_s, frames, pool_stacks, pool_present)
    decision = np.full(len(samples), -1, dtype=np.int64)  # index into kernel.objects
    objects_at = {o: i for i, o in enumerate(kernel.objects)}
    python = _decide_by_ticks(rows, kernel, interval_s, changes, frames, decision)
    _decide_pooled(rows, decided, decision, objects_at)
    _decide_by_held(samples, rows, kernel, python, decision, objects_at)
    if frames:
        _file_lock_lines(kernel, rows.tids, rows.sites, rows.undecided, decision, objects_at, frames)
    _clients_of_servers(samples, kernel, rows.tids, decision, objects_at)
    return _settled(samples, rows, decision, list(objects_at), python, pool_stacks, pool_present)


@dataclass(frozen=True, eq=False)
class _KernelRows:
    """settle_with_kernel's reading of the sample table: its columns as arrays, and per sample
    (per stack for `taking`) what the kernel may settle."""

    tids: np.ndarray
    stacks: np.ndarray
    sites: np.ndarray
    counts: np.ndarray  # float64
    instants: np.ndarray  # on the /proc clock (the recorder's window start added)
    undecided: np.ndarray  # read as running, or a native wait the frames cannot name
    hidden: np.ndarray  # a wait outside without a native sample of its own (_hidden_gil)
    votable: np.ndarray  # undecided and not calibrated: what the votes settle
    app_mutex: np.ndarray  # a native mutex outside an intra-op pool's library
    taking: np.ndarray  # per stack: where Python code takes a lock (lock_taking)


def _kernel_rows(samples: pd.DataFrame, origin_s: float, frames: Sequence[Frame],
                 pool_stacks: np.ndarray | None, pool_present: bool) -> _KernelRows:
    """The columns settle_with_kernel reads, and which samples the kernel may settle."""
    state = samples["state"]
    undecided = ((state.isin(RUNNING) & (samples["state_source"] != "measured"))
                 | ((state == ThreadState.NATIVE) & (samples["wait_kind"] == WaitKind.NONE))).to_numpy()
    hidden = _hidden_gil(samples)
    # A native mutex outside an intra-op pool's library (the service's own C code, a ctypes
    # call): the frames name the wait but not whose; a thread the kernel saw asleep on one
    # futex most of the window queues on a lock (_decide_by_held settles it).
    # A calibrated stack has no native frames of its own: its native mutex is a pool's when the
    # process's native samples ran in a pool's library at all (`pool_present`).
    calibrated = (samples["state_source"] == "calibrated").to_numpy()
    app_mutex = ((samples["wait_kind"] == WaitKind.NATIVE_MUTEX).to_numpy()
                 & ~np.asarray(pool_stacks, dtype=bool)[samples["stack"].to_numpy()]
                 & ~(calibrated & pool_present)
                 if pool_stacks is not None and len(pool_stacks) else np.zeros(len(samples), dtype=bool))
    stacks = samples["stack"].to_numpy()
    sites = samples["site"].to_numpy()
    # Votes settle only what no native sample saw: a calibrated stack's mix of states was
    # measured, and a futex under it may be its library's own pool (OpenBLAS), not a lock.
    votable = undecided & (samples["state_source"] != "calibrated").to_numpy()
    return _KernelRows(tids=samples["tid"].to_numpy(), stacks=stacks, sites=sites,
                       counts=samples["count"].to_numpy().astype(np.float64),
                       instants=samples["t"].to_numpy(dtype=np.float64) + origin_s,
                       undecided=undecided, hidden=hidden, votable=votable, app_mutex=app_mutex,
                       taking=lock_taking(stacks, samples["wait_kind"], sites, frames, 0))


@dataclass(frozen=True)
class _TicksByThread:
    """The kernel's ticks, matched per thread to the samples' stacks."""

    voting: list[_Ticks]  # the ticks that vote for the stacks of undecided samples
    each_thread: list[_Ticks]  # every thread's, which say which futexes are Python locks
    wholes: list[tuple[np.ndarray, int]]  # rows of a thread on one object all window


def _ticks_by_thread(rows: _KernelRows, kernel: KernelView, interval_s: float,
                     changes: Mapping[int, tuple[np.ndarray, np.ndarray]] | None) -> _TicksByThread:
    """Each thread's ticks matched to its stacks; a thread the kernel saw on one object nearly
    all window is set aside whole (its undecided samples wait on it) and does not vote."""
    voting: list[_Ticks] = []
    each_thread: list[_Ticks] = []
    wholes: list[tuple[np.ndarray, int]] = []
    instants, stacks = rows.instants, rows.stacks
    for tid, times in kernel.times.items():
        mine = (rows.tids == tid) & np.isfinite(instants)
        if not len(times) or not mine.any():
            continue
        stretches = changes.get(tid) if changes is not None else None
        every_row = np.flatnonzero(mine)
        each_thread.append(_thread_ticks(stretches, instants[every_row], stacks[every_row], times,
                                         kernel.indices[tid], interval_s))
        settle = np.flatnonzero(mine & (rows.undecided | rows.hidden))
        if not len(settle):
            continue
        whole = _whole_window_object(kernel, tid)
        if whole is not None:
            wholes.append((settle, whole))
            continue
        voting.append(_thread_ticks(stretches, instants[settle], stacks[settle], times,
                                    kernel.indices[tid], interval_s))
    return _TicksByThread(voting, each_thread, wholes)


def _decide_by_ticks(rows: _KernelRows, kernel: KernelView, interval_s: float,
                     changes: Mapping[int, tuple[np.ndarray, np.ndarray]] | None,
                     frames: Sequence[Frame], decision: np.ndarray) -> frozenset[int]:
    """Fills `decision` from the kernel's ticks: a thread on one object all window, then the
    stacks whose votes agree (at the line that acquires), then the hidden GIL waits. Returns
    the objects that are Python locks (_python_locks), which the later readings need."""
    ticks = _ticks_by_thread(rows, kernel, interval_s, changes)
    stacks, taking = rows.stacks, rows.taking
    python = _python_locks(ticks.each_thread, kernel.objects, taking)
    for settle, whole in ticks.wholes:
        decision[settle[_at_taking(taking, stacks[settle]) | (whole not in python)]] = whole
    votes: dict[int, dict[int, int]] = {}  # stack -> object index -> ticks
    for voted in ticks.voting:
        _tally(votes, voted.without(_misplaced(voted, python, taking)))
    for stack, obj in _at_the_acquire(_agreed(votes), kernel.objects, stacks, rows.sites,
                                      frames).items():
        decision[(stacks == stack) & rows.votable & (decision < 0)] = obj
    # Hidden GIL waits are settled in a calibrated stack too: its calibration read them as
    # waits outside, so a GIL wait the kernel saw there is not one it counted.
    for stack, obj in _gil_stacks(votes, kernel.objects).items():
        decision[(stacks == stack) & rows.hidden & (decision < 0)] = obj
    return python


def _decide_pooled(rows: _KernelRows, decided: Mapping[int, WaitObject] | None,
                   decision: np.ndarray, objects_at: dict[WaitObject, int]) -> None:
    """Fills `decision` at the frames decided from votes pooled over the service's processes;
    an object of another process (of the same kind) is added to `objects_at`."""
    for frame, obj_ in (decided or {}).items():
        index = objects_at.get(obj_)
        if index is None:  # decided on another process's object of the same kind
            index = len(objects_at)
            objects_at[obj_] = index
        decision[(rows.sites == frame) & (rows.votable | rows.hidden) & (decision < 0)] = index


def _decide_by_held(samples: pd.DataFrame, rows: _KernelRows, kernel: KernelView,
                    python: frozenset[int], decision: np.ndarray,
                    objects_at: Mapping[WaitObject, int]) -> None:
    """Where the votes were too few: a thread the kernel saw asleep on one held object most of
    the window waits on it in its application's native mutex waits, and at its most sampled
    line when that line holds half its samples and the samples missed the wait."""
    tids, stacks, sites, taking = rows.tids, rows.stacks, rows.sites, rows.taking
    counts_f = rows.counts
    # a wait the frames already name: any state off a CPU, or a named wait (a native mutex)
    waiting = (~samples["state"].isin(RUNNING) | (samples["wait_kind"] != WaitKind.NONE)).to_numpy()
    for tid in kernel.threads:
        held = _dominant_held(kernel, tid)
        # A Python lock is waited for where Python code takes it: never in a native mutex
        # (under numpy, the GIL's own), nor at a line of work beside `with lock:`.
        python_lock = held is not None and objects_at[held] in python
        mine = np.flatnonzero(tids == tid)
        mutex_rows = mine[rows.app_mutex[mine] & (decision[mine] < 0)]
        if held is not None and held.resource == ResourceKind.LOCK and not python_lock and len(mutex_rows):
            decision[mutex_rows] = objects_at[held]
        undecided = mine[rows.undecided[mine] & (decision[mine] < 0) & (sites[mine] >= 0)]
        if python_lock:
            undecided = undecided[taking[stacks[undecided]]]
        if held is None or not len(undecided):
            continue
        # The samples missed the wait (fewer than half the kernel's share already read as one),
        # and the line is the thread's most sampled of all, not only of the undecided.
        total = counts_f[mine].sum()
        if counts_f[mine][waiting[mine]].sum() >= 0.5 * DOMINANT_SHARE * total:
            continue
        per_site = pd.Series(counts_f[mine]).groupby(sites[mine]).sum()
        top_site = int(per_site.idxmax())
        if top_site >= 0 and per_site[top_site] >= 0.5 * total:
            decision[undecided[sites[undecided] == top_site]] = objects_at[held]


def _settled(samples: pd.DataFrame, rows: _KernelRows, decision: np.ndarray,
             every: list[WaitObject], python: frozenset[int], pool_stacks: np.ndarray | None,
             pool_present: bool) -> pd.DataFrame:
    """The samples with each decided row's state and wait kind taken from its object (`every`,
    by `decision`'s index); `samples` itself where nothing changed."""
    decided_rows = np.flatnonzero(decision >= 0)
    if not len(decided_rows):
        return samples
    stacks, taking, hidden = rows.stacks, rows.taking, rows.hidden
    estimated = samples["estimated"].to_numpy()
    new_state = samples["state"].astype(object).to_numpy().copy()
    new_kind = samples["wait_kind"].astype(object).to_numpy().copy()
    changed = False
    # A futex no Python code takes, under a call into an intra-op pool's library (the stack runs
    # there, or has no native frames of its own in a process whose native samples ran in one),
    # is the pool's own mutex: native work queueing in the library, never a Python lock. (A
    # matmul line of blas_fanout on CPython 3.13 read as a "Lock" wait site, 12% of the request
    # threads' time, and named the verdict over the pool's scheduler_overhead.)
    in_pool = (np.asarray(pool_stacks, dtype=bool)[stacks] if pool_stacks is not None and len(pool_stacks)
               else np.zeros(len(samples), dtype=bool)) | (pool_present & ~taking[stacks])
    for row in decided_rows.tolist():
        index = int(decision[row])
        seen = every[index]
        if hidden[row]:  # a wait outside becomes the GIL's, never a lock's or anything else
            settled = _GIL_WAIT if seen.blocking == Blocking.GIL else None
        elif seen.resource == ResourceKind.LOCK and index not in python and in_pool[row]:
            settled = _POOL_MUTEX
        else:
            settled = _kernel_state(seen, bool(estimated[row]))
        if settled is not None:
            new_state[row], new_kind[row] = settled
            changed = True
    if not changed:
        return samples
    out = samples.copy()
    out["state"] = pd.Categorical(new_state, dtype=samples["state"].dtype)
    out["wait_kind"] = pd.Categorical(new_kind, dtype=samples["wait_kind"].dtype)
    return out


CLIENT_SHARE = 0.5  # a thread asleep on one served socket this share of its ticks is its client


def _clients_of_servers(samples: pd.DataFrame, kernel: KernelView, tids: np.ndarray, decision: np.ndarray,
                        objects_at: Mapping[WaitObject, int]) -> None:
    """A thread the frames read as waiting for work (a read at its own outermost loop) while the
    kernel saw it asleep most of the window on a connection it opened to a listener (a process
    on this host, or an address no local process serves): it is that peer's client, waiting on
    it, not for work. The frames' reading is a guess from the loop's shape; the kernel names the
    connection's side."""
    idle_io = ((samples["state"] == ThreadState.IDLE) & (samples["wait_kind"] == WaitKind.IO)).to_numpy()
    if not idle_io.any():
        return
    for tid, waits in kernel.threads.items():
        top = waits.top
        if top is None or top.resource != ResourceKind.SOCKET or not top.outbound:
            continue
        if waits.share(top.key) < CLIENT_SHARE:
            continue
        rows = (tids == tid) & idle_io & (decision < 0)
        decision[rows] = objects_at[top]


def _hidden_gil(samples: pd.DataFrame) -> np.ndarray:
    """Per sample: the frames read a wait outside the process (io) without a native sample of
    its own (its state estimated from the Python frames, or calibrated by other native samples
    of the stack). A C extension that releases the GIL for its work (PIL's JPEG decode) and
    queues to take it back shows, in py-spy's native stacks, a condition-variable wait right
    under the extension's function, libpython's take_gil elided: it reads as the library's own
    wait (classify/state.library_wait). Where the kernel saw the thread on the GIL's futex, it
    was the GIL; any other object the kernel names leaves the frames' reading (a socket is the
    wait outside it looks like; a lock's futex may be a parked thread's queue)."""
    return np.asarray((samples["state"] == ThreadState.IO) & (samples["state_source"] != "measured"),
                      dtype=bool)


def _gil_stacks(votes: Mapping[int, Mapping[int, int]], objects: Sequence[WaitObject]) -> dict[int, int]:
    """stack -> the GIL's index in `objects`, for the stacks whose hidden GIL waits the kernel
    settles. The frames say the thread slept there, so only the ticks that saw it asleep count
    (the ticks on a CPU are the work beside the wait): the GIL is the object most of them name
    (MIN_VOTES at least), and of those naming the GIL or a wait outside the process (what the
    frames read), AGREEMENT name the GIL. Ticks on a lock weigh on neither side: this path makes
    no lock wait, and at a busy service's low sampling rate most are a thread parked for work
    between two samples that saw it at the same stack (two requests in a row)."""
    out = {}
    for stack, by_object in votes.items():
        asleep = {o: n for o, n in by_object.items() if objects[o].blocking != Blocking.RUNNING}
        if not asleep:
            continue
        top = max(asleep, key=lambda o: asleep[o])
        outside = sum(n for o, n in asleep.items() if objects[o].blocking == Blocking.OUTSIDE)
        gil = asleep[top]
        if objects[top].blocking == Blocking.GIL and gil >= MIN_VOTES and gil >= AGREEMENT * (gil + outside):
            out[stack] = top
    return out


def _agreed(votes: Mapping[int, Mapping[int, int]]) -> dict[int, int]:
    """stack -> the object most of its votes name, where enough votes agree."""
    out = {}
    for stack, stack_votes in votes.items():
        total = sum(stack_votes.values())
        obj, n = max(stack_votes.items(), key=lambda p: p[1])
        if total >= MIN_VOTES and n / total >= AGREEMENT:
            out[stack] = obj
    return out


def _at_the_acquire(agreed: dict[int, int], objects: Sequence[WaitObject], stacks: np.ndarray,
                    sites: np.ndarray, frames: Sequence[Frame]) -> dict[int, int]:
    """A lock is waited for at the line that takes it. When the votes give one held lock to
    several stacks and some of them block at a line that takes a lock, the others won their
    votes by timing (ticks at the edge of a stretch of work beside the wait, on a busy machine):
    they keep the frames' reading."""
    if not frames:
        return agreed
    leaf: dict[int, int] = {}
    for stack, site in zip(stacks.tolist(), sites.tolist()):
        leaf.setdefault(int(stack), int(site))
    by_lock: dict[int, list[int]] = {}
    for stack, obj in agreed.items():
        if objects[obj].blocking == Blocking.HELD and objects[obj].resource == ResourceKind.LOCK:
            by_lock.setdefault(obj, []).append(stack)
    out = dict(agreed)
    for group in by_lock.values():
        taking = {s for s in group if _takes_a_lock(frames, leaf.get(s, -1))}
        if taking and len(taking) < len(group):
            for stack in group:
                if stack not in taking:
                    del out[stack]
    return out


def _takes_a_lock(frames: Sequence[Frame], site: int) -> bool:
    if not 0 <= site < len(frames):
        return False
    frame = frames[site]
    return bool(LOCK_LINE.search(source.stripped_line(frame.file, frame.line)))


def pooled_decisions(kernels: Mapping[int, KernelView],
                     changes: Mapping[tuple[int, int], tuple[np.ndarray, np.ndarray]],
                     leaf: Mapping[int, int], interval_s: float,
                     taking: np.ndarray | None = None) -> dict[int, WaitObject]:
    """Code line (the innermost Python frame, `leaf[stack]`) -> the kind of wait the kernel saw
    there, from the votes of every process: `changes` by (pid, tid). Votes count the kind of wait
    (the GIL, a lock, a file lock, outside, idle, running), not the object, and the line, not the
    whole stack: one program's workers wait on their own locks at one line, reached from several
    callers, and a sparse sample gives each too few votes alone. `taking`: per stack, where
    Python code takes a lock (`lock_taking`); a tick on a process's Python lock votes there only."""
    kinds: dict[tuple[str, str | None], WaitObject] = {}
    votes: dict[int, dict[int, int]] = {}
    keyed: list[WaitObject] = []
    seen: list[tuple[int, _Ticks]] = []
    for (pid, tid), (seen_at, seen_stack) in changes.items():
        kernel = kernels.get(pid)
        if kernel is None or tid not in kernel.times:
            continue
        seen.append((pid, _Ticks.matched(seen_at, seen_stack, kernel.times[tid], kernel.indices[tid],
                                         interval_s)))
    python = {pid: _python_locks([t for p, t in seen if p == pid], kernels[pid].objects, taking)
              for pid in {p for p, _ in seen}} if taking is not None else {}
    for pid, ticks in seen:
        objects = kernels[pid].objects
        kept = ticks.without(_misplaced(ticks, python[pid], taking)) if taking is not None else ticks
        by_kind = np.array([_kind_index(objects[i], kinds, keyed) for i in ticks.obj.tolist()], dtype=np.int64)
        _tally(votes, _Ticks(kept.stack, by_kind), keys=leaf)
    return {frame: keyed[index] for frame, index in _agreed(votes).items() if frame >= 0}


def _thread_ticks(changes: tuple[np.ndarray, np.ndarray] | None, instants: np.ndarray, stacks: np.ndarray,
                  times: np.ndarray, objects: np.ndarray, interval_s: float) -> _Ticks:
    """A thread's ticks matched to its stretches: from the instants its stack changed (a
    timestamped recording), else from its rows' `instants` (and `stacks`) in time order."""
    if changes is not None:
        return _Ticks.matched(*changes, times, objects, interval_s)
    order = np.argsort(instants, kind="stable")
    return _Ticks.matched(instants[order], stacks[order], times, objects, interval_s)


def _kind_index(obj: WaitObject, kinds: dict[tuple[str, str | None], WaitObject],
                keyed: list[WaitObject]) -> int:
    key = (str(obj.blocking), None if obj.resource is None else str(obj.resource))
    if key not in kinds:
        kinds[key] = obj
        keyed.append(obj)
    return keyed.index(kinds[key])


def stacks_at_ticks(changes: tuple[np.ndarray, np.ndarray], times: np.ndarray, interval_s: float) -> np.ndarray:
    """Per /proc tick at `times`, the stack py-spy saw the thread keep then (-1: no stretch of
    two samples or more held it), from the instants its stack changed (`changes`, a
    timestamped recording): the matching settle_with_kernel votes with, for readers that ask
    what a thread's code was doing at a tick (model/lock_holders.py)."""
    return _Ticks.matched(*changes, times, np.zeros(len(times), dtype=np.int64), interval_s).stack


@dataclass(frozen=True)
class _Ticks:
    """One thread's kernel ticks, each with the stack py-spy saw the thread keep then (-1: none)
    and the index of the object the kernel saw it on."""

    stack: np.ndarray
    obj: np.ndarray

    @staticmethod
    def matched(seen_at: np.ndarray, seen_stack: np.ndarray, times: np.ndarray, objects: np.ndarray,
                interval_s: float) -> _Ticks:
        """`seen_at` (sorted) are the instants the thread's stack changed (or its rows began),
        a stretch runs to the next one. Only stretches that py-spy saw at two samples at least
        count: a state that alternates faster than py-spy samples (a lock taken for 5 ms at a
        time) leaves no stretch, and a tick near a short one saw the thread in its neighbour's
        state."""
        stack = np.full(len(times), -1, dtype=np.int64)
        if len(seen_at):
            ends = np.append(seen_at[1:], seen_at[-1] + interval_s)
            at = np.searchsorted(seen_at, times, side="right") - 1
            inside = at >= 0
            at = np.clip(at, 0, len(seen_at) - 1)
            inside &= times < ends[at]
            inside &= (ends[at] - seen_at[at]) >= STABLE_SAMPLES * interval_s
            stack[inside] = np.asarray(seen_stack, dtype=np.int64)[at][inside]
        return _Ticks(stack, np.asarray(objects, dtype=np.int64))

    def without(self, drop: np.ndarray) -> _Ticks:
        return _Ticks(np.where(drop, -1, self.stack), self.obj)


def _tally(votes: dict[int, dict[int, int]], ticks: _Ticks, keys: Mapping[int, int] | None = None) -> None:
    """Each tick matched to a stack votes for it (or for `keys[stack]`, its line)."""
    for stack, obj in zip(ticks.stack.tolist(), ticks.obj.tolist()):
        if stack < 0:
            continue
        key = stack if keys is None else keys.get(stack, -1)
        stack_votes = votes.setdefault(key, {})
        stack_votes[obj] = stack_votes.get(obj, 0) + 1


# ---------------------------------------------------------------- Python locks

def lock_taking(stacks: np.ndarray, kinds: pd.Series | np.ndarray, sites: np.ndarray,
                frames: Sequence[Frame], size: int) -> np.ndarray:
    """Per stack id (`size` of them): where Python code takes a lock. Some reading of the stack
    (`stacks[i]`, read as a wait of kind `kinds[i]` at the frame `sites[i]`) waits on a Python
    primitive (a Lock, a Condition, a Queue, ...), or its line takes a lock by its source."""
    stacks = np.asarray(stacks, dtype=np.int64)
    sites = np.asarray(sites, dtype=np.int64)
    taking = np.zeros(max(size, int(stacks.max(initial=-1)) + 1), dtype=bool)
    taking[stacks[pd.Series(kinds).isin(PRIMITIVE_KINDS).to_numpy()]] = True
    if frames:
        distinct = np.unique(sites[sites >= 0])
        lock_lines = distinct[[_takes_a_lock(frames, int(site)) for site in distinct.tolist()]]
        taking[stacks[np.isin(sites, lock_lines)]] = True
    return taking


def _python_locks(ticks: Sequence[_Ticks], objects: Sequence[WaitObject], taking: np.ndarray) -> frozenset[int]:
    """The locks' futexes (indices into `objects`) that Python code waits on: most of their ticks
    matched to a stack fell where Python code takes a lock. A Python lock is only ever waited for
    there; a native library's own mutex (a ctypes call's) is not, and stays any stack's."""
    is_lock = np.array([_is_lock(o) for o in objects], dtype=bool)
    at_taking = np.zeros(len(objects), dtype=np.int64)
    elsewhere = np.zeros(len(objects), dtype=np.int64)
    for t in ticks:
        on_lock = is_lock[t.obj] & (t.stack >= 0)
        here = _at_taking(taking, t.stack)
        at_taking += np.bincount(t.obj[on_lock & here], minlength=len(objects))
        elsewhere += np.bincount(t.obj[on_lock & ~here], minlength=len(objects))
    return frozenset(np.flatnonzero(at_taking > elsewhere).tolist())


def _misplaced(ticks: _Ticks, python: frozenset[int], taking: np.ndarray) -> np.ndarray:
    """Ticks on a Python lock at a stack that takes none: the neighbouring wait's (a tick at the
    edge of a stretch of work beside `with lock:`), never a lock wait of the work."""
    on_python_lock = np.isin(ticks.obj, np.fromiter(python, dtype=np.int64, count=len(python)))
    misplaced: np.ndarray = on_python_lock & (ticks.stack >= 0) & ~_at_taking(taking, ticks.stack)
    return misplaced


def _at_taking(taking: np.ndarray, stacks: np.ndarray) -> np.ndarray:
    """Per stack of `stacks` (-1: none): Python code takes a lock there."""
    known = (stacks >= 0) & (stacks < len(taking))
    here = np.zeros(len(stacks), dtype=bool)
    here[known] = taking[stacks[known]]
    return here


def _is_lock(obj: WaitObject) -> bool:
    return obj.blocking == Blocking.HELD and obj.resource == ResourceKind.LOCK


DOMINANT_SHARE = 0.6  # of a thread's ticks asleep on one held object: its main wait
# A source line that takes a file lock (fcntl.flock / fcntl.lockf / fcntl.fcntl with F_SETLKW).
FILE_LOCK_CALL = re.compile(r"\b(flock|lockf)\s*\(|F_(OFD_)?SETLKW")


def _dominant_held(kernel: KernelView, tid: int) -> WaitObject | None:
    return next((obj for obj, share in kernel.shares(tid)
                 if obj.blocking == Blocking.HELD and share >= DOMINANT_SHARE), None)


def _file_lock_lines(kernel: KernelView, tids: np.ndarray, sites: np.ndarray, undecided: np.ndarray,
                     decision: np.ndarray, objects_at: dict[WaitObject, int],
                     frames: Sequence[Frame]) -> None:
    """Undecided samples at a line that takes a file lock, of threads the kernel saw waiting for
    one, wait for it (the thread's most observed file lock)."""
    for tid, waits in kernel.threads.items():
        lock = next((o for o, _ in waits.objects if o.resource == ResourceKind.FILE_LOCK), None)
        if lock is None:
            continue
        rows = np.flatnonzero((tids == tid) & undecided & (decision < 0) & (sites >= 0))
        for site in np.unique(sites[rows]).tolist():
            frame = frames[int(site)]
            if FILE_LOCK_CALL.search(source.getline(frame.file, frame.line)):
                decision[rows[sites[rows] == site]] = objects_at[lock]


# Kernel readings that leave the frames' reading as it is: on a CPU, or in an intra-op pool's own
# synchronisation (the call into the library is the work; the pool's size is scheduler_overhead's).
_FRAMES_STAND = (Blocking.RUNNING, Blocking.POOL)


def _whole_window_object(kernel: KernelView, tid: int) -> int | None:
    """The object the kernel saw the thread blocked on in nearly every tick, if any."""
    waits = kernel.threads.get(tid)
    if waits is None or not waits.objects:
        return None
    top, n = waits.objects[0]
    if top.blocking in _FRAMES_STAND or n / max(1, waits.observations) < WHOLE_WINDOW:
        return None
    return kernel.objects.index(top)


_GIL_WAIT = (ThreadState.GIL.value, WaitKind.GIL.value)


_POOL_MUTEX = (ThreadState.NATIVE.value, WaitKind.NATIVE_MUTEX.value)


def _kernel_state(obj: WaitObject, estimated: bool) -> tuple[str, str] | None:
    if obj.blocking in _FRAMES_STAND:
        return None
    if obj.blocking == Blocking.GIL:
        return _GIL_WAIT if estimated else None
    if obj.blocking == Blocking.HELD:
        kind = WaitKind.FILE_LOCK if obj.resource == ResourceKind.FILE_LOCK else WaitKind.LOCK
        return ThreadState.LOCK.value, kind.value
    if obj.blocking == Blocking.IDLE:
        return ThreadState.IDLE.value, WaitKind.NONE.value
    return ThreadState.IO.value, WaitKind.IO.value
