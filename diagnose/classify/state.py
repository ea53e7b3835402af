"""Per-sample thread state, inferred from one stack.

With native frames the leaf tells what the thread is doing: a Python frame over
`PyThread_acquire_lock_timed` waits on a Python lock, one directly over
`pthread_cond_timedwait` (or `take_gil`) waits for the GIL, one over `clock_nanosleep` sleeps.
Without native frames only the Python frames are left: waits are recognised by the stdlib
functions that block (Condition.wait, Queue.get, ...) and by the source line of a user frame
(`with lock:`), and the result is marked as estimated.

Waiting *for work* is idle, never contention: a pool worker in `_worker` -> `SimpleQueue.get`,
a worker loop on `Queue.get`, an event loop in `select`. The rule: a wait whose acquiring site is
the thread's outermost user frame (its loop) is idle; a wait deeper inside request handling is not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import overload

import numpy as np

from diagnose.samples import source
from diagnose.samples.native_libraries import LIBRARIES as POOL_LIBRARIES
from diagnose.samples.profile import Frame, Profile, frame_is
from diagnose.vocab import ThreadState, WaitKind


# Native leaf functions, as they appear in py-spy --native stacks on glibc/CPython builds.
_PY_LOCK_WAIT = {"PyThread_acquire_lock_timed", "PyThread_acquire_lock_timed_with_retries",
                 "lock_PyThread_acquire_lock", "rlock_acquire",
                 "acquire_timed", "_queue_SimpleQueue_get", "_queue_SimpleQueue_get_impl",
                 "_queue.SimpleQueue.get"}
_GIL_WAIT = {"take_gil", "PyEval_RestoreThread", "PyEval_AcquireThread", "_PyEval_AcquireLock"}
_COND_WAIT = {"pthread_cond_timedwait", "pthread_cond_wait", "pthread_cond_clockwait",
              "__pthread_cond_timedwait", "__pthread_cond_wait", "___pthread_cond_timedwait",
              "___pthread_cond_clockwait", "__pthread_cond_clockwait"}
_MUTEX_WAIT = {"pthread_mutex_lock", "__pthread_mutex_lock", "___pthread_mutex_lock",
               "__lll_lock_wait", "__lll_lock_wait_private", "sem_wait", "sem_timedwait",
               "sem_clockwait", "futex_wait", "__futex_abstimed_wait_common",
               "do_futex_wait", "__new_sem_wait_slow64", "sched_yield"}
# OpenBLAS builds that spin instead of blocking while another caller owns the thread pool
# (0.3.29) show the caller's leaf in the dispatch functions rather than in pthread_mutex_lock.
_NATIVE_DISPATCH_WAIT = {"exec_blas_async", "exec_blas_async_wait"}
_IO_WAIT = {"select", "__select", "poll", "__poll", "ppoll", "epoll_wait", "epoll_pwait",
            "accept", "accept4", "recv", "__libc_recv", "recvfrom", "__libc_recvfrom",
            "recvmsg", "read", "__libc_read", "__read", "write", "__libc_write", "__write",
            "connect", "__libc_connect", "send", "__libc_send", "sendto", "clock_nanosleep",
            "__clock_nanosleep", "nanosleep", "__nanosleep", "pysleep", "time_sleep",
            "sock_recv", "sock_accept", "sock_call_ex", "fsync", "fdatasync", "wait4",
            "waitpid", "__waitpid", "os_waitpid", "os_waitpid_impl", "_io__Buffered_read",
            "_io_FileIO_read", "_io_FileIO_readinto"}
# A file lock's blocking calls (libc): the file-lock wait of vocab.WaitKind.FILE_LOCK.
_FILE_LOCK_WAIT = {"flock", "__flock", "lockf", "lockf64", "fcntl", "fcntl64", "__fcntl64_nocancel",
                   "__libc_fcntl64", "fcntl_lock", "fcntl_flock_impl", "fcntl_lockf_impl"}
# The kernel-blocking primitives a native library sleeps in (its event loop, completion queue,
# condition variable, semaphore): a thread stopped with one of these as its leaf is asleep, not
# running. A mutex (pthread_mutex_lock, __lll_lock_wait) stays `native_mutex`: contention.
_NATIVE_BLOCKING = (_COND_WAIT | _IO_WAIT | {"sem_wait", "sem_timedwait", "sem_clockwait",
                                             "futex_wait", "__futex_abstimed_wait_common",
                                             "do_futex_wait", "__new_sem_wait_slow64"})
_LIBC = re.compile(r"(libc\.so|libc-|libpthread|ld-linux)")
# libpython itself, the python executable, and CPython extension modules (which re-take the GIL
# through the C API).
_PYTHON_BINARY = re.compile(r"(libpython|(^|/)python\d*(\.\d+)?m?$|\.cpython-\d+|\.abi3\.so|/lib-dynload/|"
                            r"Modules/|Python/|Objects/)")
# time.sleep: `time_sleep > select` on CPython <= 3.10, `time_sleep > clock_nanosleep` on 3.11+.
_SLEEP = {"time_sleep", "pysleep", "clock_nanosleep", "__clock_nanosleep", "nanosleep", "__nanosleep"}
# libpython frames that are the interpreter itself, not "native code the thread runs".
# py-spy's raw/collapsed output names the binary without its directory ("python3.11"), speedscope
# with it ("/usr/bin/python3.11"): a static (non --enable-shared) build runs libpython from there.
_RUNTIME_LIBS = re.compile(r"(libpython|(^|/)python\d*(\.\d+)?m?$|libc\.so|libc-|libpthread|ld-linux)")
# Static functions of libpython that py-spy names only when the build keeps its full symbol table
# (pyenv builds do; distro builds such as Debian's /usr/bin/python3.11 are stripped). Without them
# a Lock wait looks exactly like an RLock wait (both a bare PyThread_acquire_lock_timed).
FULL_SYMBOL_MARKERS = frozenset({"lock_PyThread_acquire_lock", "time_sleep", "thread_run", "t_bootstrap"})

# Frames by file suffix and function name (profile.frame_is).
FramePatterns = list[tuple[str, re.Pattern[str]]]

# Stdlib Python functions that block, by file suffix and function name: (kind).
_STDLIB_WAITS = [
    ("queue.py", re.compile(r"^(Queue\.)?(get|put)$"), WaitKind.QUEUE),
    ("threading.py", re.compile(r"^((Bounded)?Semaphore\.)?acquire$"), WaitKind.SEMAPHORE),
    ("threading.py", re.compile(r"^Event\.wait$"), WaitKind.EVENT),
    ("threading.py", re.compile(r"^(Condition\.)?(wait|wait_for)$"), WaitKind.CONDITION),
    ("threading.py", re.compile(r"^(Thread\.join|Thread\._wait_for_tstate_lock|_wait_for_tstate_lock|join)$"),
     WaitKind.JOIN),
    ("threading.py", re.compile(r"^Barrier\.(wait|_wait|_enter)$|^(_wait|_enter)$"), WaitKind.BARRIER),
    ("logging/__init__.py", re.compile(r"^(Handler\.)?(acquire|handle|emit)$|^_acquireLock$"), WaitKind.LOGGING),
    ("concurrent/futures/_base.py", re.compile(r"^(Future\.)?result$|^(as_completed|wait)$"), WaitKind.FUTURE),
]
_STDLIB_IO: FramePatterns = [
    ("selectors.py", re.compile(r"select$")),
    ("socket.py", re.compile(r"(accept|recv|readinto|sendall)")),
    ("ssl.py", re.compile(r"(read|recv|write|do_handshake)")),
    ("socketserver.py", re.compile(r"serve_forever")),
    ("subprocess.py", re.compile(r"(wait|communicate|_try_wait)")),
]
# Frames that are thread/pool plumbing, skipped when finding a thread's outermost user frame.
_PLUMBING: FramePatterns = [
    ("threading.py", re.compile(r"(_bootstrap|_bootstrap_inner|run)$")),
]
LOCK_LINE = re.compile(r"\bwith\b.*(lock|mutex|_lk|sem)\w*\b.*:|\.acquire\(|\.get\(\)|\.wait\(", re.I)
_SLEEP_LINE = re.compile(r"\bsleep\(")
# Pool workers whose wait is always a wait for work.
_IDLE_SITES: FramePatterns = [
    ("concurrent/futures/thread.py", re.compile(r"_worker$")),
    ("asyncio/base_events.py", re.compile(r"(_run_once|run_forever)$")),
    # A compiled loop (uvloop) shows no loop frames: its thread's innermost Python frame is the
    # runner, and a wait there is the loop waiting in its selector.
    ("asyncio/runners.py", re.compile(r"(^|\.)run$")),
    ("uvloop/__init__.py", re.compile(r"(^|\.)run$")),
    ("socketserver.py", re.compile(r"serve_forever$")),
    ("multiprocessing/pool.py", re.compile(r"worker$")),
]
_SUPERVISOR_SITES: FramePatterns = [
    # Supervisors wait for signals and for their workers, never for a resource a request
    # needs: a gunicorn arbiter between signals, uvicorn's multiprocess supervisor, a process
    # pool's management threads, a parent joining its children.
    ("gunicorn/arbiter.py", re.compile(r"(sleep|wait_for_signals|run|manage_workers|reap_workers|"
                                        r"maybe_promote_master|murder_workers)$")),
    ("uvicorn/supervisors/", re.compile(r".")),
    ("concurrent/futures/process.py", re.compile(r"(wait_result_broken_or_wakeup|_process_worker|"
                                                  r"ExecutorManagerThread\.run)$")),
    ("multiprocessing/pool.py", re.compile(r"(_handle_workers|_handle_tasks|_handle_results|"
                                           r"_wait_for_updates)$")),
    ("multiprocessing/popen_fork.py", re.compile(r"(wait|poll)$")),
    ("multiprocessing/process.py", re.compile(r"join$")),
    # Worker processes of servers between requests: waiting for a connection or an event.
    ("gunicorn/workers/", re.compile(r"(wait|accept|run_for_one|run_for_multiple|"
                                     r"wait_for_and_dispatch_events|ThreadWorker\.run|"
                                     r"murder_keepalived)$")),
]
_IDLE_SITES += _SUPERVISOR_SITES


# A listening socket's accept: the thread waits for a connection (torch's and multiprocessing's
# resource-sharing thread, a server's acceptor). Its native tail may be unsymbolized or look like
# running native code; it is a wait for work all the same.
_ACCEPT_WAITS: FramePatterns = [("socket.py", re.compile(r"(^|\.)accept$")),
                 ("multiprocessing/connection.py", re.compile(r"Listener\.accept$"))]


# The frame tests below run for every distinct stack over the same few hundred distinct
# frames: each (table, file, function) is tested once. Bounded: cleared when it grows past
# _MEMO_LIMIT entries (a long-running watch sees new frames all the time).
_MEMO_LIMIT = 1 << 20
_frame_memo: dict[tuple[int, str, str], bool] = {}
_runtime_memo: dict[str, bool] = {}


def _frame_in(frame: Frame, table: FramePatterns) -> bool:
    """`frame_is(frame, suffix, pattern)` for some (suffix, pattern) of `table`."""
    key = (id(table), frame.file, frame.function)
    known = _frame_memo.get(key)
    if known is None:
        if len(_frame_memo) > _MEMO_LIMIT:
            _frame_memo.clear()
        known = _frame_memo[key] = any(frame_is(frame, entry[0], entry[1]) for entry in table)
    return known


def _runtime_file(file: str) -> bool:
    """The file is the runtime's own (libc, libpython, the interpreter binary)."""
    known = _runtime_memo.get(file)
    if known is None:
        if len(_runtime_memo) > _MEMO_LIMIT:
            _runtime_memo.clear()
        known = _runtime_memo[file] = bool(_RUNTIME_LIBS.search(file))
    return known


