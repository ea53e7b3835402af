"""The load generator, against a loopback URL only: the closed model (`connections` in flight,
`wrk` when it is on PATH, else a Python client) or the open model (`rate` requests per second,
constant or Poisson arrivals, always the Python client of diagnose/load/openloop.py). Used by
`diagnose sweep` / `diagnose experiment` and by the real-server tests
(tests/integration/servers.py re-exports it).

    with load("http://127.0.0.1:8000/predict", seconds=8, connections=8) as run:
        ...                                   # attach to the server while it is loaded
    print(run.result.requests_per_second, run.result.latency_p99_ms, run.result.generator_cpu_s)
    measure(url, 5, rate=200, arrivals="poisson", method="POST", body=b"{}",
            headers=[("Content-Type", "application/json")])

Closed model: each connection sends its next request when the previous one is answered, so
the offered load falls when the service slows down. The Python client's latencies are those of
the requests actually sent (a stall delays the requests that would have met it: coordinated
omission). wrk 4 corrects its own histogram after the run (its `stats_correct`: each latency
longer than a connection's mean interval also records the requests that connection would have
sent meanwhile), so wrk's buckets hold more values than requests completed and a stall does
reach its p99. Open model: requests leave on schedule and latency counts from each request's intended send time,
so a stall shows in the percentiles. Every completed request's latency is in an HDR histogram
(`LoadResult.histogram`, microseconds, diagnose/load/latency.py); the percentiles are read from it.
For wrk, the histogram is wrk's own: its `done` hook writes every (latency, count) bucket of
wrk's 1 µs-resolution histogram to a file (`histogram_source = "wrk-buckets"`); a wrk without
bucket access gives percentiles only, from which an approximate histogram is made
("wrk-percentiles").

Errors by kind (`errors_by_kind`): connect, read, write, timeout (no answer), http_4xx, http_5xx
(answers, counted in `requests` too) and, open model only, dropped (scheduled but never sent:
the client's bound on outstanding requests was reached, or the window ended first; see
diagnose/load/openloop.py).

The generator shares the machine's cores with the service it loads: every result carries the
CPU it used itself (`generator_cpu_s`, from the kernel's accounting of the wrk process, or the
client threads' own CPU time), so a caller can tell a service that stopped scaling from a
generator that ran out of CPU. In the open model the generator also reports its own lateness
(`schedule_lag_ms`: p99 of dispatch time minus intended send time): a large lag means the
generator, not the service, could not keep the rate.

Standard library + hdrhistogram.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

from hdrh.histogram import HdrHistogram

from diagnose.load import latency
from diagnose.load.openloop import (DEFAULT_MAX_OUTSTANDING, ERROR_KINDS, SOCKET_ERRORS, Connection,
                               OpenLoop, RequestSpec, normalise_headers)

LOOPBACK = "127.0.0.1"
LOOPBACK_NAMES = ("127.0.0.1", "localhost")
OVERRUN_GRACE_S = 15.0  # a load run may exceed its duration by this much before it is killed

# wrk's script: the request (method, headers, body), a count of 4xx / 5xx answers per thread,
# and a `done` hook printing wrk's percentiles (µs) and writing every bucket of its latency
# histogram, `latency(i)` -> (µs, count) for i = 1 .. #latency, to BUCKETS_PATH.
_WRK_LUA = """\
{request}
diagnose_4xx, diagnose_5xx = 0, 0
local diagnose_threads = {{}}
setup = function(thread) table.insert(diagnose_threads, thread) end
response = function(status, headers, body)
  if status >= 500 then diagnose_5xx = diagnose_5xx + 1
  elseif status >= 400 then diagnose_4xx = diagnose_4xx + 1 end
