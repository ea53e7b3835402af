"""Where a process's threads entered the kernel to work: system calls, by the Python line making them.

The kernel's time for a process (its /proc/PID/stat stime) says how much, not where. Native
frames say where: a sample whose innermost native frames (below the innermost Python frame) are
one of the C library's system-call wrappers (`write`, `read`, `openat64`, `vfork`, ...) caught
the thread inside that call, and the Python frame above it is the line that made it (a file
object's `write`, `os.read`; past the standard library's and installed packages' files, the
service's line that called them: `subprocess.run`'s fork is its caller's, `np.load`'s read too).
Calls that sleep (futex, poll, select, epoll_wait, nanosleep) are waits, not the kernel's work:
they are left to the wait analysis.

Without native frames the calls are not visible: the sites are then none, and a check says the
kernel's time has no line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from diagnose.samples.profile import Frame, Profile
from diagnose.model.line_samples import LineSamples

# The C library's wrappers of system calls that work rather than wait (glibc's exported names
# and the internal aliases its unwinding shows), by the call's name.
_WORK_CALLS = frozenset({
    "read", "write", "pread", "pwrite", "readv", "writev", "preadv", "pwritev", "open", "openat",
    "creat", "close", "lseek", "fstat", "stat", "lstat", "fstatat", "newfstatat", "statx", "access",
    "faccessat", "mmap", "munmap", "mprotect", "mremap", "madvise", "brk", "sbrk", "ioctl", "fcntl",
    "fsync", "fdatasync", "sync_file_range", "ftruncate", "truncate", "getdents", "unlink",
    "unlinkat", "rename", "renameat", "mkdir", "rmdir", "sendto", "send", "recv", "recvfrom",
    "sendmsg", "recvmsg", "socket", "connect", "bind", "getsockopt", "setsockopt", "pipe", "pipe2",
    "dup", "dup2", "dup3", "fork", "vfork", "clone", "clone3", "execve", "posix_spawn",
    "posix_spawnp", "kill", "getrandom", "sendfile", "splice", "copy_file_range", "fadvise",
    "posix_fadvise", "fallocate",
})
# glibc's prefixes and suffixes around a call's name: __GI___libc_write, __libc_pread64,
# __write_nocancel, __open64_nocancel, _Fork, __fstatat64, fcntl64.
_DECORATION = re.compile(r"^(__GI_)?(__libc_|__)?_?|(64)?(_nocancel)?(64)?$")
_LIBC = re.compile(r"(^|/)(libc|libpthread)([.-]|\.so)")
# The standard library's and the installed packages' Python files: a call made inside them
# (subprocess's fork, a socket's sendall, numpy's np.load reading its file) is the service's line
# that called them. Where every frame is theirs (a server's own worker), the innermost one.
_LIBRARY = re.compile(r"/lib/python\d(\.\d+t?)?/|/(site|dist)-packages/")


def in_library(frame: Frame) -> bool:
    """The frame runs the standard library's or an installed package's Python."""
    return bool(_LIBRARY.search(frame.file or ""))


def service_caller(frames: Sequence[Frame]) -> Frame | None:
    """The service's line that called into the libraries (frames outer to inner): the innermost
    Python frame outside the standard library and the installed packages, the entry script's
    body (the outermost Python frame: a server's own `<module>`) excepted; None where there is
    none."""
    python = [f for f in frames if not f.native]
    return next((f for f in reversed(python[1:]) if not in_library(f)), None)


def call_name(frame: Frame) -> str | None:
    """The work system call a native frame of the C library is the wrapper of, or None."""
    if not frame.native or not _LIBC.search(frame.file or ""):
        return None
    name = _DECORATION.sub("", frame.function).lower()
    if name == "fork" or frame.function == "_Fork":
        return "fork"
    return name if name in _WORK_CALLS else None


@dataclass(frozen=True)
class SyscallSamples:
    """The native samples of a process's threads caught inside a work system call: how many of
    how many (`samples`: every native sample of those threads), the calls by name and the lines
    that made them, most first; `top_caller_calls`, the calls made by the function of the first
    line (on any of its lines: a send and the receive of its answer are two lines of one loop)."""

    samples: int
    in_calls: int
    calls: tuple[tuple[str, int], ...]
    sites: tuple[LineSamples, ...]
    top_caller_calls: tuple[tuple[str, int], ...] = ()

    @property
    def share(self) -> float:
        return self.in_calls / self.samples if self.samples else 0.0


def _weights(native: Profile, tids: set[int], pid: int | None) -> np.ndarray:
    counts = np.zeros(len(native.stacks), dtype=np.float64)
    for track in native.threads:
        if track.tid not in tids or (pid is not None and track.pid is not None and track.pid != pid):
            continue
        if len(track.stack_ids):
            counts += np.bincount(track.stack_ids, weights=track.counts, minlength=len(native.stacks))
    return counts


def syscall_samples(native: Profile | None, tids: set[int], pid: int | None,
                    limit: int = 5) -> SyscallSamples | None:
    """The samples of threads `tids` (of process `pid`, where the profile tags them) inside a
    work system call, in `native`, a profile with native frames; None without native samples of
    those threads."""
    if native is None or not native.native:
        return None
    counts = _weights(native, tids, pid)
    total = int(round(counts.sum()))
    if not total:
        return None
    calls: dict[str, float] = {}
    sites: dict[tuple[str, str, int], float] = {}
    by_caller: dict[tuple[str, str], dict[str, float]] = {}
    in_calls = 0.0
    for sid in np.flatnonzero(counts > 0):
        frames = [native.frames[f] for f in native.stacks[int(sid)]]
        python = next((i for i in range(len(frames) - 1, -1, -1) if not frames[i].native), -1)
        name = next((n for f in frames[python + 1:] if (n := call_name(f)) is not None), None)
        if name is None:
            continue
        weight = float(counts[sid])
        in_calls += weight
        calls[name] = calls.get(name, 0.0) + weight
        if python >= 0:
            frame = service_caller(frames[:python + 1]) or frames[python]
            key = (frame.function, frame.file, frame.line)
            sites[key] = sites.get(key, 0.0) + weight
            made = by_caller.setdefault((frame.function, frame.file), {})
            made[name] = made.get(name, 0.0) + weight
    ranked_calls = sorted(calls.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    ranked_sites = sorted(sites.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    top = by_caller.get(ranked_sites[0][0][:2], {}) if ranked_sites else {}
    return SyscallSamples(total, int(round(in_calls)),
                          tuple((n, int(round(c))) for n, c in ranked_calls),
                          tuple(LineSamples(f, file, line, int(round(c))) for (f, file, line), c in ranked_sites),
                          tuple((n, int(round(c))) for n, c in sorted(top.items(), key=lambda kv: (-kv[1], kv[0]))))