def _waits_for_connection(frame: Frame) -> bool:
    return _frame_in(frame, _ACCEPT_WAITS)


@dataclass(frozen=True)
class StackState:
    state: ThreadState
    wait_kind: WaitKind
    site: int  # index into the stack of the acquiring / blocked Python frame, -1 when none
    estimated: bool = False  # inferred without native frames


# CPython <= 3.10 has no co_qualname: py-spy shows `wait`, `acquire`, `get` where 3.11+ shows
# `Condition.wait`, `Semaphore.acquire`, `Queue.get`. A bare threading.py `wait` directly over
# another threading.py `wait` is Event.wait (Event.wait -> Condition.wait); one over `_wait` or
# `_enter` is Barrier.wait.
def _stdlib_name(frames: Sequence[Frame], i: int) -> str:
    f = frames[i]
    if "." in f.function or f.function != "wait" or not f.file.endswith("threading.py"):
        return f.function
    callee = next((g for g in frames[i + 1:] if not g.native), None)
    if callee is not None and callee.file.endswith("threading.py"):
        if callee.function == "wait":
            return "Event.wait"
        if callee.function in ("_wait", "_enter"):
            return "Barrier.wait"
    return f.function


def _outermost_user_frame(frames: Sequence[Frame]) -> int:
    for i, f in enumerate(frames):
        if f.native:
            continue
        if _frame_in(f, _PLUMBING):
            continue
        return i
    return -1


