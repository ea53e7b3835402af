"""classify/state.py on per-version stack goldens: small synthetic stacks in the exact shapes
py-spy records on CPython 3.6 to 3.13.

Where the shapes were observed (py-spy 0.4.3, Linux x86_64, glibc 2.36):

* pyenv builds (`--enable-shared`, full symbol table, debug info) of CPython 3.6.15, 3.7.16,
  3.8.18, 3.9.18, 3.10.13, 3.11.7, 3.12.1 and 3.13.0: the probes of fixtures/pyversions/
  (`python fixtures/pyversions/survey.py`: `record --native --idle --threads` and the same
  without `--native`), thread roles named after the probes (waiter, rwaiter, holder, spinner,
  ThreadPoolExecutor, consumer, request, logger, event, semaphore, condition, barrier, join);
* Debian's stripped, statically linked /usr/bin/python3.11 (3.11.2), the same probes, recorded
  as speedscope (full paths, as `diagnose attach` records);
* a selectors loop thread and a `select.select` loop thread (an ad-hoc script: no probe in
  fixtures/pyversions/ does this) on the pyenv 3.6, 3.9 and 3.13 builds, whose debug info
  names CPython's own C code by its source file (`Modules/selectmodule.c`);
* fixtures/recorded/*.native.speedscope.json (pyenv 3.11.7): the workloads' own shapes.

What differs between versions, and what each golden pins down:

* <= 3.10 has no co_qualname: `wait`, `get`, `acquire`, `_bootstrap`, where 3.11+ shows
  `Condition.wait`, `Queue.get`, `Semaphore.acquire`, `Thread._bootstrap`;
* time.sleep is `time_sleep > select` up to 3.10 and `time_sleep > clock_nanosleep` from 3.11;
* 3.10+ start threads in libpython's `thread_run`, older versions straight from libc;
* 3.13 acquires through `PyThread_acquire_lock_timed_with_retries`, waits in SimpleQueue.get
  and Thread.join on its own PyMutex/PyEvent (unnamed libc frames, no PyThread frame), and
  Handler.handle takes the logging lock itself (no Handler.acquire frame);
* 3.6 has no SimpleQueue: a ThreadPoolExecutor worker waits in queue.Queue.get;
* a Lock wait goes through `lock_PyThread_acquire_lock`, an RLock wait does not (no
  `rlock_acquire` frame on any version); a stripped build shows neither that frame nor
  `time_sleep`, so its Lock and RLock waits look alike.
"""

from __future__ import annotations

import pytest

from diagnose.classify.state import FULL_SYMBOL_MARKERS, classify_stack
from diagnose.readers.loaders import load_collapsed
from diagnose.samples.profile import Frame

VERSIONS = ["3.6", "3.7", "3.8", "3.9", "3.10", "3.11", "3.12", "3.13"]
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
PROBES = "/srv/probes"


def at_least(version: str, minimum: tuple) -> bool:
    return tuple(int(p) for p in version.split(".")) >= minimum


def libpython(version: str) -> str:
    abi = "m" if not at_least(version, (3, 8)) else ""  # 3.6 and 3.7: libpython3.6m.so
    return f"/opt/python-{version}/lib/libpython{version}{abi}.so.1.0"


def stdlib(version: str, module: str) -> str:
    return f"/opt/python-{version}/lib/python{version}/{module}"


def c_source(version: str, path: str) -> str:
    """A CPython C source file as a debug-info build names it (its build directory)."""
    return f"/build/Python-{version}/{path}"


def py(function, file, line=1):
    return Frame(function, file, line, False)


def native(function, file, line=0):
    return Frame(function, file, line, True)


def addr(n=0):
    return native(f"0x7f00000{n:05x}", LIBC)


def qual(version: str, cls: str, name: str) -> str:
    """The name py-spy shows for a method: qualified from 3.11 (co_qualname), bare before."""
    return f"{cls}.{name}" if at_least(version, (3, 11)) else name


def thread_start(version: str) -> list:
    frames = [addr(1), addr(2)]
    if at_least(version, (3, 10)):
        frames.append(native("thread_run", libpython(version)))
    threading = stdlib(version, "threading.py")
    return frames + [py(qual(version, "Thread", "_bootstrap"), threading, 995),
                     py(qual(version, "Thread", "_bootstrap_inner"), threading, 1038),
                     py(qual(version, "Thread", "run"), threading, 975)]


