#!/usr/bin/env python3
"""Does the verdict's first advice pay off on the gRPC server? Requests/s before and after.

    python benchmarks/advice_grpc.py [--rounds 3] [--seconds 8] [--duration 6]
                                     [--concurrency 16] [--json FILE]

fixtures/servers/grpc_locked.py is a real grpcio server (handlers under one global model lock,
a Python exporter child beside it), so it does not fit advice_gain.py's self-loading workloads.
This script:

1. starts it with its defaults under the gRPC load client (fixtures/servers/grpc_load.py),
   runs `diagnose attach SERVER_PID --duration D --json` and reads the verdict, its predicted
   gain and the first advice's knob (`evidence.fix`);
2. translates the knob into the server's flag (`model_instances` = N -> `--instances N`);
3. measures requests/s before (defaults), with the advice applied, and with the lock removed
   (`--instances 0`), alternating on fresh servers for `--rounds` rounds, and prints the
   medians and the median of same-round ratios beside the prediction.

Loopback only; every server and client is bounded in time and killed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
SERVERS = REPO / "fixtures" / "servers"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """fixtures/servers/grpc_locked.py on `python` (default: this interpreter; another one needs
    grpcio and numpy, e.g. tests/integration/pythons.py's `venv_with_grpc`), ready to serve.
    The readiness check connects from this interpreter, which has grpcio."""

    def __init__(self, args: list[str], python: str = sys.executable):
        import grpc

        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("DIAGNOSE_FIXTURE_")}
        self.proc = subprocess.Popen([python, str(SERVERS / "grpc_locked.py"), "--port",
                                      str(self.port), *args], env=env, start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=60)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            members = [c.pid for c in psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.Error:
            members = []
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        for pid in [self.proc.pid, *members]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(5)


def load(port: int, seconds: float, concurrency: int,
         python: str = sys.executable) -> subprocess.Popen:
    """The gRPC load client (fixtures/servers/grpc_load.py) on `python`."""
    return subprocess.Popen([python, str(SERVERS / "grpc_load.py"), "--target",
                             f"127.0.0.1:{port}", "--seconds", str(seconds), "--concurrency",
                             str(concurrency)], stdout=subprocess.PIPE, text=True)


def finish(client: subprocess.Popen, seconds: float) -> dict:
    try:
        out, _ = client.communicate(timeout=seconds + 60)
    finally:
        if client.poll() is None:
            client.kill()
    return json.loads(out.strip().splitlines()[-1])


def diagnose(args) -> dict:
    with Server([]) as server, tempfile.TemporaryDirectory() as out:
        client = load(server.port, args.duration + 10, args.concurrency)
        time.sleep(2)
        proc = subprocess.run([sys.executable, "-m", "diagnose", "attach", str(server.proc.pid),
                               "--duration", str(args.duration), "--json", "--quiet",
                               "--output-dir", out], capture_output=True, text=True, timeout=180,
                              cwd=REPO)
        finish(client, args.duration + 10)
    report = json.loads(proc.stdout)
    first = report["findings"][0]
    return {"verdict": report["verdict"]["primary"], "predicted_gain": first.get("predicted_gain"),
            "fix": first["evidence"].get("fix"),
            "roles": {str(p["pid"]): p["role"] for p in report["processes"]}}


def knob_args(fix: dict | None) -> list[str] | None:
    if fix and fix.get("knob") == "model_instances":
        return ["--instances", str(fix["value"])]
    return None


def throughput(flags: list[str], args) -> float:
    with Server(flags) as server:
        client = load(server.port, args.warmup + args.seconds, args.concurrency)
        result = finish(client, args.warmup + args.seconds)
    return float(result["requests_per_second"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=0.0,
                        help="seconds of load before the window (counted: the client reports one rate)")
    parser.add_argument("--duration", type=float, default=6.0, help="diagnose attach window")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    found = diagnose(args)
    print(f"verdict {found['verdict']}, predicted gain {found['predicted_gain']}, fix {found['fix']}, "
          f"roles {found['roles']}", file=sys.stderr)
    configs = {"before": [], "advice": knob_args(found["fix"]), "no lock": ["--instances", "0"]}
    configs = {name: flags for name, flags in configs.items() if flags is not None}
    runs: dict[str, list[float]] = {name: [] for name in configs}
    for round_ in range(args.rounds):
        for name, flags in configs.items():
            runs[name].append(throughput(flags, args))
            print(f"round {round_ + 1} {name} {flags}: {runs[name][-1]:.1f} req/s", file=sys.stderr)
    print("| config | flags | req/s (median) | ratio to before (median of same-round ratios) |")
    print("| --- | --- | --- | --- |")
    for name, flags in configs.items():
        ratio = statistics.median(a / b for a, b in zip(runs[name], runs["before"]) if b)
        print(f"| {name} | `{' '.join(flags) or 'defaults'}` | {statistics.median(runs[name]):.1f} | "
              f"{ratio:.2f}x |")
    print(f"\npredicted gain of the first advice: {found['predicted_gain']} ({found['verdict']})")
    if args.json:
        args.json.write_text(json.dumps({"diagnosis": found, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
