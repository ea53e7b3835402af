"""Real HTTP servers for integration tests: the apps in fixtures/servers/ under gunicorn / uvicorn,
and a load generator (wrk, or a Python closed-loop client) to drive them.

    from tests.integration.servers import free_port, gunicorn_sync, load, start_server

    port = free_port()
    with start_server(gunicorn_sync("wsgi_preprocess", port, workers=3), port) as server:
        with load(server.url("/predict"), seconds=8) as run:
            ...                                   # attach py-spy to server.worker_pids()
        print(run.result.requests_per_second)     # filled in when the `with load` block exits

* `start_server` starts the command in a new session (its own process group), waits until
  `GET /health` on 127.0.0.1:PORT answers 200 and the expected workers exist with the app
  imported, yields a `Server`, and on exit stops the whole tree: SIGTERM to the group, a grace
  period, then SIGKILL to the group and to every process of the tree it knows about. Nothing it
  started survives a failed test.
* Builders (`gunicorn_sync`, `gunicorn_gthread`, `gunicorn_uvicorn_worker`, `gunicorn_asgi`,
  `uvicorn_app`) return the argv for a fixture module of fixtures/servers/, binding 127.0.0.1 only.
  The server programs are taken from the directory of `sys.executable` (the venv's bin), else
  `python -m gunicorn` / `python -m uvicorn`.
* `load` (diagnose/load/loadgen.py, re-exported here) runs `wrk -t2 -cN -dSs --latency URL` in the
  background (only against 127.0.0.1 / localhost), bounded in time; without wrk on PATH it runs a
  closed-loop client of N threads with keep-alive `http.client` connections instead. Same
  interface, same `LoadResult`.

If the test runner itself is killed (SIGTERM/SIGKILL: no `finally` runs), the started process
gets SIGTERM from the kernel (PR_SET_PDEATHSIG) and stops its workers. That signal is tied to
the *thread* that called `start_server`: start servers from the main thread, or from a thread
that outlives them.

The server's stdout/stderr go to a temporary log file (`Server.output()`), deleted on exit.
Inherited WEB_CONCURRENCY, GUNICORN_CMD_ARGS and DIAGNOSE_FIXTURE_OFFLOAD are removed from the
server's environment unless passed explicitly in `env` (a value of None removes a variable).

Standard library + psutil.
"""

from __future__ import annotations

import functools
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Union

import psutil

from diagnose.load.loadgen import (LOOPBACK, LoadError, LoadResult, LoadRun,  # noqa: F401 (re-exported)
                              die_with_parent, killpg as _killpg, load, loopback_url,
                              measure_throughput, parse_wrk)

REPO = Path(__file__).resolve().parent.parent.parent
SERVERS = REPO / "fixtures" / "servers"
BIN_DIR = Path(sys.executable).parent  # not resolved: a venv's python is a symlink



class _BlockDone(Exception):
    """Raised inside `load` on leaving a `load_during` block: `load` stops its run at once."""


@contextmanager
def load_during(url: str, seconds: float, **kwargs) -> Iterator[LoadRun]:
    """`load(url, seconds, ...)` for a load that only has to cover what the block does (a
    sampling window): stopped when the block ends instead of awaited to its full `seconds` as
    `load` does, and no LoadResult is kept. `seconds` stays the upper bound, generous enough to
    cover a slow start of the window on a busy machine."""
    try:
        with load(url, seconds, **kwargs) as run:
            yield run
            raise _BlockDone
    except _BlockDone:
        pass


# Variables that would change what a fixture command does, removed unless passed explicitly.
SCRUBBED_ENV = ("WEB_CONCURRENCY", "GUNICORN_CMD_ARGS", "DIAGNOSE_FIXTURE_OFFLOAD")

# A worker has imported its app when numpy's core extension is mapped (every fixture app imports
# numpy at module level).
NUMPY_LOADED = "_multiarray_umath"

# Python children that are not workers.
_HELPER_PROCESSES = ("resource_tracker", "semaphore_tracker", "forkserver")


class ServerError(RuntimeError):
    """The server exited, or did not become ready in time."""


# -- ports and programs -----------------------------------------------------------------------

def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def server_program(name: str, python: Optional[str] = None) -> List[str]:
    """argv prefix for `gunicorn` / `uvicorn`: `PYTHON -m NAME` for a given interpreter (another
    CPython's venv), else the script next to sys.executable, else `python -m NAME`."""
    if python is not None:
        return [python, "-m", name]
    beside = BIN_DIR / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    return [sys.executable, "-m", name]


def _app_target(app_module: str) -> str:
    return app_module if ":" in app_module else f"{app_module}:app"


