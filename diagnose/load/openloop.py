"""The open-model Python client: requests leave on a schedule (constant or Poisson arrivals at
`rate` per second) whether or not the service keeps up, and each latency counts from the
request's *intended* send time, so a stall of the service shows in the percentiles instead of
slowing the generator down (no coordinated omission).

One dispatcher thread walks the schedule: it sleeps until a request's intended time, records
its own lateness (dispatch time minus intended time: the *schedule lag*, the generator's
inability to send on time, not the service's queueing) and hands the intended time to a worker.
Workers are threads with one keep-alive `http.client` connection each, started on demand (a
request that finds every worker busy starts a new one) up to `max_outstanding`. Beyond that,
requests wait in a queue, their latency still counting from their intended time; a request that
finds `max_outstanding` requests in flight *and* `max_outstanding` waiting is not sent and is
counted as a `dropped` error, as is every request still unsent END_GRACE_S after the window's end
(a generator too slow for its schedule). Nothing scheduled goes uncounted:

    scheduled = completed + connect + read + write + timeout + dropped

Requests scheduled inside the window are awaited after it (at most the request timeout plus a
second); their latencies are all recorded, including those that end after the window.

`Connection` (one keep-alive connection, one request at a time, failures classified like wrk's
socket errors) is also the closed-loop client's (diagnose/load/loadgen.py).

Standard library + hdrhistogram (diagnose/load/latency.py).
"""

from __future__ import annotations

import http.client
import itertools
import queue
import random
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from hdrh.histogram import HdrHistogram

from diagnose.load import latency

LOOPBACK = "127.0.0.1"
ARRIVALS = ("constant", "poisson")
SOCKET_ERRORS = ("connect", "read", "write", "timeout")
ERROR_KINDS = SOCKET_ERRORS + ("http_4xx", "http_5xx", "dropped")
DEFAULT_MAX_OUTSTANDING = 256
DRAIN_GRACE_S = 1.0   # past the request timeout, for requests in flight when the window ends

# A kept-alive connection the server closed while idle fails on its next request with one of
# these before any byte of a response: such a request is sent once more on a new connection.
_STALE_CONNECTION = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


@dataclass(frozen=True)
class RequestSpec:
    """What every request sends."""
    method: str = "GET"
    path: str = "/"
    body: Optional[bytes] = None
    headers: Tuple[Tuple[str, str], ...] = ()


def status_kind(status: int) -> Optional[str]:
    """The error kind of an HTTP status: http_4xx, http_5xx, or None (1xx-3xx)."""
    if 400 <= status < 500:
        return "http_4xx"
    if status >= 500:
        return "http_5xx"
    return None


class Connection:
    """One keep-alive connection to 127.0.0.1:`port`, one request at a time."""

    def __init__(self, port: int, timeout_s: float):
        self.port = port
        self.timeout_s = timeout_s
        self._conn: Optional[http.client.HTTPConnection] = None
        self._reused = False

    def send(self, spec: RequestSpec) -> Tuple[Optional[int], Optional[str]]:
        """Sends `spec` and reads the whole answer: (status, None or http_4xx/http_5xx), or
        (None, "connect" | "write" | "read" | "timeout") when no answer came."""
        status, kind, stale = self._attempt(spec)
        if stale:  # the server had closed the idle connection: not the request's failure
            status, kind, _ = self._attempt(spec)
        return status, kind

    def _attempt(self, spec: RequestSpec) -> Tuple[Optional[int], Optional[str], bool]:
        reused = self._reused and self._conn is not None
        if self._conn is None:
            self._conn = http.client.HTTPConnection(LOOPBACK, self.port, timeout=self.timeout_s)
            try:
                self._conn.connect()
            except OSError:  # refused, or no answer within the timeout
                self.close()
                return None, "connect", False
        conn = self._conn
        try:
            has_host = any(name.lower() == "host" for name, _ in spec.headers)
            conn.putrequest(spec.method, spec.path, skip_host=has_host,
                            skip_accept_encoding=True)
            for name, value in spec.headers:
                conn.putheader(name, value)
            if spec.body is not None:
                conn.putheader("Content-Length", str(len(spec.body)))
            conn.endheaders(spec.body)
        except socket.timeout:
            self.close()
            return None, "timeout", False
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            return None, "write", reused and isinstance(exc, _STALE_CONNECTION)
        try:
            response = conn.getresponse()
            response.read()
        except socket.timeout:
            self.close()
            return None, "timeout", False
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            return None, "read", reused and isinstance(exc, _STALE_CONNECTION)
        if response.will_close:
            self.close()
        else:
            self._reused = True
        return response.status, status_kind(response.status), False

    def shutdown(self) -> None:
        """Wakes a request blocked on this connection (from another thread)."""
        conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        self._reused = False


