"""Reads one process's asyncio tasks a few times a second over the window, in a background
thread beside the stack sampler; never raises: an unreadable target is a note."""

from __future__ import annotations

import threading
import time

from diagnose.collect.asyncio_tasks.binary import InterpreterNotFound, find_interpreter
from diagnose.collect.asyncio_tasks.layout_probe import CalibrationFailed, task_layout
from diagnose.collect.asyncio_tasks.awaited import classify
from diagnose.collect.asyncio_tasks.layout import UnsupportedLayout, target_layout
from diagnose.collect.asyncio_tasks.objects import ObjectReader
from diagnose.collect.asyncio_tasks.remote import RemoteMemory, RemoteReadError
from diagnose.collect.asyncio_tasks.walk import AsyncioNotLoaded, TaskWalker
from diagnose.collect.task_recording import TaskRecording, TaskSnapshot, TaskState

DEFAULT_RATE = 4.0       # reads per second
MAX_COST_SHARE = 0.2     # the reader sleeps at least 4x its last read: at most ~20% of a core
REFRESH_EVERY = 20       # re-find the task sets every this many reads (module reloaded, ...)
MAX_SNAPSHOTS = 10_000
# A process that has not imported asyncio (a pre-fork worker of threads) is asked again ever
# more rarely: each read of sys.modules costs the same whether or not tasks exist, and one busy
# tree has a reader per process. A late import is still seen, within this long.
NOT_LOADED_MAX_WAIT_S = 4.0


class Unreadable(Exception):
    def __init__(self, python: str, reason: str):
        where = f"CPython {python}" if python else "this interpreter"
        super().__init__(f"asyncio tasks not readable on {where}: {reason}")
        self.python = python


class _DeadTask(Exception):
    """The weakref outlived its task: nothing to read."""


class TaskReader:
    """One pid, set up once (interpreter, offsets, Task calibration); `snapshot()` per read."""

    def __init__(self, pid: int):
        self.pid = pid
        try:
            interp = find_interpreter(pid)
        except InterpreterNotFound as exc:
            raise Unreadable("", str(exc)) from exc
        try:
            self.mem = RemoteMemory(pid)
        except RemoteReadError as exc:
            raise Unreadable("", str(exc)) from exc
        try:
            minor = interp.minor
            if interp.version_address:
                version = self.mem.ptr(interp.version_address) & 0xFFFFFFFF
                if version >> 24 == 3:
                    minor = (version >> 16) & 0xFF
            self.python = f"3.{minor}" if minor else ""
            if minor < 11 or minor > 13:
                raise Unreadable(self.python, "only CPython 3.11-3.13 layouts are known")
            layout = target_layout(self.mem, interp.runtime_address, minor)
            tasks = task_layout(interp, pid)
        except (UnsupportedLayout, CalibrationFailed, RemoteReadError, OSError) as exc:
            self.mem.close()
            raise Unreadable(getattr(self, "python", ""), str(exc)) from exc
        except Unreadable:
            self.mem.close()
            raise
        self.walker = TaskWalker(ObjectReader(self.mem, layout), layout, tasks,
                                 interp.runtime_address)
        self._reads = 0

    def close(self) -> None:
        self.mem.close()

    def snapshot(self) -> TaskSnapshot:
        """Raises AsyncioNotLoaded (no tasks) or RemoteReadError (this read failed as a
        whole); a task that fails to read is left out and the snapshot marked torn."""
        refresh = self._reads % REFRESH_EVERY == 0
        self._reads += 1
        at = time.time()
        states: list[TaskState] = []
        torn = False
        self.walker.new_snapshot()
        for task in self.walker.task_addresses(refresh):
            try:
                states.append(self._task(task))
            except _DeadTask:
                continue
            except RemoteReadError:
                torn = True
        return TaskSnapshot(at=at, tasks=tuple(states), torn=torn)

    def _task(self, task: int) -> TaskState:
        fields = self.walker.task_fields(task)
        if fields is None:
            raise _DeadTask()
        state, name, coro, waiter = fields
        if state != 0:
            return TaskState(task_id=task, name=name, frames=(), waits_on=None, done=True)
        chain = self.walker.chain(coro) if coro else None
        if chain is None:
            return TaskState(task_id=task, name=name, frames=(), waits_on=None)
        return TaskState(task_id=task, name=name,
                         frames=tuple(f.frame for f in chain.frames),
                         waits_on=classify(self.walker, task, chain, waiter))


