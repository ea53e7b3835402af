"""The C Task/Future layout (Modules/_asynciomodule.c, in no installed header), found at run
time: the target's own interpreter binary - run separately, never inside the target - runs a
probe that creates a task with a known name and coroutine, suspended on a known future, and
prints their id()s; we read the probe's memory with our own reader and note where those
addresses sit in the task. Cached per interpreter file (path, mtime, size) in memory and under
~/.cache/diagnose/."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from diagnose.collect import priority
from diagnose.collect.asyncio_tasks.binary import Interpreter, find_interpreter
from diagnose.collect.asyncio_tasks.remote import (
    RemoteMemory, RemoteReadError, i32_at, ptr_at)
from diagnose.outputs.files import WriteFailed, write_text

PROBE_TIMEOUT_S = 60.0  # a loaded machine starts an interpreter slowly
SCAN_BYTES = 512  # how far into the task object the fields are looked for
CACHE_FILE = Path(os.path.expanduser("~/.cache/diagnose/asyncio-task-layout.json"))
CACHE_VERSION = 1

PROBE = r"""
import asyncio, json, sys

async def diagnose_probe_waiter(fut):
    await fut

async def main():
    loop = asyncio.get_running_loop()
    pending = loop.create_future()
    done = loop.create_future()
    done.set_result(None)
    cancelled = loop.create_future()
    cancelled.cancel()
    name = "diagnose-probe-" + str(len(sys.argv) * 7919)  # a fresh, non-interned str
    task = asyncio.create_task(diagnose_probe_waiter(pending), name=name)
    for _ in range(3):
        await asyncio.sleep(0)
    it = pending.__await__()
    print(json.dumps({
        "task": id(task), "coro": id(task.get_coro()), "name": id(task.get_name()),
        "waiter": id(pending), "done": id(done), "cancelled": id(cancelled), "iter": id(it),
        "task_type": type(task).__module__ + "." + type(task).__qualname__,
    }), flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)
    task.cancel()

asyncio.run(main())
"""


class CalibrationFailed(Exception):
    pass


@dataclass(frozen=True)
class TaskLayout:
    """Offsets inside the C `_asyncio.Task` (and `Future`, which shares its head)."""

    fut_state: int          # enum: 0 pending, 1 cancelled, 2 finished
    fut_waiter: int         # the future the task is suspended on
    task_coro: int
    task_name: int          # a str, or (3.13) an int formatted lazily as "Task-<n>"
    futureiter_future: int  # inside the iterator `await future` suspends on


_memo: dict[str, TaskLayout] = {}
_lock = threading.Lock()


def _cache_key(interp: Interpreter, pid: int) -> str:
    parts = []
    for path in dict.fromkeys((interp.binary, interp.exe)):
        st = os.stat(_host(pid, path))
        parts.append(f"{path}:{st.st_mtime_ns}:{st.st_size}")
    return "|".join(parts)


def _same_file(a: str, b: str) -> bool:
    """The same file (a target in a container names it by another path than we do)."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _host(pid: int, path: str) -> str:
    rooted = f"/proc/{pid}/root{path}"
    return rooted if os.path.exists(rooted) else path


def task_layout(interp: Interpreter, pid: int) -> TaskLayout:
    key = _cache_key(interp, pid)
    with _lock:
        if key in _memo:
            return _memo[key]
        layout = _from_disk(key)
        if layout is None:
            layout = _calibrate(interp, pid)
            _to_disk(key, layout)
        _memo[key] = layout
        return layout


def _from_disk(key: str) -> TaskLayout | None:
    try:
        data = json.loads(CACHE_FILE.read_text())
        if data.get("version") != CACHE_VERSION:
            return None
        entry = data["layouts"].get(key)
        return TaskLayout(**entry) if entry else None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _to_disk(key: str, layout: TaskLayout) -> None:
    try:
        data = json.loads(CACHE_FILE.read_text()) if CACHE_FILE.exists() else {}
        if data.get("version") != CACHE_VERSION:
            data = {"version": CACHE_VERSION, "layouts": {}}
        data["layouts"][key] = asdict(layout)
        CACHE_FILE.parent.mkdir(parents=True, exist_ok=True)
        write_text(CACHE_FILE, json.dumps(data, indent=1))
    except (OSError, WriteFailed, ValueError, AttributeError):
        pass  # the in-memory copy serves this run


def _calibrate(interp: Interpreter, pid: int) -> TaskLayout:
    exe = _host(pid, interp.exe)
    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    if "libpython" in interp.binary:  # the probe must load the same libpython as the target
        env["LD_LIBRARY_PATH"] = os.path.dirname(_host(pid, interp.binary))
    try:
        # at the niceness diagnose started with, not the raised one attach runs at
        probe = subprocess.Popen([exe, "-I", "-c", PROBE], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                 text=True, preexec_fn=priority.restore_in_child)
    except OSError as exc:
        raise CalibrationFailed(f"cannot run the target's interpreter: {exc.strerror}") from exc
    timer = threading.Timer(PROBE_TIMEOUT_S, probe.kill)
    timer.start()
    try:
        assert probe.stdout is not None
        line = probe.stdout.readline()
        if not line:
            raise CalibrationFailed("the calibration probe printed nothing")
        ids = json.loads(line)
        if ids["task_type"] != "_asyncio.Task":
            raise CalibrationFailed(f"tasks are {ids['task_type']}, not the C _asyncio.Task")
        probe_interp = find_interpreter(probe.pid)
        if not _same_file(_host(pid, interp.binary), _host(probe.pid, probe_interp.binary)):
            raise CalibrationFailed("the probe did not load the target's libpython")
        with RemoteMemory(probe.pid) as mem:
            return _find_fields(mem, ids)
    except (RemoteReadError, ValueError, KeyError) as exc:
        raise CalibrationFailed(f"calibration probe unreadable: {exc}") from exc
    finally:
        timer.cancel()
        try:
            if probe.stdin:
                probe.stdin.close()
            probe.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            probe.kill()
            probe.wait()


def _pointer_offset(data: bytes, value: int, what: str, start: int = 16) -> int:
    for offset in range(start, len(data) - 7, 8):
        if ptr_at(data, offset) == value:
            return offset
    raise CalibrationFailed(f"{what} not found in the probe's task")


def _find_fields(mem: RemoteMemory, ids: dict) -> TaskLayout:
    task = mem.read(ids["task"], SCAN_BYTES)
    futures = {state: mem.read(ids[key], SCAN_BYTES)
               for state, key in ((0, "waiter"), (2, "done"), (1, "cancelled"))}
    states = [off for off in range(16, SCAN_BYTES - 3, 4)
              if all(i32_at(data, off) == state for state, data in futures.items())
              and i32_at(task, off) == 0]
    if not states:
        raise CalibrationFailed("fut_state not found in the probe's futures")
    iterator = mem.read(ids["iter"], 64)
    return TaskLayout(
        fut_state=states[0],
        fut_waiter=_pointer_offset(task, ids["waiter"], "fut_waiter"),
        task_coro=_pointer_offset(task, ids["coro"], "task_coro"),
        task_name=_pointer_offset(task, ids["name"], "task_name"),
        futureiter_future=_pointer_offset(iterator, ids["waiter"], "the iterator's future"),
    )