end
done = function(summary, latency, requests)
  io.write(string.format("DIAGNOSE-LATENCY-US %.1f %.1f %.1f %.1f %.1f %.1f\\n",
    latency:percentile(50), latency:percentile(90), latency:percentile(95),
    latency:percentile(99), latency.mean, latency.max))
  local c4, c5 = 0, 0
  for _, thread in ipairs(diagnose_threads) do
    c4 = c4 + (thread:get("diagnose_4xx") or 0)
    c5 = c5 + (thread:get("diagnose_5xx") or 0)
  end
  io.write(string.format("DIAGNOSE-STATUS %d %d\\n", c4, c5))
  local ok, n = pcall(function() return #latency end)
  if not ok or not n then return end
  local out = io.open({buckets_path}, "w")
  if not out then return end
  for i = 1, n do
    local value, count = latency(i)
    out:write(string.format("%d %d\\n", value, count))
  end
  out:close()
end
"""

PLAIN_GET = RequestSpec()  # what a request sends unless told otherwise (frozen: safe as a default)


def lua_string(data: bytes) -> str:
    """A Lua string literal of `data`, byte for byte (\\ddd escapes outside printable ASCII)."""
    return '"' + "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:03d}"
                         for b in data) + '"'


def wrk_script(spec: RequestSpec, buckets_path: str) -> str:
    """The Lua script for wrk: `spec` as wrk's request, the status counts and the done hook."""
    lines = [f"wrk.method = {lua_string(spec.method.encode('ascii'))}"]
    if spec.body is not None:
        lines.append(f"wrk.body = {lua_string(spec.body)}")
    for name, value in spec.headers:
        lines.append(f"wrk.headers[{lua_string(name.encode('latin-1'))}] = "
                     f"{lua_string(value.encode('latin-1'))}")
    return _WRK_LUA.format(request="\n".join(lines),
                           buckets_path=lua_string(buckets_path.encode()))


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
    # Every completed request's latency (µs) in the window; the percentiles above come from it.
    histogram: Optional[HdrHistogram] = None
    histogram_source: Optional[str] = None  # "python" | "wrk-buckets" | "wrk-percentiles"
    model: str = "closed"            # "closed" (connections) or "open" (rate)
    rate: Optional[float] = None     # open model: offered requests/s
    arrivals: Optional[str] = None   # open model: "constant" or "poisson"
    scheduled: Optional[int] = None  # open model: requests whose intended time is in the window
    # connect/read/write/timeout/http_4xx/http_5xx (+ dropped, open model); see the docstring.
    errors_by_kind: Dict[str, int] = field(default_factory=dict)
    # Open model: p99 / max of (dispatch time - intended send time), the generator's own
    # lateness (not the service's queueing). None for the closed model.
    schedule_lag_ms: Optional[float] = None
    schedule_lag_max_ms: Optional[float] = None

    @property
    def errors(self) -> int:
        """Socket errors, non-2xx/3xx responses and (open model) requests never sent."""
        return (sum(self.socket_errors.values()) + self.non_2xx
                + self.errors_by_kind.get("dropped", 0))

    @property
    def ok_requests(self) -> int:
        return max(0, self.requests - self.non_2xx)

    def use_histogram(self, hist: HdrHistogram, source: str) -> None:
        """Takes `hist` as the run's latencies: percentiles, mean and max are read from it."""
        self.histogram, self.histogram_source = hist, source
        if hist.get_total_count() == 0:
            return
        points = latency.percentiles_ms(hist)
        self.latency_p50_ms, self.latency_p90_ms = points["p50"], points["p90"]
        self.latency_p95_ms, self.latency_p99_ms = points["p95"], points["p99"]
        self.latency_max_ms, self.latency_avg_ms = points["max"], latency.mean_ms(hist)

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
    duration_ms = _wrk_ms(done.group(2) + done.group(3))
    assert duration_ms is not None  # `done` matched _wrk_ms's own pattern
    duration_s = duration_ms / 1e3
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
    result.errors_by_kind = {kind: result.socket_errors.get(kind, 0) for kind in SOCKET_ERRORS}
    status = re.search(r"^DIAGNOSE-STATUS (\d+) (\d+)", output, re.M)
    if status:
        result.errors_by_kind["http_4xx"] = int(status.group(1))
        result.errors_by_kind["http_5xx"] = int(status.group(2))
    elif result.non_2xx:  # wrk's text does not split them
        result.errors_by_kind["http_other"] = result.non_2xx
    if hook and requests:
        points = [(50.0, p50), (90.0, p90), (95.0, p95), (99.0, p99), (100.0, top)]
        result.histogram = latency.from_percentiles([(q, ms * 1e3) for q, ms in points],
                                                    requests)
        result.histogram_source = "wrk-percentiles"
    return result


def read_wrk_buckets(path: str) -> Optional[HdrHistogram]:
    """The histogram of the (µs, count) lines the done hook wrote; None without the file."""
    try:
        with open(path) as lines:
            pairs = [line.split() for line in lines if line.strip()]
    except OSError:
        return None
    try:
        return latency.from_buckets((float(value), int(float(count))) for value, count in pairs)
    except ValueError:
        return None


_PR_SET_PDEATHSIG = 1
_prctl: Optional[Callable[..., int]]
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
                 request_timeout_s: int, spec: RequestSpec = PLAIN_GET):
        super().__init__("wrk", url, seconds, connections)
        self.threads = threads
        script = tempfile.NamedTemporaryFile("w", prefix="diagnose-wrk-", suffix=".lua",
                                             delete=False)
        self.buckets = script.name[:-len(".lua")] + ".buckets"
        with script:
            script.write(wrk_script(spec, self.buckets))
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
            assert self.proc.stdout is not None  # stdout=PIPE
            self._output.append(self.proc.stdout.read())
        except (OSError, ValueError):
            pass

    def _remove_script(self) -> None:
        for path in (self.script, self.buckets):
            try:
                os.unlink(path)
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
            buckets = read_wrk_buckets(self.buckets)
            if buckets is not None:
                result.use_histogram(buckets, "wrk-buckets")
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
    sending `spec` back to back until the duration is over."""

    def __init__(self, url: str, seconds: int, connections: int, request_timeout_s: float,
                 spec: RequestSpec = PLAIN_GET):
        super().__init__("python", url, seconds, connections)
        self.port = urlsplit(url).port or 80
        self.spec = spec
        self.request_timeout_s = request_timeout_s
        self.stop = threading.Event()
        self.histograms = [latency.new_histogram() for _ in range(connections)]
        self.errors: List[Dict[str, int]] = [{} for _ in range(connections)]
        self.answered: List[int] = [0] * connections
        self.cpu: List[float] = [0.0] * connections
        self.connections_in_use = [Connection(self.port, request_timeout_s)
                                   for _ in range(connections)]
        self.t_start = time.monotonic()
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True,
                                         name=f"load-client-{i}") for i in range(connections)]
        for thread in self.threads:
            thread.start()

    def _client(self, index: int) -> None:
        cpu0 = time.thread_time()
        try:
            self._loop(index)
        finally:
            self.connections_in_use[index].close()
            self.cpu[index] = time.thread_time() - cpu0

    def _loop(self, index: int) -> None:
        end = self.t_start + self.seconds
        connection = self.connections_in_use[index]
        hist, errors = self.histograms[index], self.errors[index]
        while not self.stop.is_set() and time.monotonic() < end:
            t0 = time.monotonic()
            status, kind = connection.send(self.spec)
            t1 = time.monotonic()
            if t1 > end:  # count only what ended inside the window, as wrk does
                break
            if status is not None:
                latency.record_us(hist, (t1 - t0) * 1e6)
                self.answered[index] += 1
            if kind is not None:
                errors[kind] = errors.get(kind, 0) + 1
            if kind == "connect":
                time.sleep(0.01)  # a refusing server: don't spin

    def _finish(self) -> LoadResult:
        for thread in self.threads:
            thread.join(max(0.0, self.deadline - time.monotonic()))
        if any(t.is_alive() for t in self.threads):
            self.abort()
            raise LoadError(f"python load client overran {self.seconds} s by more than "
                            f"{OVERRUN_GRACE_S:.0f} s")
        wall = time.monotonic() - self.t_start
        elapsed = min(wall, float(self.seconds))
        errors = {kind: 0 for kind in ERROR_KINDS if kind != "dropped"}
        for per_thread in self.errors:
            for kind, count in per_thread.items():
                errors[kind] = errors.get(kind, 0) + count
        requests = sum(self.answered)
        result = LoadResult(
            tool="python", url=self.url, connections=self.connections, duration_s=elapsed,
            requests=requests, requests_per_second=requests / elapsed if elapsed > 0 else 0.0,
            socket_errors={kind: errors[kind] for kind in SOCKET_ERRORS},
            non_2xx=errors["http_4xx"] + errors["http_5xx"],
            threads=self.connections, generator_cpu_s=sum(self.cpu), wall_s=wall,
            errors_by_kind=errors)
        result.use_histogram(latency.merge(self.histograms), "python")
        return result

    def abort(self) -> None:
        self.stop.set()
        for connection in self.connections_in_use:
            connection.shutdown()
        for thread in self.threads:
            thread.join(max(0.0, min(self.request_timeout_s, self.deadline - time.monotonic())))


class _OpenRun(LoadRun):
    """Open model: diagnose/load/openloop.py's client at `rate` requests/s."""

    def __init__(self, url: str, seconds: int, rate: float, arrivals: str, seed: Optional[int],
                 max_outstanding: int, request_timeout_s: float, spec: RequestSpec):
        super().__init__("python", url, seconds, max_outstanding)
        self.rate, self.arrivals = float(rate), arrivals
        self.loop = OpenLoop(urlsplit(url).port or 80, spec, rate, seconds, arrivals=arrivals,
                             seed=seed, max_outstanding=max_outstanding,
                             request_timeout_s=request_timeout_s)

    def _finish(self) -> LoadResult:
        stats = self.loop.wait(min(self.loop.drain_deadline, self.deadline))
        if stats is None:
            raise LoadError(f"the open-model client overran {self.seconds} s by more than "
                            f"{OVERRUN_GRACE_S:.0f} s")
        errors = stats.errors_by_kind
        lag = latency.percentiles_ms(stats.lag_histogram)
        result = LoadResult(
            tool="python", url=self.url, connections=max(1, stats.workers),
            duration_s=stats.window_s, requests=stats.completed,
            requests_per_second=stats.completed_in_window / stats.window_s,
            socket_errors={kind: errors[kind] for kind in SOCKET_ERRORS},
            non_2xx=errors["http_4xx"] + errors["http_5xx"],
            threads=max(1, stats.workers), generator_cpu_s=stats.cpu_s, wall_s=stats.wall_s,
            model="open", rate=self.rate, arrivals=self.arrivals, scheduled=stats.scheduled,
            errors_by_kind=dict(errors), schedule_lag_ms=lag["p99"],
            schedule_lag_max_ms=lag["max"])
        result.use_histogram(stats.histogram, "python")
        return result

    def abort(self) -> None:
        self.loop.abort()


