"""/proc's small text files, read the cheap way: the /proc sampler (collect/procfs.py) reads every
thread's stat each tick, and the neighbour scan (collect/neighbours.py, which procfs imports)
every process's stat twice a window."""

from __future__ import annotations

import os

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def read_proc_text(path: str) -> str | None:
    """A /proc file's text, or None when the thread or process is gone (or not ours to read).
    Plain os.open/os.read, not open(): the /proc sampler reads every thread's stat each tick,
    and a buffered file object costs twice the time of the read itself."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    except (ProcessLookupError, PermissionError):
        return None
    finally:
        os.close(fd)
