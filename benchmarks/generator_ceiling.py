#!/usr/bin/env python3
"""The load generator's ceiling on this machine: how many requests per second `diagnose sweep`
can drive at all, and what each request costs the generator in CPU (the cores it takes from the
service it loads: on a 2-core machine they share the same cores).

    python benchmarks/generator_ceiling.py [--seconds 5] [--connections 1,8,64]
                                           [--tools wrk,python] [--server-procs 1] [--json FILE]
                                           [--rates 250,500,1000,2000,4000] [--lag-ms 1]

The endpoint is the cheapest one Python can serve: an asyncio protocol (uvloop when installed)
that answers every request on a keep-alive connection with a fixed 2-byte body, no framework,
in `--server-procs` processes sharing the port (SO_REUSEPORT). Against it, each tool of
diagnose/load/loadgen.py runs at each connection count for `--seconds` after a 1 s warm-up. A row
gives the requests per second, the generator's CPU (cores, from its own accounting), the
server's CPU, the machine's busy cores and what other processes used of them (near 0: the
figures are this machine's, not a neighbour's), and the generator's CPU per 1,000 req/s.

The open model (the Python open-loop client, `--rates`; empty to skip) is measured by the rate
it *holds*: at each offered rate, the requests it completed per second, its schedule lag (p99
and max of dispatch time minus intended send time, its own lateness), the latency p99 from
intended send time, requests dropped and its CPU. Its ceiling is the highest rate held with
schedule lag p99 under `--lag-ms` (default 1 ms), nothing dropped and at least 95% of the rate
completed: above it, latencies include the generator's own lateness. It runs on one core at most
(its threads share one GIL).

The highest rate of a tool is its ceiling here, as a lower bound: when the machine's cores are
all busy the server and the generator limit each other. Pass it to `diagnose sweep --ceiling`:
a step within 80% of it is called generator-limited. Progress goes to stderr, the markdown table
to stdout.
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from diagnose.load import loadgen  # noqa: E402
from diagnose.load.sweep_steps import CpuMeter  # noqa: E402

SERVER = r"""
import asyncio, os, socket, sys
try:
    import uvloop
    uvloop.install()
except ImportError:
    pass
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"

class Proto(asyncio.Protocol):
    def connection_made(self, transport):
        self.t, self.buf = transport, b""
    def data_received(self, data):
        self.buf += data
        n = self.buf.count(b"\r\n\r\n")
        if n:
            self.buf = self.buf[self.buf.rfind(b"\r\n\r\n") + 4:]
            self.t.write(RESPONSE * n)

async def main(port):
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    server = await asyncio.get_running_loop().create_server(Proto, sock=sock, backlog=1024)
    print("READY", flush=True)
    await server.serve_forever()

