"""The process tree under the pids a user names: which processes run Python, who is whose child.

The pid a user sees first (`ps`, `systemctl status`, a container's pid 1) is often not where the
work is: a gunicorn / uvicorn master supervises worker processes, a shell or `python -m` wrapper
launches the interpreter that serves. So `attach` samples the whole tree by default; this module
finds it. Reads /proc through psutil only; cheap enough to call on every /proc sampler tick.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

# Helper processes that multiprocessing starts beside the real workers: never request work.
HELPER_MARKERS = ("multiprocessing.resource_tracker", "multiprocessing.semaphore_tracker",
                  "multiprocessing.forkserver")


@dataclass(frozen=True)
class ProcessNode:
    pid: int
    ppid: int | None
    name: str
    cmdline: tuple[str, ...]
    python: bool

    @property
    def helper(self) -> bool:
        text = " ".join(self.cmdline)
        return any(marker in text for marker in HELPER_MARKERS)


def maps_python(pid: int) -> bool:
    """Does the process run a Python interpreter? (exe name, or libpython mapped)."""
    try:
        proc = psutil.Process(pid)
        if "python" in os.path.basename(proc.exe() or "").lower():
            return True
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
            return any("libpython" in line or "/python" in line.rsplit(" ", 1)[-1] for line in fh)
    except (psutil.Error, OSError):
        return False


def node(pid: int) -> ProcessNode | None:
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            ppid = proc.ppid()
            name = proc.name()
            try:
                cmdline = tuple(proc.cmdline())
            except psutil.AccessDenied:
                cmdline = ()
        return ProcessNode(pid, ppid, name, cmdline, maps_python(pid))
    except psutil.Error:
        return None


def _children_files(pid: int) -> list[int] | None:
    """Direct children from /proc/<pid>/task/<tid>/children (one small read per thread), or None
    where the kernel lacks CONFIG_PROC_CHILDREN."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    children: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
                children.extend(int(c) for c in fh.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread exited
            return None
        except OSError:
            continue
    return children


def descendants(pid: int) -> list[int]:
    """Every live descendant pid, parents before children. Walks the tree's own /proc children
    files when the kernel has them: the cost grows with the tree, not with every process on the
    host (psutil's walk reads every /proc/<pid>/stat), and the /proc sampler calls this often."""
    found, queue = [], [pid]
    while queue:
        children = _children_files(queue.pop(0))
        if children is None:
            try:
                return [c.pid for c in psutil.Process(pid).children(recursive=True)]
            except psutil.Error:
                return []
        for child in children:
            if child not in found:
                found.append(child)
                queue.append(child)
    return found


def own_processes(pids: list[int]) -> set[int]:
    """Those of `pids` that are this diagnose run or its children (its recorders, its load
    generators): never a target. `diagnose attach $$` from a shell would otherwise follow the
    shell to its only Python child, the running diagnose, and diagnose itself."""
    own = os.getpid()
    if own not in pids:
        return set()
    return {own, *descendants(own)} & set(pids)


def python_descendants(pid: int) -> list[ProcessNode]:
    """The Python processes under `pid`, never diagnose's own."""
    pids = descendants(pid)
    mine = own_processes(pids)
    found = [node(p) for p in pids if p not in mine]
    return [n for n in found if n is not None and n.python]


def outermost_python(pid: int) -> list[ProcessNode]:
    """The Python processes under a launcher that have no Python ancestor below it: the pids a
    user would attach to instead (a shell's `python app.py`, not that app's own workers)."""
    pythons = python_descendants(pid)
    pids = {n.pid for n in pythons}
    return [n for n in pythons if n.ppid not in pids]
