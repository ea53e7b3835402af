"""The load generator: `wrk` when it is on PATH, else a closed-loop Python client, against a
loopback URL only. Used by `diagnose sweep` / `diagnose experiment` and by the real-server tests
(tests/integration/servers.py re-exports it).

    with load("http://127.0.0.1:8000/predict", seconds=8, connections=8) as run:
        ...                                   # attach to the server while it is loaded
    print(run.result.requests_per_second, run.result.latency_p99_ms, run.result.generator_cpu_s)

Both tools are closed loops: each connection sends its next request when the previous one is
answered, so latencies are those of the requests actually sent (no coordinated-omission
correction, unlike wrk2 or vegeta) and the offered load falls when the service slows down.

The generator shares the machine's cores with the service it loads: every result carries the
CPU it used itself (`generator_cpu_s`, from the kernel's accounting of the wrk process, or the
client threads' own CPU time), so a caller can tell a service that stopped scaling from a
generator that ran out of CPU. wrk's percentiles come from its own histogram through a small
Lua `done` hook (p50, p90, p95, p99, mean, max); its text output is parsed for the rest.

Standard library only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import http.client
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional
from urllib.parse import urlsplit

LOOPBACK = "127.0.0.1"
LOOPBACK_NAMES = ("127.0.0.1", "localhost")
OVERRUN_GRACE_S = 15.0  # a load run may exceed its duration by this much before it is killed

# wrk's `done` hook: its own latency histogram, in microseconds, on one line we parse.
_WRK_DONE_LUA = """\
done = function(summary, latency, requests)
  io.write(string.format("DIAGNOSE-LATENCY-US %.1f %.1f %.1f %.1f %.1f %.1f\\n",
    latency:percentile(50), latency:percentile(90), latency:percentile(95),
    latency:percentile(99), latency.mean, latency.max))
end
"""


class LoadError(RuntimeError):
    """The load generator failed or overran its time budget."""


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
    latency_p90_ms: Optional[float] = None
    latency_p95_ms: Optional[float] = None
    latency_p99_ms: Optional[float] = None
    latency_max_ms: Optional[float] = None
    socket_errors: Dict[str, int] = field(default_factory=dict)  # connect/read/write/timeout
    non_2xx: int = 0                 # responses outside 2xx/3xx (wrk's "Non-2xx or 3xx")
    output: str = ""                 # wrk's text output (empty for the Python client)
    threads: int = 1                 # generator threads: at most this many cores for it
    generator_cpu_s: Optional[float] = None  # CPU the generator itself used (user + system)
    wall_s: Optional[float] = None   # the run's wall time, start to exit

    @property
    def errors(self) -> int:
        """Socket errors plus non-2xx/3xx responses."""
        return sum(self.socket_errors.values()) + self.non_2xx

    @property
    def ok_requests(self) -> int:
        return max(0, self.requests - self.non_2xx)

    @property
    def generator_cores(self) -> Optional[float]:
        """The generator's mean CPU use over its run, in cores."""
        if self.generator_cpu_s is None or not self.wall_s:
            return None
        return self.generator_cpu_s / self.wall_s

    @property
    def generator_capacity_cores(self) -> float:
        """The most CPU the generator could use: one core per wrk thread; one for the Python
        client (its threads share one GIL)."""
        return float(self.threads) if self.tool == "wrk" else 1.0


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
    """Parses `wrk --latency` output (and the line of the `done` hook, when present: its
    percentiles replace the rounded ones of the text)."""
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
    for pct, attr in (("50", "latency_p50_ms"), ("90", "latency_p90_ms"),
                      ("99", "latency_p99_ms")):
        match = re.search(rf"^\s*{pct}%\s+(\S+)", output, re.M)
        if match:
            setattr(result, attr, _wrk_ms(match.group(1)))
    hook = re.search(r"^DIAGNOSE-LATENCY-US" + r"\s+([\d.]+)" * 6, output, re.M)
    if hook and requests:
        p50, p90, p95, p99, mean, top = (float(x) / 1e3 for x in hook.groups())
        result.latency_p50_ms, result.latency_p90_ms = p50, p90
        result.latency_p95_ms, result.latency_p99_ms = p95, p99
        result.latency_avg_ms, result.latency_max_ms = mean, top
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                       output)
    if errors:
        result.socket_errors = dict(zip(("connect", "read", "write", "timeout"),
                                        map(int, errors.groups())))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if non2xx:
        result.non_2xx = int(non2xx.group(1))
    return result


_PR_SET_PDEATHSIG = 1
try:
    _prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):  # not Linux / no glibc: the caller's own clean-up only
    _prctl = None


def die_with_parent(parent_pid: int):
    """preexec_fn: SIGTERM the started process when the thread that started it dies (a caller
    killed by SIGKILL runs no `finally`); a server then stops its own workers."""
    def preexec() -> None:
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)
    return preexec


def killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _WrkRun(LoadRun):
    def __init__(self, wrk: str, url: str, seconds: int, connections: int, threads: int,
                 request_timeout_s: int):
        super().__init__("wrk", url, seconds, connections)
        self.threads = threads
        script = tempfile.NamedTemporaryFile("w", prefix="diagnose-wrk-", suffix=".lua",
                                             delete=False)
        with script:
            script.write(_WRK_DONE_LUA)
        self.script = script.name
        self.argv = [wrk, f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency",
                     "--timeout", f"{request_timeout_s}s", "-s", self.script, url]
        self._output: List[str] = []
        try:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         text=True, start_new_session=True)
        except BaseException:
            self._remove_script()
            raise
        self._reader = threading.Thread(target=self._read, daemon=True, name="wrk-output")
        self._reader.start()

    def _read(self) -> None:
        try:
            self._output.append(self.proc.stdout.read())
        except (OSError, ValueError):
            pass

    def _remove_script(self) -> None:
        try:
            os.unlink(self.script)
        except OSError:
            pass

    def _reap(self, deadline: float):
        """Waits for wrk with wait4, which also returns the CPU it used; None past `deadline`."""
        while True:
            try:
                pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: no CPU figure
                self.proc.wait()
                return self.proc.returncode, None
            if pid:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                return self.proc.returncode, usage.ru_utime + usage.ru_stime
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)

    def _finish(self) -> LoadResult:
        try:
            reaped = self._reap(self.deadline)
            if reaped is None:
                self.abort()
                raise LoadError(f"{self.argv[:-3]} overran {self.seconds} s by more than "
                                f"{OVERRUN_GRACE_S:.0f} s; killed")
            code, cpu = reaped
            wall = time.monotonic() - self.started
            self._reader.join(5)
            output = "".join(self._output)
            if code != 0:
                raise LoadError(f"{self.argv[:-3]} exited with {code}:\n{output[-2000:]}")
            result = parse_wrk(output, self.url, self.connections)
            result.threads, result.generator_cpu_s, result.wall_s = self.threads, cpu, wall
            return result
        finally:
            self._remove_script()

    def abort(self) -> None:
        if self.proc.returncode is None:
            killpg(self.proc.pid, signal.SIGKILL)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._reader.join(5)
        self._remove_script()


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
        self.cpu: List[float] = [0.0] * connections
        self.t_start = time.monotonic()
        self.t_end: Optional[float] = None
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True,
                                         name=f"load-client-{i}") for i in range(connections)]
        for thread in self.threads:
            thread.start()

    def _client(self, index: int) -> None:
        cpu0 = time.thread_time()
        try:
            self._loop(index)
        finally:
            self.cpu[index] = time.thread_time() - cpu0

    def _loop(self, index: int) -> None:
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
        wall = time.monotonic() - self.t_start
        elapsed = min(wall, float(self.seconds))
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
            latency_p50_ms=pct(0.50), latency_p90_ms=pct(0.90), latency_p95_ms=pct(0.95),
            latency_p99_ms=pct(0.99),
            latency_max_ms=latencies[-1] * 1e3 if latencies else None,
            socket_errors=socket_errors,
            non_2xx=sum(c for s, c in statuses.items() if not 200 <= s < 400),
            threads=self.connections, generator_cpu_s=sum(self.cpu), wall_s=wall)

    def abort(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(max(0.0, min(self.request_timeout_s, self.deadline - time.monotonic())))


def resolve_tool(tool: str) -> Optional[str]:
    """wrk's path for "wrk" / "auto" (None for "python", or "auto" without wrk on PATH)."""
    if tool not in ("auto", "wrk", "python"):
        raise ValueError(f"unknown load tool {tool!r}")
    wrk = shutil.which("wrk") if tool in ("auto", "wrk") else None
    if tool == "wrk" and wrk is None:
        raise LoadError("wrk is not on PATH")
    return wrk


@contextmanager
def load(url: str, seconds: float, connections: int = 8, threads: int = 2,
         tool: str = "auto", request_timeout_s: int = 10) -> Iterator[LoadRun]:
    """Drives `url` (127.0.0.1 / localhost only) for `seconds` (rounded up to whole seconds)
    with `connections` concurrent keep-alive connections, in the background while the block
    runs; the run's `LoadResult` is in `run.result` after the block (or from `run.wait()`).

    tool: "wrk" (`wrk -tT -cN -dSs --latency --timeout 10s -s HOOK URL`), "python" (closed-loop
    http.client threads) or "auto" (wrk when on PATH). On leaving the block the run is awaited
    until it ends, at most OVERRUN_GRACE_S seconds past its duration (then killed, LoadError);
    if the block raises, or an exception (a signal's) interrupts that wait, the run is stopped
    at once and no result is set.
    """
    target = loopback_url(url)  # refuses non-loopback hosts before anything starts
    secs = max(1, int(math.ceil(seconds)))
    if connections < 1:
        raise ValueError("connections must be at least 1")
    wrk = resolve_tool(tool)
    if wrk:
        run: LoadRun = _WrkRun(wrk, target, secs, connections, max(1, min(threads, connections)),
                               request_timeout_s)
    else:
        run = _PythonRun(target, secs, connections, float(request_timeout_s))
    try:
        yield run
        run.wait()
    except BaseException:  # the block failed, or a signal's exception arrived while waiting
        run.abort()
        raise


def measure(url: str, seconds: float, connections: int = 8, **kwargs) -> LoadResult:
    """One load run of `seconds`, waited for: its LoadResult."""
    with load(url, seconds, connections, **kwargs) as run:
        pass
    return run.result


def measure_throughput(url: str, seconds: float, connections: int = 8, **kwargs) -> float:
    """Requests per second `url` sustains under `load(url, seconds, connections)`."""
    return measure(url, seconds, connections, **kwargs).requests_per_second
