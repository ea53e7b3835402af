"""How many processes the machine started: the kernel's fork counter (`processes` in /proc/stat).

A child that lives a few milliseconds is gone before any listing of /proc sees it; the kernel
counts every fork all the same. The counter is the machine's, not the service's, and counts every
clone, new threads too (as the pid counter, /proc/sys/kernel/ns_last_pid, advances for both): its
advance over a window is an upper bound on the children the service started, read at the
window's start and end.
"""

from __future__ import annotations


def parse_processes(text: str) -> int | None:
    """The `processes N` line of /proc/stat's text, or None."""
    for line in text.splitlines():
        if line.startswith("processes "):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def processes_started() -> int | None:
    """Processes started on the machine since boot, or None where /proc/stat cannot be read."""
    try:
        with open("/proc/stat", encoding="ascii", errors="replace") as fh:
            return parse_processes(fh.read())
    except OSError:
        return None