def _stdlib_wait(frames: Sequence[Frame], top: int) -> tuple[WaitKind, int] | None:
    """If the Python frames at the top are stdlib blocking calls, (kind, index of caller site)."""
    kind, i = None, top
    while i >= 0:
        f = frames[i]
        if f.native:
            i -= 1
            continue
        name = _stdlib_name(frames, i)
        matched = next((k for suffix, pat, k in _STDLIB_WAITS
                        if f.file.endswith(suffix) and pat.search(name)), None)
        if matched is None:
            # Internal helpers of the same modules (Condition.wait inside Queue.get) keep climbing.
            if kind is not None and f.file.endswith(("threading.py", "queue.py", "logging/__init__.py",
                                                     "concurrent/futures/_base.py")):
                i -= 1
                continue
            break
        kind = matched  # the outermost stdlib wrapper names the kind (Queue.get over Condition.wait)
        i -= 1
    if kind is None:
        return None
    while i >= 0 and frames[i].native:
        i -= 1
    return kind, i


def gil_waits_leaving_a_wait(profile: Profile, stacks: np.ndarray, on_gil: np.ndarray,
                             kinds: tuple[WaitKind, ...] | None = None) -> np.ndarray:
    """Of sample rows (their stack ids `stacks`, `on_gil` where their state is the GIL wait),
    those whose Python frames sit in a stdlib blocking call (Queue.get, Condition.wait,
    Event.wait, Thread.join...; of `kinds` where given), whatever the native tail shows: a wait
    that returns re-takes the GIL inside the same call, so the thread waits its way out of the
    wait there, running none of its own code. A boolean mask over the rows."""
    leaving = np.zeros(len(stacks), dtype=bool)
    if not on_gil.any():
        return leaving
    in_wait = []
    for sid in np.unique(stacks[on_gil]):
        frames = [profile.frames[f] for f in profile.stacks[int(sid)]]
        found = _stdlib_wait(frames, len(frames) - 1) if frames else None
        if found is not None and (kinds is None or found[0] in kinds):
            in_wait.append(int(sid))
    leaving[on_gil] = np.isin(stacks[on_gil], in_wait)
    return leaving


