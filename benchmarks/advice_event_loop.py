#!/usr/bin/env python3
"""Does the blocked-event-loop advice pay off? Throughput before and after applying it.

    python benchmarks/advice_event_loop.py [--seconds 10] [--warmup 2] [--rounds 3]
                                           [--connections 8] [--fixtures asgi_inline,asgi_blocking]
                                           [--wait-quiet SECONDS] [--python 3.12] [--json FILE]

For each fixture in fixtures/servers/ that blocks its event loop (`asgi_inline`: the numpy model
run inline in `async def predict`; `asgi_blocking`: a synchronous client's `time.sleep(0.02)`
inline), starts a fresh single-process `uvicorn APP --host 127.0.0.1` (uvicorn's default loop:
uvloop when installed) and measures requests/s with wrk (`-t2 -cC -dSs --latency`, after a
`--warmup` second run that is discarded):

* before: the file as written;
* after: the same file with `DIAGNOSE_FIXTURE_OFFLOAD=1`, i.e. the advice applied
  (`await run_in_threadpool(...)` around the blocking call).

The async-wait fixtures (`--fixtures async_semaphore,async_lock,async_queue,async_batcher,
aiohttp_semaphore,async_capacity`, not run by default): `asgi_async_wait` / `aiohttp_semaphore`, whose requests
wait on an in-process asyncio primitive around a 20 ms awaited backend call, before with 2
permits (a lock; 2 queue consumers; batches of 2), after with 32 (the `async_wait` advice), at 32
connections; `asgi_capacity` (`async_capacity`), a `def` endpoint blocked 50 ms on a backend,
with AnyIO's thread limiter at 4 tokens, then 40, at 40 connections.

Before and after alternate (before, after, before, after, …) for `--rounds` rounds, each run on
a freshly started server. Prints a markdown table of medians (and the ratio after / before), then
one row per run with the latency percentiles, the server's CPU use (cores, from its CPU seconds
over the window), the CPU used meanwhile by everything else on the machine ("other jobs'
cores": machine busy time minus the server, wrk and this script; a warning is printed when it
exceeds 0.25 cores, since a CPU-bound variant's throughput depends on the cores left over) and
the CPU pressure over the window (/proc/pressure/cpu "some": the share of time some task waited
for a CPU, which includes the server and wrk competing with each other).

On a shared machine, `--wait-quiet S` waits (up to S seconds) before each run until the CPU
pressure averaged over the last 10 s is below 10 %.

`--python X.Y` runs the servers on that CPython's cached venv of the integration tests
(tests/integration/pythons.py: numpy, gunicorn, uvicorn, FastAPI, and aiohttp when an aiohttp
fixture is asked for; no uvloop there, so uvicorn runs the stdlib asyncio loop), or on the
interpreter at a path; without it, on this interpreter (whose environment has uvloop).

Uses the harness of the integration tests (tests/integration/servers.py); falls back to its
Python load client when wrk is not on PATH.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from tests.integration.servers import (free_port, load, start_server,  # noqa: E402
                                       uvicorn_app)

sys.path.insert(0, str(HERE))
import knob_sweep  # noqa: E402  (python_for: the per-version venvs)

@dataclass(frozen=True)
class Variant:
    """A fixture of fixtures/servers/ as measured: its server, the environment before and after
    the advice, the advice in words and the connections it is measured at by default."""

    app: str
    advice: str
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)
    connections: int = 8
    aiohttp: bool = False  # `python APP.py --port PORT` (aiohttp), not uvicorn


OFFLOAD_OFF, OFFLOAD_ON = {"DIAGNOSE_FIXTURE_OFFLOAD": None}, {"DIAGNOSE_FIXTURE_OFFLOAD": "1"}
# Requests parked on an asyncio primitive: 2 permits (or one lock) against 32 connections.
PERMITS_2 = {"DIAGNOSE_FIXTURE_PERMITS": "2"}
PERMITS_32 = {"DIAGNOSE_FIXTURE_PERMITS": "32"}

FIXTURES = {
    "asgi_inline": Variant("asgi_inline", "`await run_in_threadpool(MODEL.forward, x)`",
                           OFFLOAD_OFF, OFFLOAD_ON),
    "asgi_blocking": Variant("asgi_blocking", "`await run_in_threadpool(fetch_features_sync, user_id)`",
                             OFFLOAD_OFF, OFFLOAD_ON),
    "async_semaphore": Variant("asgi_async_wait", "`asyncio.Semaphore` permits 2 -> 32",
                               {"DIAGNOSE_FIXTURE_WAIT": "semaphore", **PERMITS_2},
                               {"DIAGNOSE_FIXTURE_WAIT": "semaphore", **PERMITS_32}, 32),
    "async_lock": Variant("asgi_async_wait", "`asyncio.Lock` -> `asyncio.Semaphore(32)`",
                          {"DIAGNOSE_FIXTURE_WAIT": "lock", **PERMITS_2},
                          {"DIAGNOSE_FIXTURE_WAIT": "semaphore", **PERMITS_32}, 32),
    "async_queue": Variant("asgi_async_wait", "queue consumers (and its bound) 2 -> 32",
                           {"DIAGNOSE_FIXTURE_WAIT": "queue", **PERMITS_2},
                           {"DIAGNOSE_FIXTURE_WAIT": "queue", **PERMITS_32}, 32),
    "async_batcher": Variant("asgi_async_wait", "batch size 2 -> 32",
                             {"DIAGNOSE_FIXTURE_WAIT": "batcher", **PERMITS_2},
                             {"DIAGNOSE_FIXTURE_WAIT": "batcher", **PERMITS_32}, 32),
    "aiohttp_semaphore": Variant("aiohttp_semaphore", "`asyncio.Semaphore` permits 2 -> 32",
                                 PERMITS_2, PERMITS_32, 32, aiohttp=True),
    # FastAPI `def` endpoint on a 50 ms blocking backend call: AnyIO's thread limiter 4 -> 40.
    "async_capacity": Variant("asgi_capacity", "thread limiter `total_tokens` 4 -> 40",
                              {"DIAGNOSE_FIXTURE_CAPACITY": "4"},
                              {"DIAGNOSE_FIXTURE_CAPACITY": "40"}, 40),
}
DEFAULT_FIXTURES = ("asgi_inline", "asgi_blocking")


BUSY_OTHER_CORES = 0.25  # other jobs' CPU use above which a run is flagged


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cpu_pressure_us() -> int | None:
    """Cumulative microseconds some task waited for a CPU (PSI), or None without PSI."""
    try:
        for line in Path("/proc/pressure/cpu").read_text().splitlines():
            if line.startswith("some "):
                return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_pressure_avg10() -> float | None:
    """Share of the last 10 s in which some task waited for a CPU (0-1), or None without PSI."""
    try:
        for line in Path("/proc/pressure/cpu").read_text().splitlines():
            if line.startswith("some "):
                return float(line.split("avg10=", 1)[1].split()[0]) / 100
    except (OSError, ValueError, IndexError):
        pass
    return None


def wait_quiet(timeout: float, threshold: float = 0.10) -> float | None:
    """Waits until cpu_pressure_avg10() < threshold or `timeout` passes; returns the last value."""
    deadline = time.monotonic() + timeout
    value = cpu_pressure_avg10()
    while value is not None and value >= threshold and time.monotonic() < deadline:
        time.sleep(1.0)
        value = cpu_pressure_avg10()
    return value


def tree_cpu_seconds(pid: int) -> float:
    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.Error:
        return float("nan")
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def machine_busy_seconds() -> float:
    """CPU seconds all CPUs spent busy since boot (user, nice, system, irq, softirq, steal)."""
    t = psutil.cpu_times()
    return sum(getattr(t, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq",
                                                   "steal"))


def self_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def children_cpu_seconds() -> float:
    """CPU seconds of this process's reaped children (wrk, once its run is over)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def started_server(fixture: str, after: bool, python: str = sys.executable):
    """The fixture's server as a `start_server` context, before or after the advice, on
    `python` (a venv's interpreter; uvicorn runs as `python -m uvicorn` there)."""
    variant = FIXTURES[fixture]
    port = free_port()
    env = dict(variant.after if after else variant.before)
    if variant.aiohttp:
        argv = [python, f"{variant.app}.py", "--port", str(port)]
        return start_server(argv, port, env=env, workers=None, loaded_marker=None)
    own = python == sys.executable  # this environment's uvicorn script, as before
    return start_server(uvicorn_app(variant.app, port, python=None if own else python), port,
                        env=env, loaded_marker=None)


