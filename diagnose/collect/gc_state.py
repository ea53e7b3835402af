"""The cyclic garbage collector's state, read from the target's memory over the window: how much
of the window a collection was in progress, and how many collections of each generation ran.

CPython keeps its collector's state in the interpreter (`PyInterpreterState.gc`, a
`struct _gc_runtime_state`): `collecting` is 1 from the moment a collection begins until it
ends (its callbacks included; 3.11's `_PyObject_GC_Link`, 3.12's `_Py_RunGC` and 3.13's
`_PyGC_Collect` set and clear it), and `generation_stats[i].collections` counts the collections
of generation i. Both are read through /proc/PID/mem (as root), without stopping the target or
running anything in it: `collecting` POLL_HZ (50) times a second on one thread of our own for
every process of a tree, each read weighted by the time since the previous one (a poll that came
late stands for the whole gap: a loaded machine delays the poller most while the target's
threads compete for the cores, least while one collects); the counters at the start and at the
end.

It is the share of the *window*, not of the CPU: on a loaded machine the collecting thread holds
the GIL while preempted too. The process's CPU sampled beside the polls did not tell the
collector's CPU apart (on gc_heavy it read 47-52% where gc.callbacks' thread CPU said 28-31%,
and the window's 47-49% agreed), so it is not read.

Offsets come from the interpreter's headers (scripts/gen_cpython_offsets.py, in
asyncio_tasks/offsets_data.py); on 3.13+ the target's `_Py_DebugOffsets` says where `gc` sits in
its interpreter, and a disagreement stops the reader.

Measured on the gc_heavy fixture (CPython 3.11, 2 loaded cores, 6 s at 50 Hz): ~300 polls; the
share of the window within 9 points of the fixture's own gc.callbacks wall time (51/42, 47/47,
49/49%), the collections per generation equal to its count (one young collection of ~210
apart); at 100 Hz, 0.007 cores of our CPU.
"""

from __future__ import annotations

import random
import struct
import threading
import time
from dataclasses import dataclass, field

from diagnose.collect.asyncio_tasks.binary import InterpreterNotFound, find_interpreter
from diagnose.collect.asyncio_tasks.layout import DEBUG_COOKIE
from diagnose.collect.asyncio_tasks.offsets_data import OFFSETS
from diagnose.collect.asyncio_tasks.remote import RemoteMemory, RemoteReadError

POLL_HZ = 50
GENERATIONS = 3
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")


@dataclass
class GcRecord:
    """What the reader saw of one process's collector (serialisable: replayed offline)."""

    minor: int | None = None  # CPython 3.minor
    polls: int = 0
    collecting_polls: int = 0
    polled_s: float = 0.0  # the time the polls stand for (each: since the previous one)
    collecting_s: float = 0.0  # of which with a collection in progress
    collections_first: list[int] = field(default_factory=list)  # per generation, young first
    collections_last: list[int] = field(default_factory=list)
    failed_polls: int = 0
    unreadable: str | None = None  # why nothing could be read (not CPython, unknown layout, ...)

    @property
    def collections(self) -> list[int] | None:
        """Collections of each generation over the window (young, middle, full)."""
        if len(self.collections_first) != GENERATIONS or len(self.collections_last) != GENERATIONS:
            return None
        return [max(0, b - a) for a, b in zip(self.collections_first, self.collections_last)]

    @property
    def collecting_share(self) -> float | None:
        """The share of the polled time a collection was in progress."""
        return self.collecting_s / self.polled_s if self.polled_s > 0 else None

    def to_dict(self) -> dict:
        return {"minor": self.minor, "polls": self.polls, "collecting_polls": self.collecting_polls,
                "polled_s": round(self.polled_s, 4), "collecting_s": round(self.collecting_s, 4),
                "collections_first": self.collections_first, "collections_last": self.collections_last,
                "failed_polls": self.failed_polls, "unreadable": self.unreadable}

    @classmethod
    def from_dict(cls, data: dict) -> GcRecord:
        return cls(minor=data.get("minor"), polls=int(data.get("polls") or 0),
                   collecting_polls=int(data.get("collecting_polls") or 0),
                   polled_s=float(data.get("polled_s") or 0.0),
                   collecting_s=float(data.get("collecting_s") or 0.0),
                   collections_first=[int(x) for x in data.get("collections_first") or []],
                   collections_last=[int(x) for x in data.get("collections_last") or []],
                   failed_polls=int(data.get("failed_polls") or 0), unreadable=data.get("unreadable"))


class UnreadableCollector(Exception):
    """The target's collector state cannot be located."""


@dataclass(frozen=True)
class _Where:
    collecting: int  # address of gcstate->collecting (an int)
    stats: int  # address of gcstate->generation_stats[0]
    stats_size: int
    stats_collections: int


def locate(mem: RemoteMemory, pid: int) -> tuple[int, _Where]:
    """(minor, where the collector's state is) in process `pid`."""
    try:
        interp = find_interpreter(pid)
    except InterpreterNotFound as exc:
        raise UnreadableCollector(str(exc)) from exc
    table = OFFSETS.get(f"3.{interp.minor}")
    if table is None or "interp_gc" not in table:
        raise UnreadableCollector(f"no offsets of the collector's state for CPython 3.{interp.minor}")
    interp_gc = table["interp_gc"]
    try:
        if "dbg.interp_gc" in table:  # 3.13+: the target says where `gc` is in its interpreter
            head = mem.read(interp.runtime_address, table["dbg.interp_gc"] + 8)
            if head[table["dbg.cookie"]:table["dbg.cookie"] + 8] != DEBUG_COOKIE:
                raise UnreadableCollector("_PyRuntime does not start with the _Py_DebugOffsets cookie")
            published = _U64.unpack_from(head, table["dbg.interp_gc"])[0]
            if published != interp_gc:
                raise UnreadableCollector(f"the target puts the collector's state at {published}, "
                                          f"its headers at {interp_gc}: another build")
        main = mem.ptr(interp.runtime_address + table["runtime_interpreters_head"])
    except RemoteReadError as exc:
        raise UnreadableCollector(f"the interpreter is not readable: {exc}") from exc
    gc = main + interp_gc
    return interp.minor, _Where(gc + table["gc_collecting"], gc + table["gc_generation_stats"],
                                table["gc_stats_size"], table["gc_stats_collections"])