def _stdlib_io(frames: Sequence[Frame], top: int) -> int | None:
    f = frames[top]
    if _frame_in(f, _STDLIB_IO):
        i = top
        while i > 0 and _frame_in(frames[i - 1], _STDLIB_IO):
            i -= 1
        return i
    return None


def _is_idle_site(frames: Sequence[Frame], site: int) -> bool:
    """Is a wait at `site` a wait for work? The site is a known wait-for-work function, or its
    caller is a supervisor's loop (that waits through a helper), or the site is the thread's own
    outermost loop. Only these frames count: a gunicorn worker's stack starts in the arbiter's
    frames (it was forked there), and its request waits are real waits."""
    if site < 0:
        return False
    if _frame_in(frames[site], _IDLE_SITES):
        return True
    caller = next((i for i in range(site - 1, -1, -1) if not frames[i].native), -1)
    if caller >= 0 and _frame_in(frames[caller], _SUPERVISOR_SITES):
        return True
    return site == _outermost_user_frame(frames)


def _line_text(frame: Frame) -> str:
    return source.stripped_line(frame.file, frame.line)


def _cond_wait_is_gil(tail: Sequence[Frame]) -> bool:
    """A condvar wait called from libpython or a CPython extension module is the GIL being
    re-taken (take_gil is often inlined away); one called from a C library's own code
    (OpenBLAS, OpenMP, torch) is that library's own wait."""
    caller = None
    for frame in tail:
        if frame.function in _COND_WAIT:
            break
        if _LIBC.search(frame.file) or (frame.function.startswith("0x") and not frame.file):
            continue
        caller = frame
    if caller is None:
        return True
    if caller.function.startswith("0x") and not _RUNTIME_LIBS.search(caller.file):
        # Re-taking the GIL goes through libpython's exported functions (PyEval_RestoreThread,
        # PyGILState_Ensure), named even in stripped builds: a condvar wait reached from an
        # extension's own unnamed code (the gRPC C-core's completion queue) is that library's.
        return False
    return bool(_PYTHON_BINARY.search(caller.file))