def lock_tail(version: str, rlock: bool = False) -> list:
    """Blocked in a Lock (through lock_PyThread_acquire_lock) or an RLock (directly)."""
    lib = libpython(version)
    frames = [] if rlock else [native("lock_PyThread_acquire_lock", lib)]
    if at_least(version, (3, 13)):
        frames.append(native("PyThread_acquire_lock_timed_with_retries", lib))
    return frames + [native("PyThread_acquire_lock_timed", lib), addr(3), addr(4)]


def sleep_tail(version: str) -> list:
    leaf = "clock_nanosleep" if at_least(version, (3, 11)) else "select"
    return [native("time_sleep", libpython(version)), native(leaf, LIBC)]


def condition_wait(version: str) -> list:
    return [py(qual(version, "Condition", "wait"), stdlib(version, "threading.py"), 320)] + lock_tail(version)


def queue_get(version: str) -> list:
    return [py(qual(version, "Queue", "get"), stdlib(version, "queue.py"), 171)] + condition_wait(version)


def probe(name: str, line: int):
    return py(name, f"{PROBES}/probe.py", line)


# ---------------------------------------------------------------------------------------------
# Goldens per version: (frames, (state, wait_kind, function at the site))


def goldens(version: str) -> dict:
    lib = libpython(version)
    threading = stdlib(version, "threading.py")
    logging = stdlib(version, "logging/__init__.py")
    start = thread_start(version)
    cases = {
        # lock_wait.py, waiter: `with LOCK:` on a threading.Lock
        "lock": (start + [probe("waiter", 36), probe("update_shared_state", 30)] + lock_tail(version),
                 ("lock", "lock", "update_shared_state")),
        # lock_wait.py, rwaiter: `with RLOCK:` on a threading.RLock, no rlock_acquire frame
        "rlock": (start + [probe("waiter", 36), probe("update_shared_state", 30)]
                  + lock_tail(version, rlock=True), ("lock", "rlock", "update_shared_state")),
        # lock_wait.py, holder: time.sleep while holding the lock
        "sleep": (start + [probe("hold", 26)] + sleep_tail(version), ("io", "io", "hold")),
        # every probe's MainThread: time.sleep at module level is IO, never idle
        "main sleep": ([addr(5), probe("<module>", 52), probe("main", 48), probe("ready_then_exit", 48)]
                       + sleep_tail(version), ("io", "io", "ready_then_exit")),
        # gil_spin.py, spinner: a pure-Python loop re-taking the GIL (take_gil inlined away)
        "gil": (start + [probe("spin", 24), probe("checksum", 18), native("pthread_cond_timedwait", LIBC),
                         addr(6)], ("gil", "gil", "checksum")),
        # gil_spin.py, spinner holding the GIL: a Python leaf in a native recording
        "running": (start + [probe("spin", 24), probe("checksum", 18)], ("python", "", "checksum")),
        # idle_pool.py, consumer: its own loop blocked in Queue.get
        "consumer": (start + [probe("consumer_loop", 23)] + queue_get(version),
                     ("idle", "queue", "consumer_loop")),
        # pool_tokens.py, request: Queue.get deep inside request handling is contention
        "pool": (start + [probe("request_loop", 42), probe("handle_request", 36), probe("run_query", 27),
                          probe("checkout", 23)] + queue_get(version), ("lock", "queue", "checkout")),
        # sync_waits.py: each wait one call below the thread's loop
        "condition": (start + [probe("loop", 50), probe("wait_condition", 40)] + condition_wait(version),
                      ("lock", "condition", "wait_condition")),
        "event": (start + [probe("loop", 50), probe("wait_event", 27),
                           py(qual(version, "Event", "wait"), threading, 607)] + condition_wait(version),
                  ("lock", "event", "wait_event")),
        "semaphore": (start + [probe("loop", 50), probe("take_semaphore", 31),
                               py(qual(version, "Semaphore", "acquire"), threading, 467)]
                      + condition_wait(version), ("lock", "semaphore", "take_semaphore")),
        "barrier": (start + [probe("loop", 50), probe("cross_barrier", 35),
                             py(qual(version, "Barrier", "wait"), threading, 668),
                             py(qual(version, "Barrier", "_wait"), threading, 703),
                             py(qual(version, "Condition", "wait_for"), threading, 355)]
                    + condition_wait(version), ("lock", "barrier", "cross_barrier")),
    }
    # ThreadPoolExecutor worker waiting for work
    worker = start + [py("_worker", stdlib(version, "concurrent/futures/thread.py"), 81)]
    if not at_least(version, (3, 7)):  # no SimpleQueue yet: queue.Queue.get
        worker += queue_get(version)
    else:
        worker += [native("_queue_SimpleQueue_get", c_source(version, "Modules/clinic/_queuemodule.c.h"), 175),
                   native("_queue_SimpleQueue_get_impl", c_source(version, "Modules/_queuemodule.c"), 253)]
        if at_least(version, (3, 13)):  # PyMutex: no PyThread frame
            worker += [addr(3), addr(4)]
        else:
            worker += [native("PyThread_acquire_lock_timed", lib), addr(3), addr(4)]
    cases["pool worker"] = (worker, ("idle", "queue", "_worker"))
    # Thread.join on a thread that never ends
    join = start + [probe("loop", 50), probe("join_thread", 54), py(qual(version, "Thread", "join"), threading, 1096)]
    if at_least(version, (3, 13)):  # PyEvent: unnamed libc frames only
        join += [addr(3), addr(4)]
    else:
        join += [py(qual(version, "Thread", "_wait_for_tstate_lock"), threading, 1116)] + lock_tail(version)
    cases["join"] = (join, ("lock", "join", "join_thread"))
    # logging_lock.py, logger: threads queue on one handler's RLock
    logger = start + [probe("logger_loop", 36), probe("handle_request", 30),
                      py(qual(version, "Logger", "info"), logging, 1477),
                      py(qual(version, "Logger", "_log"), logging, 1624),
                      py(qual(version, "Logger", "handle"), logging, 1634),
                      py(qual(version, "Logger", "callHandlers"), logging, 1696),
                      py(qual(version, "Handler", "handle"), logging, 966)]
    if not at_least(version, (3, 13)):  # 3.13 takes the lock in Handler.handle itself
        logger.append(py(qual(version, "Handler", "acquire"), logging, 917))
    cases["logging"] = (logger + lock_tail(version, rlock=True), ("lock", "logging", "handle_request"))
    return cases