asyncio.run(main(int(sys.argv[1])))
"""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_servers(port: int, count: int) -> list[subprocess.Popen]:
    procs = []
    for _ in range(count):
        proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)],
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
        procs.append(proc)
        if proc.stdout.readline().strip() != "READY":
            raise RuntimeError("the trivial server did not start")
    return procs


def one_row(url: str, tool: str, connections: int, seconds: int, meter: CpuMeter) -> dict:
    loadgen.measure(url, 1, connections, tool=tool)  # warm-up, discarded
    before = meter.read()
    result = loadgen.measure(url, seconds, connections, tool=tool)
    after = meter.read()
    wall = after.at - before.at
    busy = None
    if before.machine_idle_s is not None and after.machine_idle_s is not None:
        busy = meter.cores - (after.machine_idle_s - before.machine_idle_s) / wall
    gen = result.generator_cores
    return {"tool": tool, "connections": connections, "rps": result.requests_per_second,
            "p99_ms": result.latency_p99_ms, "errors": result.errors,
            "generator_cores": gen,
            "server_cores": (after.service_cpu_s - before.service_cpu_s) / wall,
            "machine_busy_cores": busy,
            "other_cores": (max(0.0, busy - (gen or 0) - (after.service_cpu_s
                                                     - before.service_cpu_s) / wall)
                            if busy is not None else None),
            "generator_cores_per_1k_rps": (gen / result.requests_per_second * 1000
                                           if gen and result.requests_per_second else None)}


def open_row(url: str, rate: float, seconds: int, lag_limit_ms: float, meter: CpuMeter) -> dict:
    loadgen.measure(url, 1, rate=rate)  # warm-up, discarded
    before = meter.read()
    result = loadgen.measure(url, seconds, rate=rate)
    after = meter.read()
    wall = after.at - before.at
    dropped = result.errors_by_kind.get("dropped", 0)
    held = (result.schedule_lag_ms is not None and result.schedule_lag_ms < lag_limit_ms
            and dropped == 0 and result.errors == 0
            and result.requests_per_second >= 0.95 * rate)
    return {"rate": rate, "rps": result.requests_per_second, "lag_p99_ms": result.schedule_lag_ms,
            "lag_max_ms": result.schedule_lag_max_ms, "p99_ms": result.latency_p99_ms,
            "dropped": dropped, "errors": result.errors, "workers": result.connections,
            "generator_cores": result.generator_cores,
            "server_cores": (after.service_cpu_s - before.service_cpu_s) / wall, "held": held}


def open_markdown(rows: list[dict], lag_limit_ms: float) -> str:
    out = [f"| offered req/s | completed req/s | schedule lag p99 ms | lag max ms | "
           f"p99 ms (from intended) | dropped | workers | generator cores | server cores | "
           f"held (lag < {lag_limit_ms:g} ms) |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |"]
    for r in rows:
        out.append(f"| {r['rate']:,.0f} | {_f(r['rps'], 0)} | {_f(r['lag_p99_ms'], 3)} | "
                   f"{_f(r['lag_max_ms'], 1)} | {_f(r['p99_ms'])} | {r['dropped']:,} | "
                   f"{r['workers']} | {_f(r['generator_cores'])} | {_f(r['server_cores'])} | "
                   f"{'yes' if r['held'] else 'no'} |")
    return "\n".join(out)


def _f(x, digits=2):
    return "–" if x is None else f"{x:,.{digits}f}"


def markdown(rows: list[dict], cores: int) -> str:
    out = [f"| tool | connections | req/s | p99 ms | generator cores | server cores | "
           f"machine busy (of {cores}) | other processes (cores) | generator cores per 1k req/s |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        out.append(f"| {r['tool']} | {r['connections']} | {_f(r['rps'], 0)} | {_f(r['p99_ms'])} "
                   f"| {_f(r['generator_cores'])} | {_f(r['server_cores'])} | "
                   f"{_f(r['machine_busy_cores'])} | {_f(r['other_cores'])} | "
                   f"{_f(r['generator_cores_per_1k_rps'], 3)} |")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", default="1,8,64")
    parser.add_argument("--tools", default="wrk,python")
    parser.add_argument("--server-procs", type=int, default=1)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--rates", default="250,500,1000,2000,4000",
                        help="open-model rates to try (req/s); empty to skip")
    parser.add_argument("--lag-ms", type=float, default=1.0,
                        help="the schedule lag p99 under which a rate counts as held")
    args = parser.parse_args(argv)
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    servers = start_servers(port, args.server_procs)
    rows, open_rows = [], []
    try:
        meter = CpuMeter([p.pid for p in servers])
        for tool in [t.strip() for t in args.tools.split(",") if t.strip()]:
            try:
                loadgen.resolve_tool(tool)
            except loadgen.LoadError:
                log("wrk is not on PATH: skipped")
                continue
            for c in [int(x) for x in args.connections.split(",")]:
                rows.append(one_row(url, tool, c, args.seconds, meter))
                log(f"{tool} c={c}: {rows[-1]['rps']:,.0f} req/s, generator "
                    f"{_f(rows[-1]['generator_cores'])} cores")
        for rate in [float(x) for x in args.rates.split(",") if x.strip()]:
            open_rows.append(open_row(url, rate, args.seconds, args.lag_ms, meter))
            r = open_rows[-1]
            log(f"open {rate:,.0f} req/s: {r['rps']:,.0f} completed/s, lag p99 "
                f"{_f(r['lag_p99_ms'], 3)} ms, dropped {r['dropped']}")
    finally:
        for proc in servers:
            loadgen.killpg(proc.pid, 9)
            proc.wait()
    cores = CpuMeter().cores
    print(f"`python benchmarks/generator_ceiling.py --seconds {args.seconds} --connections "
          f"{args.connections} --tools {args.tools} --server-procs {args.server_procs} "
          f"--rates {args.rates} --lag-ms {args.lag_ms:g}` "
          f"({cores} cores, {platform.python_implementation()} {platform.python_version()})\n")
    print(markdown(rows, cores))
    for tool in {r["tool"] for r in rows}:
        best = max((r for r in rows if r["tool"] == tool), key=lambda r: r["rps"])
        print(f"\n{tool}: ceiling {best['rps']:,.0f} req/s at {best['connections']} connections")
    if open_rows:
        print("\nOpen model (python open-loop client):\n")
        print(open_markdown(open_rows, args.lag_ms))
        held = [r for r in open_rows if r["held"]]
        print(f"\nopen model: ceiling {max(r['rate'] for r in held):,.0f} req/s held with "
              f"schedule lag p99 < {args.lag_ms:g} ms" if held else
              f"\nopen model: no rate tried was held with schedule lag p99 < {args.lag_ms:g} ms")
    if args.json:
        args.json.write_text(json.dumps({"cores": cores, "rows": rows, "open_rows": open_rows},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