def _unnamed_runtime(frame: Frame) -> bool:
    """An unsymbolized frame that is the runtime's own (libc, libpython) or of no known file;
    an unnamed frame of another shared library is that library's code."""
    return frame.function.startswith("0x") and (not frame.file or bool(_RUNTIME_LIBS.search(frame.file)))


def library_wait(tail: Sequence[Frame]) -> bool:
    """A native library's own wait: the leaf (past unnamed libc frames) is a kernel-blocking
    primitive (condition variable, futex, semaphore, epoll / poll, read, sleep) reached through
    a shared library other than the runtime's: the gRPC C-core's completion queues, libuv,
    asio, any library's condition variable. The intra-op compute pools (OpenBLAS, OpenMP, MKL,
    torch, ONNX Runtime) are left out: their waits are pool synchronisation, split from their
    kernels in model/native_pools.py."""
    named = [f for f in tail if not _unnamed_runtime(f)]
    if not named or named[-1].function not in _NATIVE_BLOCKING:
        return False
    libraries = [f for f in tail if f.file and not _RUNTIME_LIBS.search(f.file)]
    if not libraries:
        return False
    return not any(pattern.search(f.file) for f in libraries for _, pattern, _ in POOL_LIBRARIES)


def _io_leaf(tail: Sequence[Frame]) -> bool:
    """The thread sits in an IO / sleep call, reached through any C code: the first IO function
    of the native tail is followed by runtime frames only (libc, libpython). Builds with debug
    info name CPython's own modules by their C source (`selectmodule.c`), not by a library, so
    the path to the call cannot be required to be libpython alone."""
    first = next((i for i, f in enumerate(tail) if f.function in _IO_WAIT), None)
    if first is None:
        return False
    return all(_RUNTIME_LIBS.search(f.file) or f.function.startswith("0x") for f in tail[first + 1:])


def _wait_state(frames: Sequence[Frame], site: int, kind: WaitKind) -> ThreadState:
    """A stdlib wait at `site`: idle when it waits for work (never a logging handler's lock),
    else a lock wait."""
    return ThreadState.IDLE if _is_idle_site(frames, site) and kind != WaitKind.LOGGING else ThreadState.LOCK


def _io_state(frames: Sequence[Frame], site: int) -> ThreadState:
    """An IO wait at `site`: idle when it waits for work, else IO."""
    return ThreadState.IDLE if _is_idle_site(frames, site) else ThreadState.IO