CASES = [pytest.param(version, name, id=f"{version}-{name}")
         for version in VERSIONS for name in goldens(version)]


def check(frames, expected, native_profile=True, full_symbols=True, estimated=False):
    state, kind, site_function = expected
    result = classify_stack(frames, native_profile, full_symbols)
    site = frames[result.site].function if result.site >= 0 else None
    assert (result.state, result.wait_kind, site) == (state, kind, site_function), result
    assert result.estimated is estimated


@pytest.mark.parametrize("version, name", CASES)
def test_native_golden(version, name):
    frames, expected = goldens(version)[name]
    check(frames, expected)


def test_every_version_has_every_golden():
    names = {name for _, name in (p.values for p in CASES)}
    assert len(CASES) == len(VERSIONS) * len(names) and len(names) >= 15


def test_goldens_come_from_full_symbol_builds():
    # the pyenv builds keep libpython's static functions: the pipeline passes full_symbols
    for version in VERSIONS:
        functions = {f.function for frames, _ in goldens(version).values() for f in frames}
        assert functions & FULL_SYMBOL_MARKERS, version


@pytest.mark.parametrize("version", ["3.11", "3.13"])
def test_a_logging_lock_taken_from_the_threads_own_loop_is_contention_not_idle(version):
    logging = stdlib(version, "logging/__init__.py")
    frames = thread_start(version) + [probe("logger_loop", 36), py(qual(version, "Logger", "info"), logging, 1477),
                                      py(qual(version, "Handler", "handle"), logging, 966)]
    if not at_least(version, (3, 13)):
        frames.append(py(qual(version, "Handler", "acquire"), logging, 917))
    check(frames + lock_tail(version, rlock=True), ("lock", "logging", "logger_loop"))