def resolve_tool(tool: str) -> Optional[str]:
    """wrk's path for "wrk" / "auto" (None for "python", or "auto" without wrk on PATH)."""
    if tool not in ("auto", "wrk", "python"):
        raise ValueError(f"unknown load tool {tool!r}")
    wrk = shutil.which("wrk") if tool in ("auto", "wrk") else None
    if tool == "wrk" and wrk is None:
        raise LoadError("wrk is not on PATH")
    return wrk


WRK_OPEN_MODEL = ("wrk cannot drive an open model (constant request rate); "
                  "use --tool python or auto")
METHOD_CHARS = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def request_spec(target: str, method: str = "GET", body: Optional[bytes] = None,
                 headers: Sequence[Tuple[str, str]] = ()) -> RequestSpec:
    """The request every connection sends to `target` (a loopback_url), checked."""
    if not METHOD_CHARS.fullmatch(method or ""):
        raise ValueError(f"not an HTTP method: {method!r}")
    parts = urlsplit(target)
    path = (parts.path or "/") + ("?" + parts.query if parts.query else "")
    return RequestSpec(method=method.upper(), path=path,
                       body=bytes(body) if body is not None else None,
                       headers=normalise_headers(headers))


@contextmanager
def load(url: str, seconds: float, connections: int = 8, threads: int = 2,
         tool: str = "auto", request_timeout_s: int = 10, *, rate: Optional[float] = None,
         arrivals: str = "constant", seed: Optional[int] = None, method: str = "GET",
         body: Optional[bytes] = None, headers: Sequence[Tuple[str, str]] = (),
         max_outstanding: int = DEFAULT_MAX_OUTSTANDING) -> Iterator[LoadRun]:
    """Drives `url` (127.0.0.1 / localhost only) for `seconds` (rounded up to whole seconds)
    in the background while the block runs; the run's `LoadResult` is in `run.result` after the
    block (or from `run.wait()`).

    Closed model (no `rate`): `connections` concurrent keep-alive connections. tool: "wrk"
    (`wrk -tT -cN -dSs --latency --timeout 10s -s SCRIPT URL`), "python" (closed-loop
    http.client threads) or "auto" (wrk when on PATH).
    Open model (`rate` requests/s): the Python open-loop client whatever `tool` says, except
    "wrk" (LoadError: wrk has no open model); `arrivals` "constant" or "poisson" (`seed` makes
    Poisson gaps reproducible); at most `max_outstanding` requests in flight (see
    diagnose/load/openloop.py for what happens beyond).
    Every request is `method` with `headers` ((name, value) pairs) and `body`.

    On leaving the block the run is awaited until it ends, at most OVERRUN_GRACE_S seconds past
    its duration (then killed, LoadError); if the block raises, or an exception (a signal's)
    interrupts that wait, the run is stopped at once and no result is set.
    """
    target = loopback_url(url)  # refuses non-loopback hosts before anything starts
    secs = max(1, int(math.ceil(seconds)))
    if connections < 1:
        raise ValueError("connections must be at least 1")
    spec = request_spec(target, method, body, headers)
    if rate is not None:
        if tool == "wrk":
            raise LoadError(WRK_OPEN_MODEL)
        resolve_tool(tool)  # an unknown tool name is still an error
        if not rate > 0:
            raise ValueError("rate must be positive")
        run: LoadRun = _OpenRun(target, secs, rate, arrivals, seed, max_outstanding,
                                float(request_timeout_s), spec)
    else:
        wrk = resolve_tool(tool)
        if wrk:
            run = _WrkRun(wrk, target, secs, connections, max(1, min(threads, connections)),
                          request_timeout_s, spec)
        else:
            run = _PythonRun(target, secs, connections, float(request_timeout_s), spec)
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
    assert run.result is not None  # set by run.wait() as the block exits
    return run.result


def measure_throughput(url: str, seconds: float, connections: int = 8, **kwargs) -> float:
    """Requests per second `url` sustains under `load(url, seconds, connections)`."""
    return measure(url, seconds, connections, **kwargs).requests_per_second