def classify_stack(frames: Sequence[Frame], native_profile: bool = True,
                   full_symbols: bool = False) -> StackState:
    """`native_profile`: the recording had native frames, so a Python leaf means running Python.
    `full_symbols`: the profile shows libpython's static functions (any FULL_SYMBOL_MARKERS frame),
    so a lock wait without lock_PyThread_acquire_lock is an RLock wait."""
    if not frames:
        return StackState(ThreadState.UNKNOWN, WaitKind.NONE, -1)
    top = len(frames) - 1  # the innermost Python frame
    while top >= 0 and frames[top].native:
        top -= 1
    tail = frames[top + 1:]
    names = {f.function for f in tail}
    libs_only_runtime = all(_runtime_file(f.file) or _unnamed_runtime(f) for f in tail)

    if top < 0:  # a thread with no Python frames: a native pool thread (OpenMP, BLAS, ...)
        leaf = frames[-1].function
        waiting = names & (_COND_WAIT | _MUTEX_WAIT | _IO_WAIT) or leaf.startswith("0x")
        return StackState(ThreadState.IDLE if waiting else ThreadState.NATIVE, WaitKind.NONE, -1)

    if tail:
        # Re-taking the GIL is a condition-variable wait inside libpython. A Python lock
        # acquire only counts as a lock wait while it is inside PyThread_acquire_lock_timed;
        # the same acquire followed by a condvar wait means "got the lock, now wants the GIL".
        if names & _GIL_WAIT or (names & _COND_WAIT and "PyThread_acquire_lock_timed" not in names
                                 and _cond_wait_is_gil(tail)):
            return StackState(ThreadState.GIL, WaitKind.GIL, top)
        if _waits_for_connection(frames[top]):
            return StackState(ThreadState.IDLE, WaitKind.IO, top)
        if names & _PY_LOCK_WAIT:
            found = _stdlib_wait(frames, top)
            if found:
                kind, site = found
                state = _wait_state(frames, site, kind)
                return StackState(state, kind, site)
            # SimpleQueue.get is C code: named `_queue_SimpleQueue_get` with symbols, an
            # unnamed frame in `_queue.cpython-3XX-....so` without (stripped distro builds).
            simple_queue = "_queue_SimpleQueue_get" in names or any(
                re.search(r"(^|/)_queue\.cpython", f.file) for f in tail)
            pool_worker = _frame_in(frames[top], _IDLE_SITES)
            if _is_idle_site(frames, top) and (simple_queue or pool_worker):
                return StackState(ThreadState.IDLE, WaitKind.QUEUE, top)
            # RLock.acquire shows no rlock_acquire frame on 3.6-3.13: the Python frame sits
            # directly over PyThread_acquire_lock_timed(_with_retries); Lock.acquire goes
            # through lock_PyThread_acquire_lock.
            first = tail[0].function
            kind = WaitKind.RLOCK if "rlock_acquire" in names or (full_symbols and first in (
                "PyThread_acquire_lock_timed", "PyThread_acquire_lock_timed_with_retries")) else WaitKind.LOCK
            return StackState(ThreadState.LOCK, kind, top)
        if names & _FILE_LOCK_WAIT and libs_only_runtime:
            # flock / fcntl(F_SETLKW) / lockf: a lock on a file, held by this process or another
            return StackState(ThreadState.LOCK, WaitKind.FILE_LOCK, top)
        if names & _IO_WAIT and (libs_only_runtime or _io_leaf(tail)):
            io_site = _stdlib_io(frames, top)
            site = top if io_site is None else max(io_site - 1, 0)
            idle = _is_idle_site(frames, site) and not names & _SLEEP
            return StackState(ThreadState.IDLE if idle else ThreadState.IO, WaitKind.IO, site)
        if library_wait(tail):
            # Waiting inside a library for an event: outside the process's compute, like IO.
            return StackState(_io_state(frames, top), WaitKind.IO, top)
        if (names & _MUTEX_WAIT or tail[-1].function in _NATIVE_DISPATCH_WAIT) and not libs_only_runtime:
            return StackState(ThreadState.NATIVE, WaitKind.NATIVE_MUTEX, top)
        if not libs_only_runtime:
            return StackState(ThreadState.NATIVE, WaitKind.NONE, top)
        if all(f.function.startswith("0x") for f in tail):
            # Only unsymbolized libc frames (futex / sem_clockwait): CPython 3.13's PyMutex and
            # PyEvent waits (Thread.join, ...) look like this; so does a GIL hand-off in
            # drop_gil. Trust the Python frames when they are a stdlib blocking call.
            found = _stdlib_wait(frames, top)
            if found:
                kind, site = found
                state = _wait_state(frames, site, kind)
                return StackState(state, kind, site)
        return StackState(ThreadState.PYTHON, WaitKind.NONE, top)

    if _waits_for_connection(frames[top]):
        return StackState(ThreadState.IDLE, WaitKind.IO, top, estimated=not native_profile)
    if native_profile:
        return StackState(ThreadState.PYTHON, WaitKind.NONE, top)

    # Python frames only: py-spy recorded without --native.
    found = _stdlib_wait(frames, top)
    if found:
        kind, site = found
        state = _wait_state(frames, site, kind)
        return StackState(state, kind, site, estimated=True)
    io_site = _stdlib_io(frames, top)
    if io_site is not None:
        site = max(io_site - 1, 0)
        return StackState(_io_state(frames, site), WaitKind.IO, site, estimated=True)
    if frame_is(frames[top], "concurrent/futures/thread.py", re.compile(r"_worker$")):
        # its only blocking call, SimpleQueue.get (3.7+), is C code: invisible without --native
        return StackState(ThreadState.IDLE, WaitKind.QUEUE, top, estimated=True)
    if _SLEEP_LINE.search(_line_text(frames[top])):
        return StackState(ThreadState.IO, WaitKind.IO, top, estimated=True)
    if LOCK_LINE.search(_line_text(frames[top])):
        return StackState(ThreadState.LOCK, WaitKind.LOCK, top, estimated=True)
    return StackState(ThreadState.PYTHON, WaitKind.NONE, top, estimated=True)