def measure(fixture: str, after: bool, seconds: int, warmup: int, connections: int,
            python: str = sys.executable) -> dict:
    with started_server(fixture, after, python) as server:
        url = server.url("/predict")
        if warmup > 0:
            with load(url, warmup, connections):
                pass
        cpu0, psi0, t0 = tree_cpu_seconds(server.pid), cpu_pressure_us(), time.monotonic()
        busy0, kids0, self0 = machine_busy_seconds(), children_cpu_seconds(), self_cpu_seconds()
        with load(url, seconds, connections) as run:
            pass
        cpu1, psi1, t1 = tree_cpu_seconds(server.pid), cpu_pressure_us(), time.monotonic()
        busy1, kids1, self1 = machine_busy_seconds(), children_cpu_seconds(), self_cpu_seconds()
        ready = server.ready_seconds
    result = run.result
    window = t1 - t0
    return {
        "fixture": fixture, "after": after, "tool": result.tool,
        "requests": result.requests, "requests_per_second": result.requests_per_second,
        "p50_ms": result.latency_p50_ms, "p99_ms": result.latency_p99_ms,
        "errors": result.errors, "server_cores": (cpu1 - cpu0) / window if window else None,
        # everything else that ran on the machine meanwhile (not the server, wrk or this script)
        "other_cores": max(0.0, (busy1 - busy0) - (cpu1 - cpu0) - (kids1 - kids0)
                           - (self1 - self0)) / window if window else None,
        "cpu_pressure": ((psi1 - psi0) / 1e6 / window) if psi0 is not None and psi1 is not None
        else None,
        "ready_seconds": ready,
    }