def test_an_rlock_is_told_from_a_lock_only_with_the_full_symbol_table():
    for version in VERSIONS:
        frames, _ = goldens(version)["rlock"]
        assert classify_stack(frames, True, full_symbols=False).wait_kind == "lock"
        assert classify_stack(frames, True, full_symbols=True).wait_kind == "rlock"


# ---------------------------------------------------------------------------------------------
# Without --native: Python frames only, every state estimated


def python_goldens(version: str) -> dict:
    threading = stdlib(version, "threading.py")
    start = [f for f in thread_start(version) if not f.native]
    pool_worker = start + [py("_worker", stdlib(version, "concurrent/futures/thread.py"), 81)]
    if not at_least(version, (3, 7)):
        pool_worker += [py("get", stdlib(version, "queue.py"), 164), py("wait", threading, 295)]
    logger = start + [probe("logger_loop", 36), probe("handle_request", 30),
                      py(qual(version, "Logger", "info"), stdlib(version, "logging/__init__.py"), 1477),
                      py(qual(version, "Handler", "handle"), stdlib(version, "logging/__init__.py"), 966)]
    if not at_least(version, (3, 13)):
        logger.append(py(qual(version, "Handler", "acquire"), stdlib(version, "logging/__init__.py"), 917))
    return {
        # 3.7+: SimpleQueue.get is C code, invisible without --native; 3.6: queue.Queue.get
        "pool worker": (pool_worker, ("idle", "queue", "_worker")),
        "consumer": (start + [probe("consumer_loop", 23)] + [
            f for f in queue_get(version) if not f.native], ("idle", "queue", "consumer_loop")),
        # a bare `wait` over a bare `wait` is Event.wait; over `_wait`, Barrier.wait
        "event": (start + [probe("loop", 50), probe("wait_event", 27),
                           py(qual(version, "Event", "wait"), threading, 607),
                           py(qual(version, "Condition", "wait"), threading, 320)],
                  ("lock", "event", "wait_event")),
        "barrier": (start + [probe("loop", 50), probe("cross_barrier", 35),
                             py(qual(version, "Barrier", "wait"), threading, 668),
                             py(qual(version, "Barrier", "_wait"), threading, 703),
                             py(qual(version, "Condition", "wait_for"), threading, 355),
                             py(qual(version, "Condition", "wait"), threading, 320)],
                    ("lock", "barrier", "cross_barrier")),
        "logging": (logger, ("lock", "logging", "handle_request")),
    }


PYTHON_CASES = [pytest.param(version, name, id=f"{version}-{name}")
                for version in VERSIONS for name in python_goldens(version)]


@pytest.mark.parametrize("version, name", PYTHON_CASES)
def test_python_only_golden(version, name):
    frames, expected = python_goldens(version)[name]
    check(frames, expected, native_profile=False, full_symbols=False, estimated=True)


# ---------------------------------------------------------------------------------------------
# Debian's stripped static /usr/bin/python3.11 (speedscope shapes): no lock_PyThread_acquire_lock,
# no time_sleep, no thread_run; C modules as unnamed frames of their extension module.

DEBIAN = "/usr/bin/python3.11"
DEBIAN_LIB = "/usr/lib/python3.11"
DEBIAN_START = [addr(1), addr(2), py("Thread._bootstrap", f"{DEBIAN_LIB}/threading.py", 995),
                py("Thread._bootstrap_inner", f"{DEBIAN_LIB}/threading.py", 1038),
                py("Thread.run", f"{DEBIAN_LIB}/threading.py", 975)]
DEBIAN_LOCK = [native("PyThread_acquire_lock_timed", DEBIAN), addr(3), addr(4)]