def read_tasks_once(pid: int) -> TaskRecording:
    """One read of `pid`'s tasks, as a recording of one snapshot (or why there is none)."""
    sampler = AsyncioTaskSampler(pid)
    sampler.read_once()
    return sampler.recording()


class AsyncioTaskSampler:
    """start(); ... stop() -> TaskRecording. Its own cost is in `read_seconds`."""

    def __init__(self, pid: int, rate: float = DEFAULT_RATE):
        self.pid = pid
        self.interval = 1.0 / rate if rate > 0 else 1.0
        self._reader: TaskReader | None = None
        self._python = ""
        self._unreadable = ""
        self._notes: list[str] = []
        self._snapshots: list[TaskSnapshot] = []
        self._reads = self._failed = 0
        self._cost = 0.0
        self._not_loaded = False
        self._not_loaded_streak = 0  # reads in a row that found no asyncio
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> AsyncioTaskSampler:
        self._thread = threading.Thread(target=self._run, name=f"asyncio-tasks-{self.pid}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> TaskRecording:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        return self.recording()

    def _run(self) -> None:
        self._guarded(self._open)  # once; its cost is not a read's and does not set the pace
        while not self._stop.is_set():
            began = time.monotonic()
            if not self.read_once():
                break
            spent = time.monotonic() - began
            self._stop.wait(pause_after(self.interval, spent, self._not_loaded_streak))
        if self._reader is not None:
            self._reader.close()

    def read_once(self) -> bool:
        """One read; False when there is nothing more to read (unreadable target)."""
        return self._guarded(self._read)

    def _guarded(self, step) -> bool:
        began = time.monotonic()
        try:
            return bool(step())
        except Exception as exc:  # the sampler never fails the attach: a note instead
            self._failed += 1
            self._note(f"asyncio task read failed: {type(exc).__name__}: {exc}")
            return True
        finally:
            self._cost += time.monotonic() - began

    def _open(self) -> bool:
        if self._reader is None and not self._unreadable:
            try:
                self._reader = TaskReader(self.pid)
                self._python = self._reader.python
            except Unreadable as exc:
                self._unreadable, self._python = str(exc), exc.python
            except Exception as exc:  # a layout we misread: a note, like any unreadable one
                self._unreadable = str(Unreadable(self._python, f"{type(exc).__name__}: {exc}"))
        return self._reader is not None

    def _read(self) -> bool:
        if not self._open():
            return False
        assert self._reader is not None
        self._reads += 1
        try:
            snapshot = self._reader.snapshot()
        except AsyncioNotLoaded:
            self._not_loaded = True
            self._not_loaded_streak += 1
            return True
        except RemoteReadError as exc:
            self._failed += 1
            if not _alive(self.pid):
                self._note(f"process {self.pid} exited during the window")
                return False
            self._note(f"a read of the task set failed (the target changed under us): {exc}")
            return True
        self._not_loaded = False
        self._not_loaded_streak = 0
        if len(self._snapshots) < MAX_SNAPSHOTS:
            self._snapshots.append(snapshot)
        return True

    def _note(self, note: str) -> None:
        if note not in self._notes and len(self._notes) < 10:
            self._notes.append(note)

    def recording(self) -> TaskRecording:
        notes = list(self._notes)
        if self._not_loaded and not self._snapshots:
            notes.append(f"process {self.pid} has not imported asyncio: no tasks to read")
        return TaskRecording(pid=self.pid, python=self._python, snapshots=tuple(self._snapshots),
                             unreadable=self._unreadable, reads=self._reads,
                             failed_reads=self._failed, read_seconds=self._cost,
                             notes=tuple(notes))


def pause_after(interval: float, spent: float, not_loaded_streak: int) -> float:
    """The wait before the next read: the rate's interval, at least 4x the last read's cost
    (MAX_COST_SHARE), and, after reads that found no asyncio, doubling with each one in a row
    up to NOT_LOADED_MAX_WAIT_S."""
    wait = max(interval - spent, spent / MAX_COST_SHARE - spent)
    if not_loaded_streak:
        wait = max(wait, min(NOT_LOADED_MAX_WAIT_S, interval * 2 ** not_loaded_streak))
    return wait


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