def _collections(mem: RemoteMemory, where: _Where) -> list[int]:
    raw = mem.read(where.stats, where.stats_size * GENERATIONS)
    return [int(_I64.unpack_from(raw, i * where.stats_size + where.stats_collections)[0])
            for i in range(GENERATIONS)]


class GcPollThread:
    """One thread polling the collectors of every process it is given, each at its own pace.

    A thread per process woke as many times more often, and the wake-ups, not the reads (~2 µs
    each), were the readers' cost: four processes of a busy tree over 10 s took 0.17 CPU s with
    a thread each, 0.05 with one (2026-12-07). The thread ends when its last sampler leaves and
    starts again when another joins."""

    def __init__(self, poll_hz: float = POLL_HZ):
        self.interval = 1.0 / poll_hz
        self._lock = threading.Lock()  # held by a round of polls, and to join or leave
        self._members: list[GcStateSampler] = []
        self._thread: threading.Thread | None = None

    def join(self, sampler: GcStateSampler) -> None:
        with self._lock:
            self._members.append(sampler)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="diagnose-gc", daemon=True)
                self._thread.start()

    def leave(self, sampler: GcStateSampler) -> None:
        """After this returns no poll of `sampler` is under way or to come."""
        with self._lock:
            if sampler in self._members:
                self._members.remove(sampler)

    def _run(self) -> None:
        # Each pause drawn at random around the interval: young collections come at a steady
        # cadence under a steady load, and polls at a fixed period would alias with it.
        jitter = random.Random()
        while True:
            time.sleep(self.interval * jitter.uniform(0.5, 1.5))
            with self._lock:
                if not self._members:
                    self._thread = None
                    return
                now = time.monotonic()
                for sampler in self._members:
                    try:
                        sampler.poll(now)
                    except Exception as exc:  # a misread of one process stops none of the others
                        sampler.misread(exc)


class GcStateSampler:
    """`start()`, then `finish()` -> GcRecord: polls the collector's `collecting` flag from start
    to finish (on `polls`, a thread shared with other processes' samplers, or one of its own),
    and reads its counters at both ends."""

    def __init__(self, pid: int, polls: GcPollThread | None = None):
        self.pid = pid
        self.record = GcRecord()
        self._polls = polls if polls is not None else GcPollThread()
        self._window_opened = threading.Event()
        self._restarted = False
        self._last: float | None = None  # when it was last polled (opened, the first time)
        self._mem: RemoteMemory | None = None
        self._where: _Where | None = None

    def start(self) -> None:
        self._polls.join(self)

    def poll(self, now: float) -> None:
        """One turn of the poll thread: the first opens the process's memory and reads the
        counters; each later one reads `collecting`, standing for the time since the last."""
        if self.record.unreadable is not None:
            return
        if self._last is None:
            self._open()
        elif self._window_opened.is_set() and not self._restarted:
            self._restarted = True
            self._restart()
        else:
            self._poll(now - self._last)
        self._last = now

    def misread(self, exc: Exception) -> None:
        """An error no read expects: this process's collector is unreadable from here on."""
        self.record.unreadable = f"the collector's state misread: {type(exc).__name__}: {exc}"

    def _open(self) -> None:
        try:
            self._mem = RemoteMemory(self.pid)
            self.record.minor, self._where = locate(self._mem, self.pid)
            self.record.collections_first = _collections(self._mem, self._where)
        except (UnreadableCollector, RemoteReadError) as exc:
            self.record.unreadable = str(exc)

    def window_opened(self) -> None:
        """The window's clock started (every recorder has sampled): the polls and the counts
        start again from the next poll, so they cover the window the samples cover, not the
        recorders' start-up before it."""
        self._window_opened.set()

    def _restart(self) -> None:
        assert self._mem is not None and self._where is not None
        record = self.record
        record.polls = record.collecting_polls = record.failed_polls = 0
        record.polled_s = record.collecting_s = 0.0
        try:
            record.collections_first = _collections(self._mem, self._where)
        except RemoteReadError:
            record.failed_polls += 1

    def _poll(self, gap: float) -> None:
        """One read of `collecting`, standing for the `gap` since the previous one."""
        assert self._mem is not None and self._where is not None
        try:
            collecting = self._mem.i32(self._where.collecting) != 0
        except RemoteReadError:
            self.record.failed_polls += 1
            return
        record = self.record
        record.polls += 1
        record.polled_s += gap
        if collecting:
            record.collecting_polls += 1
            record.collecting_s += gap

    def finish(self) -> GcRecord:
        self._polls.leave(self)
        if self._mem is not None and self._where is not None and self.record.unreadable is None:
            try:
                self.record.collections_last = _collections(self._mem, self._where)
            except RemoteReadError:
                pass  # gone: the polls stand, the counts are not known
        if self._mem is not None:
            self._mem.close()
        return self.record
