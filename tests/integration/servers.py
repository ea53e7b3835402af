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
* `load` runs `wrk -t2 -cN -dSs --latency URL` in the background (only against 127.0.0.1 /
  localhost), bounded in time; without wrk on PATH it runs a closed-loop client of N threads with
  keep-alive `http.client` connections instead. Same interface, same `LoadResult`.

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

import ctypes
import ctypes.util
import functools
import http.client
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Union
from urllib.parse import urlsplit

import psutil

REPO = Path(__file__).resolve().parent.parent.parent
SERVERS = REPO / "fixtures" / "servers"
BIN_DIR = Path(sys.executable).parent  # not resolved: a venv's python is a symlink
LOOPBACK = "127.0.0.1"
LOOPBACK_NAMES = ("127.0.0.1", "localhost")
OVERRUN_GRACE_S = 15.0  # a load run may exceed its duration by this much before it is killed

# Variables that would change what a fixture command does, removed unless passed explicitly.
SCRUBBED_ENV = ("WEB_CONCURRENCY", "GUNICORN_CMD_ARGS", "DIAGNOSE_FIXTURE_OFFLOAD")

# A worker has imported its app when numpy's core extension is mapped (every fixture app imports
# numpy at module level).
NUMPY_LOADED = "_multiarray_umath"

# Python children that are not workers.
_HELPER_PROCESSES = ("resource_tracker", "semaphore_tracker", "forkserver")


class ServerError(RuntimeError):
    """The server exited, or did not become ready in time."""


class LoadError(RuntimeError):
    """The load generator failed or overran its time budget."""


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


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


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


_PR_SET_PDEATHSIG = 1
try:
    _prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):  # not Linux / no glibc: rely on stop_tree alone
    _prctl = None


def _die_with_parent(parent_pid: int):
    """preexec_fn: SIGTERM the server when the thread that started it dies (a test runner
    killed by SIGTERM/SIGKILL runs no `finally`); the server then stops its own workers."""
    def preexec() -> None:
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)
    return preexec


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
                                preexec_fn=_die_with_parent(os.getpid()))
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
            warnings.warn(f"processes of {argv[:3]}… still alive after SIGKILL: {survivors}")
        try:
            log_path.unlink()
        except OSError:
            pass


# -- load generation --------------------------------------------------------------------------

@dataclass
class LoadResult:
    tool: str                        # "wrk" or "python"
    url: str
    connections: int
    duration_s: float                # the measured window (wrk's "requests in X s")
    requests: int                    # completed requests (any status)
    requests_per_second: float
    latency_avg_ms: Optional[float] = None
    latency_p50_ms: Optional[float] = None
    latency_p99_ms: Optional[float] = None
    socket_errors: Dict[str, int] = field(default_factory=dict)  # connect/read/write/timeout
    non_2xx: int = 0                 # responses outside 2xx/3xx (wrk's "Non-2xx or 3xx")
    output: str = ""                 # wrk's text output (empty for the Python client)

    @property
    def errors(self) -> int:
        """Socket errors plus non-2xx/3xx responses."""
        return sum(self.socket_errors.values()) + self.non_2xx

    @property
    def ok_requests(self) -> int:
        return max(0, self.requests - self.non_2xx)