def intended_times(start: float, rate: float, arrivals: str,
                   rng: Optional[random.Random] = None) -> Iterator[float]:
    """Intended send times from `start`: every 1/rate s (constant), or exponential gaps of mean
    1/rate s (poisson, from `rng`)."""
    if rate <= 0:
        raise ValueError("rate must be positive")
    if arrivals == "constant":
        for i in itertools.count():
            yield start + i / rate
    elif arrivals == "poisson":
        rng = rng or random.Random()
        t = start
        while True:
            t += rng.expovariate(rate)
            yield t
    else:
        raise ValueError(f"unknown arrivals {arrivals!r} (constant or poisson)")


@dataclass
class _WorkerTally:
    histogram: HdrHistogram = field(default_factory=latency.new_histogram)
    errors: Dict[str, int] = field(default_factory=dict)
    completed: int = 0        # answered (any status)
    in_window: int = 0        # answered before the window's end
    cpu_s: float = 0.0


@dataclass
class OpenLoopStats:
    """What an open-model run measured."""
    histogram: HdrHistogram            # latency from intended send time, µs, every answer
    lag_histogram: HdrHistogram        # dispatch time minus intended time, µs, every request
    scheduled: int                     # intended sends inside the window
    completed: int                     # answered (any status), including after the window
    completed_in_window: int           # answered before the window's end
    errors_by_kind: Dict[str, int]     # ERROR_KINDS, zeros included
    workers: int                       # worker threads (= connections) started
    cpu_s: float                       # CPU of the dispatcher and the workers
    window_s: float
    wall_s: float


# An arrival of the window that the dispatcher reaches this little after the window's end (its
# thread woke late: 5-25 ms on a shared 2-core machine) is sent late, its lag recorded; one
# reached later means the generator fell behind its schedule, and the rest are dropped.
END_GRACE_S = 0.1


def behind_at_end(now: float, t_end: float) -> bool:
    """True when the dispatcher, at monotonic `now`, is too far past the window's end to send."""
    return now >= t_end + END_GRACE_S