STRIPPED = {
    # lock_wait.py waiter and rwaiter: the same stack, so both are kind "lock"
    "lock": (DEBIAN_START + [probe("waiter", 36), probe("update_shared_state", 30)] + DEBIAN_LOCK,
             ("lock", "lock", "update_shared_state")),
    "sleep": (DEBIAN_START + [probe("hold", 26), native("clock_nanosleep", LIBC)], ("io", "io", "hold")),
    "gil": (DEBIAN_START + [probe("spin", 24), probe("checksum", 18), native("pthread_cond_timedwait", LIBC),
                            addr(6)], ("gil", "gil", "checksum")),
    "pool worker": (DEBIAN_START + [py("_worker", f"{DEBIAN_LIB}/concurrent/futures/thread.py", 81),
                                    native("0x7f788548bc2e",
                                           f"{DEBIAN_LIB}/lib-dynload/_queue.cpython-311-x86_64-linux-gnu.so")]
                    + DEBIAN_LOCK, ("idle", "queue", "_worker")),
    "consumer": (DEBIAN_START + [probe("consumer_loop", 23), py("Queue.get", f"{DEBIAN_LIB}/queue.py", 171),
                                 py("Condition.wait", f"{DEBIAN_LIB}/threading.py", 320)] + DEBIAN_LOCK,
                 ("idle", "queue", "consumer_loop")),
    "logging": (DEBIAN_START + [probe("logger_loop", 36), probe("handle_request", 30),
                                py("Logger.info", f"{DEBIAN_LIB}/logging/__init__.py", 1489),
                                py("Handler.handle", f"{DEBIAN_LIB}/logging/__init__.py", 976),
                                py("Handler.acquire", f"{DEBIAN_LIB}/logging/__init__.py", 927)] + DEBIAN_LOCK,
                ("lock", "logging", "handle_request")),
    # a selectors loop: no selectmodule frame at all in a stripped build
    "selector": (DEBIAN_START + [probe("serve_loop", 9), py("EpollSelector.select", f"{DEBIAN_LIB}/selectors.py", 468),
                                 native("epoll_wait", LIBC)], ("idle", "io", "serve_loop")),
    "select": (DEBIAN_START + [probe("raw_select", 15), native("select", LIBC)], ("idle", "io", "raw_select")),
}


@pytest.mark.parametrize("name", list(STRIPPED))
def test_stripped_static_build_golden(name):
    frames, expected = STRIPPED[name]
    assert not {f.function for f in frames} & FULL_SYMBOL_MARKERS
    check(frames, expected, full_symbols=False)


def test_a_loop_on_a_simple_queue_of_a_stripped_build_is_idle():
    # SimpleQueue.get of the stripped build (an unnamed frame of _queue.cpython-311...so, as in
    # its pool workers), called from the thread's own loop rather than concurrent.futures
    frames = DEBIAN_START + [probe("consumer_loop", 23),
                             native("0x7f788548bc2e",
                                    f"{DEBIAN_LIB}/lib-dynload/_queue.cpython-311-x86_64-linux-gnu.so")]
    check(frames + DEBIAN_LOCK, ("idle", "queue", "consumer_loop"), full_symbols=False)


def test_stripped_build_in_the_raw_format_is_still_a_lock_wait():
    text = ("thread (7): waiter-0;0x7f0000001 (libc.so.6);Thread.run (threading.py:975);"
            "waiter (lock_wait.py:36);update_shared_state (lock_wait.py:30);"
            "PyThread_acquire_lock_timed (python3.11);0x7f0000003 (libc.so.6);0x7f0000004 (libc.so.6) 5\n")
    profile = load_collapsed(text)
    frames = [profile.frames[i] for i in profile.stacks[0]]
    assert classify_stack(frames, profile.native).state == "lock"


# ---------------------------------------------------------------------------------------------
# C-source frames: debug-info builds name CPython's modules by file, not by library


@pytest.mark.parametrize("version, tail", [
    ("3.6", [native("pyepoll_poll", c_source("3.6.15", "Modules/selectmodule.c"), 1562)]),
    ("3.9", [native("select_epoll_poll", c_source("3.9.18", "Modules/clinic/selectmodule.c.h"), 871),
             native("select_epoll_poll_impl", c_source("3.9.18", "Modules/selectmodule.c"), 1614)]),
    ("3.13", [native("select_epoll_poll", c_source("3.13.0", "./Modules/clinic/selectmodule.c.h"), 1007),
              native("select_epoll_poll_impl", c_source("3.13.0", "./Modules/selectmodule.c"), 1631)]),
])
def test_a_selector_loop_waiting_through_selectmodule_c_is_idle(version, tail):
    frames = thread_start(version) + [probe("serve_loop", 9),
                                      py(qual(version, "EpollSelector", "select"),
                                         stdlib(version, "selectors.py"), 468)]
    check(frames + tail + [native("epoll_wait", LIBC)], ("idle", "io", "serve_loop"))