class LoadRun:
    """A load run in progress; `result` is set when the `with load(...)` block exits."""

    def __init__(self, tool: str, url: str, seconds: int, connections: int):
        self.tool = tool
        self.url = url
        self.seconds = seconds
        self.connections = connections
        self.started = time.monotonic()
        self.result: Optional[LoadResult] = None

    @property
    def deadline(self) -> float:
        """When the run must be over (duration + OVERRUN_GRACE_S), on time.monotonic()."""
        return self.started + self.seconds + OVERRUN_GRACE_S

    def wait(self) -> LoadResult:
        """Blocks until the run is over (at most until `deadline`) and returns its result."""
        if self.result is None:
            self.result = self._finish()
        return self.result

    def _finish(self) -> LoadResult:  # pragma: no cover - overridden
        raise NotImplementedError

    def abort(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


def loopback_url(url: str) -> str:
    """`url` with its host checked (127.0.0.1 or localhost only, http only) and written as
    127.0.0.1; raises ValueError for anything else."""
    parts = urlsplit(url)
    if parts.scheme != "http":
        raise ValueError(f"refusing to load {url!r}: only http:// URLs are supported")
    host = (parts.hostname or "").lower()
    if host not in LOOPBACK_NAMES or parts.username is not None or parts.password is not None:
        raise ValueError(f"refusing to load {url!r}: only 127.0.0.1 / localhost may be loaded")
    port = parts.port or 80
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return f"http://{LOOPBACK}:{port}{path}"


_WRK_UNITS_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def _wrk_ms(text: str) -> Optional[float]:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", text.strip())
    if not match:
        return None
    return float(match.group(1)) * _WRK_UNITS_MS[match.group(2)]


def _wrk_count(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)([kMG]?)", text.strip())
    if not match:
        raise ValueError(text)
    return float(match.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[match.group(2)]


def parse_wrk(output: str, url: str, connections: int) -> LoadResult:
    """Parses `wrk --latency` output."""
    done = re.search(r"^\s*(\d+) requests in ([\d.]+)(us|ms|s|m|h),", output, re.M)
    if not done:
        raise LoadError(f"cannot parse wrk output:\n{output[-2000:]}")
    requests = int(done.group(1))
    duration_s = _wrk_ms(done.group(2) + done.group(3)) / 1e3
    rps = re.search(r"^Requests/sec:\s+([\d.]+[kMG]?)", output, re.M)
    result = LoadResult(tool="wrk", url=url, connections=connections, duration_s=duration_s,
                        requests=requests,
                        requests_per_second=_wrk_count(rps.group(1)) if rps else
                        (requests / duration_s if duration_s else 0.0),
                        output=output)
    avg = re.search(r"^\s*Latency\s+(\S+)", output, re.M)
    if avg:
        result.latency_avg_ms = _wrk_ms(avg.group(1))
    for pct, attr in (("50", "latency_p50_ms"), ("99", "latency_p99_ms")):
        match = re.search(rf"^\s*{pct}%\s+(\S+)", output, re.M)
        if match:
            setattr(result, attr, _wrk_ms(match.group(1)))
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                       output)
    if errors:
        result.socket_errors = dict(zip(("connect", "read", "write", "timeout"),
                                        map(int, errors.groups())))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if non2xx:
        result.non_2xx = int(non2xx.group(1))
    return result


class _WrkRun(LoadRun):
    def __init__(self, wrk: str, url: str, seconds: int, connections: int, threads: int,
                 request_timeout_s: int):
        super().__init__("wrk", url, seconds, connections)
        self.argv = [wrk, f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency",
                     "--timeout", f"{request_timeout_s}s", url]
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)

    def _finish(self) -> LoadResult:
        try:
            output, _ = self.proc.communicate(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.abort()
            raise LoadError(f"{self.argv} overran {self.seconds} s by more than "
                            f"{OVERRUN_GRACE_S:.0f} s; killed") from None
        if self.proc.returncode != 0:
            raise LoadError(f"{self.argv} exited with {self.proc.returncode}:\n{output[-2000:]}")
        return parse_wrk(output, self.url, self.connections)

    def abort(self) -> None:
        if self.proc.poll() is None:
            _killpg(self.proc.pid, signal.SIGKILL)
        try:
            self.proc.communicate(timeout=5)
        except (subprocess.TimeoutExpired, ValueError):
            pass


class _PythonRun(LoadRun):
    """Closed loop: `connections` threads, each with one keep-alive http.client connection,
    sending GETs back to back until the duration is over."""

    def __init__(self, url: str, seconds: int, connections: int, request_timeout_s: float):
        super().__init__("python", url, seconds, connections)
        parts = urlsplit(url)
        self.port = parts.port or 80
        self.path = parts.path + ("?" + parts.query if parts.query else "")
        self.request_timeout_s = request_timeout_s
        self.stop = threading.Event()
        self.latencies: List[List[float]] = [[] for _ in range(connections)]
        self.statuses: List[Dict[int, int]] = [{} for _ in range(connections)]
        self.errors: List[Dict[str, int]] = [{} for _ in range(connections)]
        self.t_start = time.monotonic()
        self.t_end: Optional[float] = None
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True,
                                         name=f"load-client-{i}") for i in range(connections)]
        for thread in self.threads:
            thread.start()

    def _client(self, index: int) -> None:
        end = self.t_start + self.seconds
        conn = None
        latencies, statuses = self.latencies[index], self.statuses[index]
        errors = self.errors[index]
        while not self.stop.is_set() and time.monotonic() < end:
            if conn is None:
                conn = http.client.HTTPConnection(LOOPBACK, self.port,
                                                  timeout=self.request_timeout_s)
            t0 = time.monotonic()
            try:
                conn.request("GET", self.path)
                response = conn.getresponse()
                response.read()
            except socket.timeout:
                errors["timeout"] = errors.get("timeout", 0) + 1
                conn.close()
                conn = None
                continue
            except ConnectionRefusedError:
                errors["connect"] = errors.get("connect", 0) + 1
                conn.close()
                conn = None
                time.sleep(0.01)
                continue
            except (OSError, http.client.HTTPException):
                errors["read"] = errors.get("read", 0) + 1
                conn.close()
                conn = None
                continue
            t1 = time.monotonic()
            if t1 <= end:  # count what completed inside the window, as wrk does
                latencies.append(t1 - t0)
                statuses[response.status] = statuses.get(response.status, 0) + 1
            if response.will_close:
                conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def _finish(self) -> LoadResult:
        for thread in self.threads:
            thread.join(max(0.0, self.deadline - time.monotonic()))
        if any(t.is_alive() for t in self.threads):
            self.stop.set()
            raise LoadError(f"python load client overran {self.seconds} s by more than "
                            f"{OVERRUN_GRACE_S:.0f} s")
        elapsed = min(time.monotonic() - self.t_start, float(self.seconds))
        latencies = sorted(x for per_thread in self.latencies for x in per_thread)
        statuses: Dict[int, int] = {}
        for per_thread in self.statuses:
            for status, count in per_thread.items():
                statuses[status] = statuses.get(status, 0) + count
        socket_errors = {"connect": 0, "read": 0, "write": 0, "timeout": 0}
        for per_thread in self.errors:
            for kind, count in per_thread.items():
                socket_errors[kind] = socket_errors.get(kind, 0) + count

        def pct(q: float) -> Optional[float]:
            if not latencies:
                return None
            rank = max(1, math.ceil(q * len(latencies)))
            return latencies[rank - 1] * 1e3

        requests = len(latencies)
        return LoadResult(
            tool="python", url=self.url, connections=self.connections, duration_s=elapsed,
            requests=requests, requests_per_second=requests / elapsed if elapsed > 0 else 0.0,
            latency_avg_ms=(sum(latencies) / requests * 1e3) if requests else None,
            latency_p50_ms=pct(0.50), latency_p99_ms=pct(0.99),
            socket_errors=socket_errors,
            non_2xx=sum(c for s, c in statuses.items() if not 200 <= s < 400))

    def abort(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(max(0.0, min(self.request_timeout_s, self.deadline - time.monotonic())))


@contextmanager
def load(url: str, seconds: float, connections: int = 8, threads: int = 2,
         tool: str = "auto", request_timeout_s: int = 10) -> Iterator[LoadRun]:
    """Drives `url` (127.0.0.1 / localhost only) for `seconds` (rounded up to whole seconds)
    with `connections` concurrent keep-alive connections, in the background while the block
    runs; the run's `LoadResult` is in `run.result` after the block (or from `run.wait()`).

    tool: "wrk" (`wrk -tT -cN -dSs --latency --timeout 10s URL`), "python" (closed-loop
    http.client threads) or "auto" (wrk when on PATH). On leaving the block the run is awaited
    until it ends, at most OVERRUN_GRACE_S seconds past its duration (then killed, LoadError);
    if the block raises, the run is stopped at once and no result is set.
    """
    target = loopback_url(url)  # refuses non-loopback hosts before anything starts
    secs = max(1, int(math.ceil(seconds)))
    if connections < 1:
        raise ValueError("connections must be at least 1")
    wrk = shutil.which("wrk") if tool in ("auto", "wrk") else None
    if tool == "wrk" and wrk is None:
        raise LoadError("wrk is not on PATH")
    if tool not in ("auto", "wrk", "python"):
        raise ValueError(f"unknown load tool {tool!r}")
    if wrk:
        run: LoadRun = _WrkRun(wrk, target, secs, connections, max(1, min(threads, connections)),
                               request_timeout_s)
    else:
        run = _PythonRun(target, secs, connections, float(request_timeout_s))
    try:
        yield run
    except BaseException:
        run.abort()
        raise
    run.wait()


def measure_throughput(url: str, seconds: float, connections: int = 8, **kwargs) -> float:
    """Requests per second `url` sustains under `load(url, seconds, connections)`."""
    with load(url, seconds, connections, **kwargs) as run:
        pass
    return run.result.requests_per_second