# -- command builders -------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _has_option(program: tuple, option: str) -> bool:
    """Does this server program know `option`? (older gunicorns lack the newest flags)"""
    try:
        out = subprocess.run([*program, "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option in out.stdout


def _gunicorn(app_module: str, port: int, workers: int, worker_args: Sequence[str],
              extra: Sequence[str], python: Optional[str] = None) -> List[str]:
    program = server_program("gunicorn", python)
    no_control = (["--no-control-socket"] if _has_option(tuple(program), "--no-control-socket")
                  else [])
    return [*program,
            "-w", str(workers), *worker_args,
            "-b", f"{LOOPBACK}:{port}",
            "--chdir", str(SERVERS),
            # gunicorn 27 opens a control socket at ~/.gunicorn/gunicorn.ctl by default: two
            # servers at once would fight over it, and it adds a thread to the master.
            *no_control,
            # py-spy may stop a worker for seconds (dump --native); don't let the arbiter kill it.
            "--timeout", "120",
            "--graceful-timeout", "5",
            *extra,
            _app_target(app_module)]


def gunicorn_sync(app_module: str, port: int, workers: int = 3,
                  extra: Sequence[str] = (), python: Optional[str] = None) -> List[str]:
    """`gunicorn -w WORKERS -k sync` serving fixtures/servers/APP_MODULE (`:app` unless given);
    `python`: run it with that interpreter (`PYTHON -m gunicorn`)."""
    return _gunicorn(app_module, port, workers, ["-k", "sync"], extra, python)


def gunicorn_gthread(app_module: str, port: int, workers: int = 3, threads: int = 4,
                     extra: Sequence[str] = ()) -> List[str]:
    """`gunicorn -w WORKERS -k gthread --threads THREADS`."""
    return _gunicorn(app_module, port, workers,
                     ["-k", "gthread", "--threads", str(threads)], extra)


def gunicorn_uvicorn_worker(app_module: str, port: int, workers: int = 2,
                            extra: Sequence[str] = ()) -> List[str]:
    """`gunicorn -w WORKERS -k uvicorn.workers.UvicornWorker` (an ASGI app under gunicorn).

    uvicorn 0.54 still ships `uvicorn.workers` but deprecates it in favour of the separate
    `uvicorn-worker` package (not installed here); the import prints a DeprecationWarning to the
    server log and works.
    """
    return _gunicorn(app_module, port, workers,
                     ["-k", "uvicorn.workers.UvicornWorker"], extra)


def gunicorn_asgi(app_module: str, port: int, workers: int = 2,
                  extra: Sequence[str] = ()) -> List[str]:
    """`gunicorn -w WORKERS -k asgi`: gunicorn 27's own ASGI worker (no uvicorn involved)."""
    return _gunicorn(app_module, port, workers, ["-k", "asgi"], extra)


def uvicorn_app(app_module: str, port: int, workers: Optional[int] = None,
                loop: Optional[str] = None, extra: Sequence[str] = (),
                python: Optional[str] = None) -> List[str]:
    """`uvicorn APP --app-dir fixtures/servers --host 127.0.0.1 --port PORT [--workers N]`.

    Without `workers` (or with 1) uvicorn serves in the started process itself; with N > 1 the
    started process is a supervisor and N spawned processes serve. `loop` is uvicorn's `--loop`
    (default: uvicorn's `auto`, which is uvloop when installed, as here). Access logging is off:
    a log line per request would add logging work to every profile.
    """
    argv = [*server_program("uvicorn", python), _app_target(app_module),
            "--app-dir", str(SERVERS),
            "--host", LOOPBACK, "--port", str(port),
            "--no-access-log",
            "--timeout-graceful-shutdown", "5"]
    if workers is not None:
        argv += ["--workers", str(workers)]
    if loop is not None:
        argv += ["--loop", loop]
    return argv + list(extra)


def expected_workers(argv: Sequence[str]) -> Optional[int]:
    """Worker processes `argv` will fork: gunicorn's -w (default 1), uvicorn's --workers when > 1
    (else 0: the started process serves); None when argv is neither gunicorn nor uvicorn."""
    program = None
    for i, arg in enumerate(argv):
        name = os.path.basename(arg)
        if name in ("gunicorn", "uvicorn"):
            program = name
            break
        if arg == "-m" and i + 1 < len(argv) and argv[i + 1] in ("gunicorn", "uvicorn"):
            program = argv[i + 1]
            break
    if program is None:
        return None
    count = None
    for i, arg in enumerate(argv):
        value = None
        if arg in ("-w", "--workers") and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--workers="):
            value = arg.split("=", 1)[1]
        elif program == "gunicorn" and re.fullmatch(r"-w\d+", arg):
            value = arg[2:]
        if value is not None:
            count = int(value)
    if program == "gunicorn":
        return 1 if count is None else count
    return count if count is not None and count > 1 else 0


# -- the running server -----------------------------------------------------------------------

def is_alive(proc: Union[psutil.Process, int]) -> bool:
    """True while the process runs. A zombie counts as gone: PID 1 of this machine's container
    does not reap orphans, so workers whose master was SIGKILLed stay zombies (no CPU, no
    sockets) and `psutil.pid_exists` would still say True. A psutil.Process also guards against
    pid reuse (it compares the creation time)."""
    try:
        if not isinstance(proc, psutil.Process):
            proc = psutil.Process(proc)
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _is_python(proc: psutil.Process) -> bool:
    try:
        exe = os.path.basename(proc.exe())
    except (psutil.Error, OSError):
        exe = ""
    if not exe:
        try:
            cmdline = proc.cmdline()
            exe = os.path.basename(cmdline[0]) if cmdline else ""
        except psutil.Error:
            return False
    return exe.startswith("python")


def _is_helper(proc: psutil.Process) -> bool:
    try:
        cmdline = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return any(helper in cmdline for helper in _HELPER_PROCESSES)


def _has_mapping(pid: int, needle: str) -> bool:
    try:
        with open(f"/proc/{pid}/maps") as maps:
            return any(needle in line for line in maps)
    except OSError:
        return False


class Server:
    """A started server. `pid` is the process that was started (gunicorn master, uvicorn main or
    supervisor); `port` is on 127.0.0.1."""

    def __init__(self, proc: subprocess.Popen, argv: Sequence[str], port: int, log_path: Path):
        self.proc = proc
        self.pid = proc.pid
        self.argv = list(argv)
        self.port = port
        self.log_path = log_path
        self.ready_seconds: Optional[float] = None  # start to ready (health + workers)
        self._process = psutil.Process(proc.pid)
        self._seen: Dict[int, psutil.Process] = {proc.pid: self._process}

    def url(self, path: str = "/") -> str:
        return f"http://{LOOPBACK}:{self.port}{path}"

    def descendants(self) -> List[psutil.Process]:
        """Every live process below the started one (workers, helpers), remembered for stop."""
        try:
            children = self._process.children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        for child in children:
            self._seen.setdefault(child.pid, child)
        return [c for c in children if is_alive(c)]

    def worker_pids(self) -> List[int]:
        """Pids of the Python processes below the started one (gunicorn workers, uvicorn's
        spawned workers), without multiprocessing's resource tracker. Empty for a single-process
        uvicorn: see `serving_pids`."""
        return sorted(p.pid for p in self.descendants() if _is_python(p) and not _is_helper(p))

    def serving_pids(self) -> List[int]:
        """The processes that run the app: the workers, or the started process if it has none."""
        return self.worker_pids() or [self.pid]

    def tree_pids(self) -> List[int]:
        """The started process and every live descendant."""
        pids = [self.pid] if is_alive(self._process) else []
        return pids + sorted(p.pid for p in self.descendants())

    def known_processes(self) -> List[psutil.Process]:
        """Every process of the tree seen so far (alive or not), as psutil handles; check that
        they are gone with `is_alive` (a zombie counts as gone)."""
        self.descendants()
        return list(self._seen.values())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        """What the server wrote to stdout/stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def get(self, path: str = "/health", timeout: float = 10.0):
        """One GET on 127.0.0.1:port; returns (status, body bytes)."""
        conn = http.client.HTTPConnection(LOOPBACK, self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def wait_for_workers(self, count: int, timeout: float,
                         loaded_marker: Optional[str] = NUMPY_LOADED) -> List[int]:
        """Waits until `count` workers exist and (with `loaded_marker`) each has the mapping
        `loaded_marker` in /proc/PID/maps, i.e. has imported its app; returns their pids."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.worker_pids()
            if len(pids) >= count and (
                    loaded_marker is None or all(_has_mapping(p, loaded_marker) for p in pids)):
                return pids
            if not self.alive():
                raise ServerError(f"server exited ({self.proc.returncode}) while waiting for "
                                  f"{count} workers:\n{_tail(self.output())}")
            if time.monotonic() >= deadline:
                raise ServerError(f"{count} loaded workers not there within {timeout:.0f} s "
                                  f"(workers: {pids}):\n{_tail(self.output())}")
            time.sleep(0.05)

    def __repr__(self) -> str:
        return f"Server(pid={self.pid}, port={self.port}, argv={self.argv!r})"


def _tail(text: str, limit: int = 3000) -> str:
    return text[-limit:]


def _wait_healthy(server: Server, path: str, deadline: float) -> None:
    last_error = "no answer yet"
    while True:
        if not server.alive():
            raise ServerError(f"{server.argv} exited with code {server.proc.returncode} before "
                              f"{path} answered:\n{_tail(server.output())}")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ServerError(f"{server.argv}: {path} did not answer 200 in time ({last_error}):\n"
                              f"{_tail(server.output())}")
        try:
            status, _body = server.get(path, timeout=max(0.2, min(2.0, remaining)))
            if status == 200:
                return
            last_error = f"HTTP {status}"
        except (OSError, http.client.HTTPException) as exc:
            last_error = repr(exc)
        time.sleep(0.05)


def _group_members(pgid: int) -> List[psutil.Process]:
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
        except (OSError, psutil.Error):
            continue
    return members


def _pgid(pid: int) -> Optional[int]:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _wait_gone(procs: Sequence[psutil.Process], timeout: float) -> List[psutil.Process]:
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in procs if is_alive(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def stop_tree(server: Server, timeout: float = 10.0) -> List[int]:
    """SIGTERM the server's process group, wait up to `timeout` s, then SIGKILL the group and
    every remaining process of the tree; returns the pids still alive after that (normally [])."""
    pgid = server.pid  # start_new_session=True: the started process leads its own group
    procs = {p.pid: p for p in server.known_processes()}
    for proc in _group_members(pgid):  # workers orphaned by a master that already died
        procs.setdefault(proc.pid, proc)
    _killpg(pgid, signal.SIGTERM)
    for proc in procs.values():  # a descendant that left the group (setsid) gets its own
        if proc.pid != os.getpid() and is_alive(proc) and _pgid(proc.pid) != pgid:
            try:
                proc.terminate()
            except psutil.Error:
                pass
    try:
        server.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    # Workers started while we were stopping (a master respawning) are in the group as well.
    for proc in _group_members(pgid):
        procs.setdefault(proc.pid, proc)
    survivors = _wait_gone(list(procs.values()), max(0.5, timeout / 2))
    if survivors or server.proc.poll() is None:
        _killpg(pgid, signal.SIGKILL)
        for proc in survivors:
            try:
                proc.kill()
            except psutil.Error:
                pass
        try:
            server.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        survivors = _wait_gone(survivors, 5.0)
    if server.proc.poll() is None:  # reap our own child in any case
        try:
            server.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass
    return [p.pid for p in survivors]


def _server_env(env: Optional[Dict[str, Optional[str]]]) -> Dict[str, str]:
    result = dict(os.environ)
    for name in SCRUBBED_ENV:
        result.pop(name, None)
    result["PYTHONUNBUFFERED"] = "1"
    for name, value in (env or {}).items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = str(value)
    return result


@contextmanager
def start_server(argv: Sequence[str], port: int,
                 env: Optional[Dict[str, Optional[str]]] = None,
                 ready_timeout: float = 60.0,
                 workers: Union[int, str, None] = "auto",
                 health_path: str = "/health",
                 loaded_marker: Optional[str] = NUMPY_LOADED,
                 stop_timeout: float = 10.0) -> Iterator[Server]:
    """Starts `argv` (a server listening on 127.0.0.1:`port`) and yields a `Server` once
    `GET health_path` answers 200 and `workers` worker processes exist with the app imported
    (`"auto"`: `expected_workers(argv)`; None or 0: don't wait for workers).

    Raises `ServerError` if the process exits or is not ready within `ready_timeout` seconds.
    Whatever happens, the whole process tree is stopped on exit (see `stop_tree`)."""
    argv = [str(a) for a in argv]
    if workers == "auto":
        workers = expected_workers(argv)
    log = tempfile.NamedTemporaryFile(prefix=f"diagnose-server-{port}-", suffix=".log",
                                      delete=False)
    log_path = Path(log.name)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=_server_env(env),
                                cwd=str(SERVERS), start_new_session=True,
                                preexec_fn=die_with_parent(os.getpid()))
    except BaseException:
        log.close()
        log_path.unlink()
        raise
    try:
        server = Server(proc, argv, port, log_path)
    except BaseException:
        _killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
        log_path.unlink()
        raise
    try:
        deadline = started + ready_timeout
        _wait_healthy(server, health_path, deadline)
        if workers:
            server.wait_for_workers(workers, max(0.0, deadline - time.monotonic()),
                                    loaded_marker=loaded_marker)
        server.ready_seconds = time.monotonic() - started
        yield server
    finally:
        survivors = stop_tree(server, timeout=stop_timeout)
        log.close()
        if survivors:
            warnings.warn(f"processes of {argv[:3]}… still alive after SIGKILL: {survivors}",
                          stacklevel=3)
        try:
            log_path.unlink()
        except OSError:
            pass