class _ReadFrames(Sequence[Frame]):
    """A stack handed to `classify_stack` that remembers the lowest index (nearest the root) it
    was read at: the classification is a function of the frames it read, so a stack sharing
    those innermost frames gets the same state without being classified again."""

    __slots__ = ("_frames", "lowest")

    def __init__(self, frames: list[Frame]):
        self._frames = frames
        self.lowest = len(frames)

    def __len__(self) -> int:
        return len(self._frames)

    @overload
    def __getitem__(self, index: int) -> Frame: ...

    @overload
    def __getitem__(self, index: slice) -> list[Frame]: ...

    def __getitem__(self, index: int | slice) -> Frame | list[Frame]:
        n = len(self._frames)
        if isinstance(index, slice):
            start, stop, _ = index.indices(n)
            if start < stop:
                self.lowest = min(self.lowest, start)
        else:
            self.lowest = min(self.lowest, index % n if n else 0)
        return self._frames[index]

    def __iter__(self) -> Iterator[Frame]:
        self.lowest = 0  # a walk from the root reads the whole stack
        return iter(self._frames)


# Innermost parts at most this long are shared between stacks (a lookup tries each length seen);
# a classification that read deeper is kept for its own stack only.
SHARED_SUFFIX_MAX = 8
# (state, wait kind, site counted from the stack's end or None, estimated)
_Relative = tuple[ThreadState, WaitKind, int | None, bool]


@dataclass(frozen=True)
class StackStates:
    """`classify_stack` of every stack of a profile, as arrays by stack id."""

    state: np.ndarray  # object: the ThreadState
    wait_kind: np.ndarray  # object: the WaitKind
    site: np.ndarray  # int64: index into the stack of the site frame, -1 when none
    estimated: np.ndarray  # bool

    def of(self, sid: int) -> StackState:
        return StackState(self.state[sid], self.wait_kind[sid], int(self.site[sid]),
                          bool(self.estimated[sid]))


@dataclass
class _Classifications:
    """One profile's stack states (for one way of reading its stacks): by stack id, and by the
    innermost frames that decided them."""

    profile: Profile
    full_symbols: bool
    by_stack: dict[int, StackState] = field(default_factory=dict)
    by_innermost: dict[tuple[int, ...], _Relative] = field(default_factory=dict)
    lengths: list[int] = field(default_factory=list)  # the lengths of `by_innermost`'s keys, ascending
    table: StackStates | None = None  # every stack's, once asked for all at once

    def of(self, sid: int) -> StackState:
        if self.table is not None and sid < len(self.table.site):
            return self.table.of(sid)
        return self._decide(sid)[0]

    def _decide(self, sid: int) -> tuple[StackState, int]:
        """The stack's state, and the length of the innermost part that decided it when other
        stacks ending in the same frames share it (0 when not known to be shared)."""
        result = self.by_stack.get(sid)
        if result is not None:
            return result, 0
        profile = self.profile
        stack = profile.stacks[sid]
        n = len(stack)
        for length in self.lengths:
            if length >= n:
                break
            shared = self.by_innermost.get(stack[n - length:])
            if shared is not None:
                state, kind, from_end, estimated = shared
                result = self.by_stack[sid] = StackState(
                    state, kind, -1 if from_end is None else n + from_end, estimated)
                return result, length
        frames = _ReadFrames([profile.frames[i] for i in stack])
        result = self.by_stack[sid] = classify_stack(frames, profile.native, self.full_symbols)
        length = n - frames.lowest
        if 0 < frames.lowest and length <= SHARED_SUFFIX_MAX:
            self.by_innermost[stack[frames.lowest:]] = (
                result.state, result.wait_kind, None if result.site < 0 else result.site - n,
                result.estimated)
            if length not in self.lengths:
                self.lengths.append(length)
                self.lengths.sort()
            return result, length
        return result, 0

    def every_stack(self) -> StackStates:
        """Every stack's state: one stack of each group sharing the innermost frames that
        decided its state is classified (or looked up), and the others of the group find its
        result by their group's code, with their own site."""
        count = len(self.profile.stacks)
        if self.table is not None and len(self.table.site) == count:
            return self.table
        lengths = np.diff(self.profile.stack_frames()[1])
        suffixes = _SuffixCodes(self.profile)
        results: list[_Relative] = []
        chosen = [0] * count  # per stack: its index into `results`
        # per length of a deciding innermost part, ascending (the shortest part is tried
        # first): that length, its group code -> index into `results`, and the stacks' codes
        shared: list[tuple[int, dict[int, int], list[int]]] = []
        for sid, n in enumerate(lengths.tolist()):
            hit = None
            for length, known, codes in shared:
                if length >= n:
                    break
                hit = known.get(codes[sid])
                if hit is not None:
                    chosen[sid] = hit
                    break
            if hit is None:
                result, length = self._decide(sid)
                chosen[sid] = len(results)
                results.append((result.state, result.wait_kind,
                                None if result.site < 0 else result.site - n, result.estimated))
                if length:
                    level = next((level for level in shared if level[0] == length), None)
                    if level is None:
                        level = (length, {}, suffixes.codes(length))
                        shared.append(level)
                        shared.sort(key=lambda level: level[0])
                    level[1][level[2][sid]] = chosen[sid]
        index = np.array(chosen, dtype=np.int64)
        state = np.array([r[0] for r in results] + [None], dtype=object)[index]
        wait_kind = np.array([r[1] for r in results] + [None], dtype=object)[index]
        from_end = np.array([0 if r[2] is None else r[2] for r in results] + [0], dtype=np.int64)
        sited = np.array([r[2] is not None for r in results] + [False], dtype=bool)[index]
        site = np.where(sited, lengths + from_end[index], -1).astype(np.int64)
        estimated = np.array([r[3] for r in results] + [False], dtype=bool)[index]
        self.table = StackStates(state, wait_kind, site, estimated)
        return self.table