@pytest.mark.parametrize("version, function, line", [
    ("3.6", "select_select", 270), ("3.9", "select_select_impl", 347), ("3.13", "select_select_impl", 366)])
def test_a_raw_select_loop_through_selectmodule_c_is_idle(version, function, line):
    frames = thread_start(version) + [probe("raw_select", 15),
                                      native(function, c_source(version, "Modules/selectmodule.c"), line),
                                      native("select", LIBC)]
    check(frames, ("idle", "io", "raw_select"))


def test_a_select_inside_request_handling_is_io_not_idle():
    version = "3.9"
    frames = thread_start(version) + [probe("request_loop", 42), probe("fetch_features", 30),
                                      native("select_select_impl", c_source(version, "Modules/selectmodule.c"), 347),
                                      native("select", LIBC)]
    check(frames, ("io", "io", "fetch_features"))


# ---------------------------------------------------------------------------------------------
# Recorded workloads (fixtures/recorded/*.native.speedscope.json, pyenv 3.11.7)

SITE = "/srv/venv/lib/python3.11/site-packages"
UMATH = f"{SITE}/numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so"
OPENBLAS = f"{SITE}/numpy.libs/libscipy_openblas64_-32a4b2a6.so"
WORKLOAD = "/srv/workloads/service.py"
REQUEST = thread_start("3.11") + [py("main.<locals>.request_loop", WORKLOAD, 90), py("handle_request", WORKLOAD, 80)]


def test_recorded_model_lock_wait_is_a_lock_wait_at_predict():
    frames = REQUEST + [py("Model.predict", WORKLOAD, 51)] + lock_tail("3.11")
    check(frames, ("lock", "lock", "Model.predict"))


def test_recorded_blas_kernel_under_forward_is_native_work():
    frames = REQUEST + [py("Model.predict", WORKLOAD, 51), py("Model.forward", WORKLOAD, 57),
                        native("sgemm_kernel_HASWELL", OPENBLAS)]
    check(frames, ("native", "", "Model.forward"))


def test_recorded_gil_retake_inside_numpy_is_a_gil_wait():
    # preprocess_bound: the condvar wait is called from a CPython extension, so it is the GIL
    frames = REQUEST + [py("normalize", WORKLOAD, 176), native("array_true_divide", UMATH),
                        native("ufunc_generic_fastcall", UMATH), native("execute_ufunc_loop", UMATH),
                        native("pthread_cond_timedwait", LIBC), addr(6)]
    check(frames, ("gil", "gil", "normalize"))


def test_recorded_lock_acquired_then_waiting_for_the_gil_is_a_gil_wait():
    # lock_contention: lock_PyThread_acquire_lock over a condvar, no PyThread_acquire_lock_timed
    frames = REQUEST + [py("Model.predict", WORKLOAD, 51), native("lock_PyThread_acquire_lock", libpython("3.11")),
                        native("pthread_cond_timedwait", LIBC), addr(6)]
    check(frames, ("gil", "gil", "Model.predict"))


# ---------------------------------------------------------------------------------------------
# Torn and partial samples (non-blocking reads, a thread caught between two calls)


def test_a_torn_frame_on_top_is_running_python_not_a_wait():
    # A torn read shows a frame with no path and no line (`__init__` in `__init__`).
    torn = Frame("__init__", "__init__", 0, False)
    frames = [f for f in thread_start("3.13") if not f.native] + [probe("handle_request", 30), torn]
    check(frames, ("python", "", "__init__"), native_profile=False, full_symbols=False, estimated=True)


def test_a_sleep_caught_before_its_libc_call_is_still_io():
    # 3.13 (lock_wait.py MainThread, logging_lock.py sink): `time_sleep` as the leaf, its
    # clock_nanosleep not yet entered
    frames = thread_start("3.13") + [probe("poll_backend", 17), native("time_sleep", libpython("3.13"))]
    check(frames, ("io", "io", "poll_backend"))


def test_a_native_only_thread_is_idle_when_waiting_and_native_when_computing():
    blas_worker = [addr(1), native("blas_thread_server", OPENBLAS), native("sched_yield", LIBC)]
    assert classify_stack(blas_worker).state == "idle"
    assert classify_stack([addr(1), native("sgemm_kernel_HASWELL", OPENBLAS)]).state == "native"
    assert classify_stack([]).state == "unknown"
