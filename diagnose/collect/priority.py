"""diagnose's own scheduling priority: prompt beside a saturated service, at the same CPU cost.

On a host whose cores the service oversubscribes (64 runnable threads on 2 cores), a process at
the service's priority gets a sliver of a core: importing, reading /proc and analysing took
minutes around a 6 s window. diagnose does the same work at any priority; a higher one makes it
happen now instead of spread over minutes. The py-spy recorders are put back to the priority
diagnose started with, so the sampling disturbs the service exactly as before. Without the
privilege to raise it (not root, no CAP_SYS_NICE) nothing changes.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

# diagnose's own niceness while it attaches (the default of a process is 0): before and after
# the window (imports, probes, the analysis) the highest, so a verdict beside 64 busy threads
# comes in a second, not in five; inside it, for the threads that sample /proc and read asyncio
# tasks beside the service being measured, a step below (see in_window).
OWN_NICE = -20
WINDOW_NICE = -10
_started_with: int | None = None  # the niceness diagnose had before raise_own


def raise_own() -> None:
    """Raises this process's priority to OWN_NICE where permitted (once)."""
    global _started_with
    if _started_with is not None:
        return
    _started_with = os.getpriority(os.PRIO_PROCESS, 0)
    if _started_with > OWN_NICE:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, OWN_NICE)
        except OSError:
            pass


def lift_process(pid: int) -> None:
    """Sets every thread of one of diagnose's children to diagnose's own niceness."""
    _set_process_nice(pid, os.getpriority(os.PRIO_PROCESS, 0))


def restore_process(pid: int) -> None:
    """Sets every thread of one of diagnose's children to the niceness diagnose started with
    (where raise_own raised it): the child then competes for a core as the service's equal."""
    if _started_with is not None:
        _set_process_nice(pid, _started_with)


def _set_process_nice(pid: int, nice: int) -> None:
    """A nice value is per thread on Linux; best effort: a thread that exits meanwhile is
    skipped."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        except OSError:
            pass


def restore_in_child() -> None:
    """In a recorder's child before exec: the niceness diagnose started with; best effort."""
    if _started_with is None:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, 0, _started_with)
    except OSError:
        pass


@contextmanager
def in_window() -> Iterator[None]:
    """The calling thread, and the threads it starts meanwhile (they inherit its niceness), at
    WINDOW_NICE for the block when diagnose raised itself above it; back afterwards."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    if _started_with is None or before >= WINDOW_NICE:
        yield
        return
    os.setpriority(os.PRIO_PROCESS, 0, WINDOW_NICE)  # lowering one's own priority is always allowed
    try:
        yield
    finally:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, before)
        except OSError:
            pass