class _SuffixCodes:
    """The profile's stacks grouped by their innermost `length` frames, for each length up to
    SHARED_SUFFIX_MAX (computed when first asked): a code per stack, equal for two stacks that
    end in the same `length` frames, by pandas' hash table over the stacks' frames laid end
    to end, one pass per length."""

    def __init__(self, profile: Profile):
        self._flat, offsets = profile.stack_frames()
        self._ends = offsets[1:]
        self._lengths = np.diff(offsets)
        self._codes: list[np.ndarray] = []  # per length - 1: the code per stack, -1 if shorter
        self._lists: dict[int, list[int]] = {}

    def codes(self, length: int) -> list[int]:
        listed = self._lists.get(length)
        if listed is not None:
            return listed
        import pandas as pd

        while len(self._codes) < length:
            depth = len(self._codes) + 1
            long_enough = self._lengths >= depth
            frame = np.where(long_enough, self._flat[np.maximum(self._ends - depth, 0)], -1)
            outer = self._codes[-1] if self._codes else np.zeros(len(frame), dtype=np.int64)
            key = (outer + 1) * (int(frame.max(initial=0)) + 2) + frame + 1
            codes = pd.factorize(key)[0].astype(np.int64)
            codes[~long_enough] = -1
            self._codes.append(codes)
        known: list[int] = self._codes[length - 1].tolist()
        self._lists[length] = known
        return known


def stack_states(profile: Profile, full_symbols: bool) -> Callable[[int], StackState]:
    """stack id -> `classify_stack` of that stack, computed once per stack for the profile's
    lifetime (the loader's visibility test and the analysis both ask), and once per innermost
    part that decided it: a profile of 300,000 distinct stacks has far fewer distinct leaves.
    Fetch it once and call it per stack."""
    return _classifications(profile, full_symbols).of


def every_stack_state(profile: Profile, full_symbols: bool) -> StackStates:
    """`stack_states` of every stack of the profile at once, as arrays (the same results)."""
    return _classifications(profile, full_symbols).every_stack()


def _classifications(profile: Profile, full_symbols: bool) -> _Classifications:
    """The profile's stack states for one way of reading its stacks, kept for its lifetime."""
    kept = profile.memo("stack classifications")
    known: _Classifications | None = kept.get((profile.native, full_symbols))
    if known is None:
        known = kept[(profile.native, full_symbols)] = _Classifications(profile, full_symbols)
    return known


def classify_profile_stack(profile: Profile, sid: int, full_symbols: bool) -> StackState:
    """`stack_states` for one stack."""
    return stack_states(profile, full_symbols)(sid)