class OpenLoop:
    """An open-model run against 127.0.0.1:`port`, started on construction."""

    def __init__(self, port: int, spec: RequestSpec, rate: float, seconds: float,
                 arrivals: str = "constant", seed: Optional[int] = None,
                 max_outstanding: int = DEFAULT_MAX_OUTSTANDING, request_timeout_s: float = 10.0):
        if arrivals not in ARRIVALS:
            raise ValueError(f"unknown arrivals {arrivals!r} (constant or poisson)")
        if rate <= 0:
            raise ValueError("rate must be positive")
        if max_outstanding < 1:
            raise ValueError("max_outstanding must be at least 1")
        self.port, self.spec, self.rate, self.seconds = port, spec, float(rate), float(seconds)
        self.arrivals, self.max_outstanding = arrivals, max_outstanding
        self.request_timeout_s = request_timeout_s
        self._rng = random.Random(seed)
        self._queue: "queue.SimpleQueue[Optional[float]]" = queue.SimpleQueue()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._finished = 0                      # requests workers are done with (under _lock)
        self._dispatched = 0                    # dispatcher only
        self._dropped = 0                       # dispatcher only
        self._scheduled = 0                     # dispatcher only
        self._lag = latency.new_histogram()     # dispatcher only
        self._dispatcher_cpu_s = 0.0
        self._workers: List[threading.Thread] = []
        self._tallies: List[_WorkerTally] = []
        self._connections: List[Connection] = []
        self.t_start = time.monotonic()
        self.t_end = self.t_start + self.seconds
        self._dispatcher = threading.Thread(target=self._dispatch, daemon=True,
                                            name="load-dispatcher")
        self._dispatcher.start()

    # -- dispatcher -------------------------------------------------------------------------

    def _dispatch(self) -> None:
        cpu0 = time.thread_time()
        try:
            self._walk_schedule()
        finally:
            for _ in self._workers:  # after the queued requests: workers drain, then stop
                self._queue.put(None)
            self._dispatcher_cpu_s = time.thread_time() - cpu0

    def _walk_schedule(self) -> None:
        hard_bound = 2 * self.max_outstanding  # in flight plus waiting for a worker
        times = intended_times(self.t_start, self.rate, self.arrivals, self._rng)
        for intended in times:
            if intended >= self.t_end or self._stop.is_set():
                return
            self._scheduled += 1
            now = time.monotonic()
            if now < intended:
                time.sleep(intended - now)
                now = time.monotonic()
            if behind_at_end(now, self.t_end):  # too slow to send the rest: count, don't send
                self._dropped += 1 + sum(1 for t in itertools.takewhile(
                    lambda t: t < self.t_end, times))
                self._scheduled = self._dropped + self._dispatched
                return
            latency.record_us(self._lag, (now - intended) * 1e6)
            backlog = self._dispatched - self._finished
            if backlog >= hard_bound:
                self._dropped += 1
                continue
            if backlog >= len(self._workers) < self.max_outstanding:
                self._start_worker()
            self._dispatched += 1
            self._queue.put(intended)

    def _start_worker(self) -> None:
        tally = _WorkerTally()
        connection = Connection(self.port, self.request_timeout_s)
        thread = threading.Thread(target=self._work, args=(connection, tally), daemon=True,
                                  name=f"load-client-{len(self._workers)}")
        self._tallies.append(tally)
        self._connections.append(connection)
        self._workers.append(thread)
        thread.start()

    # -- workers ----------------------------------------------------------------------------

    def _work(self, connection: Connection, tally: _WorkerTally) -> None:
        cpu0 = time.thread_time()
        errors = tally.errors
        try:
            while True:
                intended = self._queue.get()
                if intended is None:
                    return
                if self._stop.is_set():  # the run was cut short: never sent
                    errors["dropped"] = errors.get("dropped", 0) + 1
                else:
                    status, kind = connection.send(self.spec)
                    done = time.monotonic()
                    if status is not None:
                        latency.record_us(tally.histogram, (done - intended) * 1e6)
                        tally.completed += 1
                        tally.in_window += done <= self.t_end
                    if kind is not None:
                        errors[kind] = errors.get(kind, 0) + 1
                with self._lock:
                    self._finished += 1
        finally:
            connection.close()
            tally.cpu_s = time.thread_time() - cpu0

    # -- the end ----------------------------------------------------------------------------

    @property
    def drain_deadline(self) -> float:
        return self.t_end + self.request_timeout_s + DRAIN_GRACE_S

    def wait(self, deadline: Optional[float] = None) -> Optional[OpenLoopStats]:
        """Waits for the window and the requests scheduled in it (until `deadline`, default
        `drain_deadline`); requests still in flight then are counted as timeouts. None if the
        dispatcher itself did not finish by `deadline`."""
        deadline = self.drain_deadline if deadline is None else deadline
        self._dispatcher.join(max(0.0, deadline - time.monotonic()))
        if self._dispatcher.is_alive():
            self.abort()
            return None
        for thread in self._workers:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._workers):
            self.abort()
        return self._stats()

    def abort(self) -> None:
        """Stops at once: no further sends, blocked requests woken, threads joined briefly."""
        self._stop.set()
        self._dispatcher.join(2.0)
        for connection in list(self._connections):
            connection.shutdown()
        for _ in self._workers:
            self._queue.put(None)
        for thread in list(self._workers):
            thread.join(2.0)

    def _stats(self) -> OpenLoopStats:
        errors = {kind: 0 for kind in ERROR_KINDS}
        for tally in self._tallies:
            for kind, count in tally.errors.items():
                errors[kind] = errors.get(kind, 0) + count
        errors["dropped"] += self._dropped
        with self._lock:
            errors["timeout"] += max(0, self._dispatched - self._finished)  # never answered
        return OpenLoopStats(
            histogram=latency.merge(t.histogram for t in self._tallies),
            lag_histogram=self._lag, scheduled=self._scheduled,
            completed=sum(t.completed for t in self._tallies),
            completed_in_window=sum(t.in_window for t in self._tallies),
            errors_by_kind=errors, workers=len(self._workers),
            cpu_s=self._dispatcher_cpu_s + sum(t.cpu_s for t in self._tallies),
            window_s=self.seconds, wall_s=time.monotonic() - self.t_start)


def parse_header(text: str) -> Tuple[str, str]:
    """`"Name: value"` (or `Name:value`) as a (name, value) pair; ValueError otherwise."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip() or any(c in name for c in " \t\r\n"):
        raise ValueError(f"not a header (NAME:VALUE): {text!r}")
    if any(c in value for c in "\r\n"):
        raise ValueError(f"a header value may not contain a line break: {text!r}")
    return name.strip(), value.strip()


def normalise_headers(headers: Sequence[Tuple[str, str]]) -> Tuple[Tuple[str, str], ...]:
    """Headers checked (no line breaks, no spaces in names) as a tuple of pairs."""
    return tuple(parse_header(f"{name}:{value}") for name, value in headers)