def fmt(value, spec: str = ".1f", missing: str = "–") -> str:
    return missing if value is None else format(value, spec)


def paired_runs(fixture: str, rounds: int, seconds: int, warmup: int, connections: int | None,
                quiet: float = 0.0, python: str = sys.executable) -> list[dict]:
    """Before and after alternating for `rounds` rounds, each on a fresh server."""
    runs = []
    for round_no in range(1, rounds + 1):
        for after in (False, True):
            if quiet > 0:
                wait_quiet(quiet)
            conns = connections or FIXTURES[fixture].connections
            row = measure(fixture, after, seconds, warmup, conns, python)
            row["connections"] = conns
            row["round"] = round_no
            runs.append(row)
            log(f"{fixture} round {round_no} {'after ' if after else 'before'}: "
                f"{row['requests_per_second']:.1f} req/s, p50 {fmt(row['p50_ms'])} ms, "
                f"server {fmt(row['server_cores'], '.2f')} cores, "
                f"others {fmt(row['other_cores'], '.2f')} cores, "
                f"cpu pressure {fmt(row['cpu_pressure'], '.2f')}")
    return runs


def medians(runs: list[dict]) -> tuple[float, float, float]:
    """(median req/s before, after, their ratio) of one fixture's runs."""
    before = statistics.median(r["requests_per_second"] for r in runs if not r["after"])
    after = statistics.median(r["requests_per_second"] for r in runs if r["after"])
    return before, after, (after / before if before else float("inf"))


def python_version(python: str) -> str:
    """"3.12.1": the version of the interpreter at `python`."""
    if python == sys.executable:
        return platform.python_version()
    return subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True, timeout=60).stdout.strip()


def server_python(spec: str | None, fixtures: list[str]) -> str:
    """`--python SPEC` for these fixtures: the venv with aiohttp only when one needs it."""
    needs = "aiohttp" if any(FIXTURES[f].aiohttp for f in fixtures) else "servers"
    return knob_sweep.python_for(spec, needs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10, help="measured seconds per run")
    parser.add_argument("--warmup", type=int, default=2, help="discarded seconds before each run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=None,
                        help="load connections (default: the fixture's, 8 or 32)")
    parser.add_argument("--fixtures", default=",".join(DEFAULT_FIXTURES),
                        help="comma-separated, from: " + ", ".join(FIXTURES))
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                        help="before each run, wait up to this long for CPU pressure < 10%%")
    parser.add_argument("--python", default=None, metavar="X.Y|PATH",
                        help="run the servers on this CPython's venv (default: this interpreter)")
    parser.add_argument("--json", type=Path, help="also write every run to this file")
    args = parser.parse_args(argv)
    fixtures = [f.strip() for f in args.fixtures.split(",") if f.strip()]
    unknown = [f for f in fixtures if f not in FIXTURES]
    if unknown or args.seconds < 1 or args.rounds < 1 or (args.connections or 1) < 1:
        parser.error(f"unknown fixtures {unknown}" if unknown else "values must be positive")

    python = server_python(args.python, fixtures)
    version = python_version(python)
    runs = []
    for fixture in fixtures:
        runs += paired_runs(fixture, args.rounds, args.seconds, args.warmup, args.connections,
                            args.wait_quiet, python)

    print(f"Single-process servers on 127.0.0.1 (uvicorn, or aiohttp where named), "
          f"connections per fixture in the runs below, "
          f"{args.seconds} s per run after {args.warmup} s warm-up, {args.rounds} rounds "
          f"(before/after alternating), load by {runs[0]['tool']}; "
          f"{psutil.cpu_count()} CPUs, servers on Python {version}.")
    print()
    print("| fixture | advice applied | req/s before (median) | req/s after (median) | ratio |")
    print("|---|---|---:|---:|---:|")
    for fixture in fixtures:
        before, after, ratio = medians([r for r in runs if r["fixture"] == fixture])
        print(f"| `{fixture}` | {FIXTURES[fixture].advice} | {before:.1f} | {after:.1f} | "
              f"{ratio:.2f}× |")
    busy = [r for r in runs if (r["other_cores"] or 0.0) > BUSY_OTHER_CORES]
    if busy:
        print()
        print(f"**Warning**: in {len(busy)} of {len(runs)} runs other jobs used more than "
              f"{BUSY_OTHER_CORES} of the {psutil.cpu_count()} CPUs (column \"other jobs' "
              f"cores\" below); throughput of CPU-bound variants depends on the cores left over.")
    print()
    print("| fixture | round | variant | connections | req/s | p50 ms | p99 ms | errors "
          "| server cores | other jobs' cores | cpu pressure |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        print(f"| `{r['fixture']}` | {r['round']} | {'after' if r['after'] else 'before'} | "
              f"{r['connections']} | "
              f"{r['requests_per_second']:.1f} | {fmt(r['p50_ms'])} | {fmt(r['p99_ms'])} | "
              f"{r['errors']} | {fmt(r['server_cores'], '.2f')} | "
              f"{fmt(r['other_cores'], '.2f')} | "
              f"{fmt(r['cpu_pressure'], '.2f')} |")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
