#!/usr/bin/env python3
"""Advice proven by experiment for a backend at capacity: one more copy of it, measured.

    python benchmarks/advice_backend.py [--rounds 3] [--seconds 6] [--duration 4]
                                        [--transport tcp|unix] [--python 3.12] [--json-out FILE]
                                        [--lock-around-call]

A front end (fixtures/workloads/remote_backend.py, 16 request threads, one connection each) calls
a feature backend started apart from it (feature_backend.py: one scoring thread, ~2 ms of pure
Python per request). The script

1. starts one backend and the front end, runs `diagnose attach FRONT_END --duration D --json`:
   the verdict, its first advice and the predicted gain (the finding's lever);
2. measures the front end's requests/s with one backend and with the advice applied, two
   backends sharing the port (`--reuse-port`; over a Unix socket a path cannot be shared: each
   copy listens on its own and the front end's threads spread over them), alternating over `--rounds` rounds on
   fresh processes, and prints the medians, the median of same-round ratios and the prediction
   side by side.

`--lock-around-call`: the front end holds one lock across each backend call (the lock's holder
waits on the backend at capacity). Measured side by side: the lock with one backend (before),
the call taken out of the lock with one backend (the lock alone removed), and the advice, out of
the lock with two backends.

The machine is shared and noisy: the ratio is the median of same-round ratios. Progress goes to
stderr, the markdown table to stdout.
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
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import knob_sweep  # noqa: E402  (the runner: fresh process, READY, COUNT, cleanup)

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = REPO / "fixtures" / "workloads"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def copies_of(where: list[str], count: int) -> list[list[str]]:
    """Where each of `count` backend copies listens: one TCP port shared (SO_REUSEPORT), or a
    Unix socket path each (a path cannot be shared: `PATH.1`, `PATH.2`...)."""
    if where[0] == "--port":
        return [[*where, "--reuse-port"]] * count
    return [["--unix", where[1] if n == 0 else f"{where[1]}.{n}"] for n in range(count)]


def front_end_where(where: list[str], count: int) -> list[str]:
    """The front end's address for `count` copies: the shared port, or every copy's path (its
    threads spread over them in turn)."""
    if where[0] == "--port":
        return where
    return ["--unix", ",".join(copy[1] for copy in copies_of(where, count))]


@contextmanager
def backends(python: str, count: int, where: list[str]):
    """`count` backend processes (copies_of), stopped on exit."""
    started = []
    try:
        for copy in copies_of(where, count):
            w = knob_sweep.Workload([python, str(WORKLOADS / "feature_backend.py"), "--seconds", "300",
                                     *copy])
            started.append(w)
            w.wait_ready()
        yield [w.pid for w in started]
    finally:
        for w in started:
            w.kill()


def front_end(python: str, where: list[str], lock: bool = False) -> knob_sweep.Workload:
    w = knob_sweep.Workload([python, str(WORKLOADS / "remote_backend.py"), "--seconds", "300", *where,
                             *(["--lock-around-call"] if lock else [])])
    w.wait_ready()
    return w


def diagnose(python: str, where: list[str], duration: float, out_dir: Path, lock: bool = False) -> dict:
    with backends(python, 1, where) as pids:
        front = front_end(python, where, lock)
        try:
            proc = subprocess.run([sys.executable, "-m", "diagnose", "attach", str(front.pid), "--duration",
                                   "%g" % duration, "--json", "-o", str(out_dir), "--quiet"],
                                  capture_output=True, text=True, timeout=duration + 120)
        finally:
            front.kill()
    report = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    verdict = report.get("verdict", {})
    found = next((f for f in report.get("findings", []) if f.get("id") == verdict.get("primary")), {})
    levers = found.get("levers") or []
    return {"backend_pids": pids, "verdict": verdict.get("primary"),
            "first_advice": (verdict.get("first_advice") or [""])[0],
            "predicted_gain": levers[0]["gain"] if levers else found.get("predicted_gain"),
            "graph_summary": (report.get("wait_graph") or {}).get("summary", ""),
            "exit": proc.returncode, "stderr": proc.stderr[-400:]}


def rate(python: str, where: list[str], copies: int, seconds: float, warmup: float,
         lock: bool = False) -> float | None:
    with backends(python, copies, where):
        front = front_end(python, front_end_where(where, copies), lock)
        try:
            time.sleep(warmup)
            a = front.count()
            time.sleep(seconds)
            b = front.count()
        finally:
            front.kill()
    if a is None or b is None or b[1] <= a[1]:
        return None
    return (b[0] - a[0]) / (b[1] - a[1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--warmup", type=float, default=1.5)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--transport", choices=("tcp", "unix"), default="tcp")
    parser.add_argument("--python", default=None, help="CPython X.Y for the services (cached venv)")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--lock-around-call", action="store_true",
                        help="the front end holds one lock across each backend call")
    args = parser.parse_args(argv)
    if args.lock_around_call:
        return _lock_around_call(args)
    python = knob_sweep.python_for(args.python) if args.python else sys.executable
    signal.signal(signal.SIGTERM, knob_sweep._kill_all)
    with tempfile.TemporaryDirectory(prefix="diagnose-backend-") as scratch:
        where = (["--unix", os.path.join(scratch, "backend.sock")] if args.transport == "unix"
                 else ["--port", str(_port())])
        knob_sweep.log("diagnosing the front end with one backend")
        row = diagnose(python, where, args.duration, Path(scratch))
        knob_sweep.log(f"verdict {row['verdict']}, predicted {row['predicted_gain']}")
        before, after, ratios = [], [], []
        for n in range(args.rounds):  # two copies: a shared port, or a Unix path each (copies_of)
            one = rate(python, where, 1, args.seconds, args.warmup)
            two = rate(python, where, 2, args.seconds, args.warmup)
            knob_sweep.log(f"round {n + 1}: 1 backend {one}, 2 backends {two}")
            if one and two:
                before.append(one)
                after.append(two)
                ratios.append(two / one)
    row.update(transport=args.transport, rounds=len(ratios),
               before_rps=statistics.median(before) if before else None,
               after_rps=statistics.median(after) if after else None,
               measured_gain=statistics.median(ratios) if ratios else None)
    print("| transport | verdict | first advice | predicted | 1 backend req/s | 2 backends req/s | measured |")
    print("| --- | --- | --- | --- | --- | --- | --- |")

    def f(x):
        return "-" if x is None else f"{x:.2f}"
    print(f"| {row['transport']} | {row['verdict']} | {row['first_advice'][:80]} | {f(row['predicted_gain'])}x | "
          f"{f(row['before_rps'])} | {f(row['after_rps'])} | {f(row['measured_gain'])}x ({len(ratios)} rounds) |")
    print(f"\nchain: {row['graph_summary']}")
    if args.json_out:
        args.json_out.write_text(json.dumps(row, indent=1))
    return 0


def _lock_around_call(args) -> int:
    """The lock's holder waits on a backend at capacity: before (the lock, one backend), the
    lock alone removed, and the advice (no lock, two backends), alternating per round."""
    python = knob_sweep.python_for(args.python) if args.python else sys.executable
    signal.signal(signal.SIGTERM, knob_sweep._kill_all)
    where = ["--port", str(_port())]
    with tempfile.TemporaryDirectory(prefix="diagnose-backend-") as scratch:
        knob_sweep.log("diagnosing the front end (a lock across each call) with one backend")
        row = diagnose(python, where, args.duration, Path(scratch), lock=True)
    knob_sweep.log(f"verdict {row['verdict']}, predicted {row['predicted_gain']}")
    runs: dict[str, list[float]] = {"before": [], "unlocked": [], "advice": []}
    ratios: dict[str, list[float]] = {"unlocked": [], "advice": []}
    for n in range(args.rounds):
        before = rate(python, where, 1, args.seconds, args.warmup, lock=True)
        unlocked = rate(python, where, 1, args.seconds, args.warmup, lock=False)
        advice = rate(python, where, 2, args.seconds, args.warmup, lock=False)
        knob_sweep.log(f"round {n + 1}: lock+1 {before}, no lock+1 {unlocked}, no lock+2 {advice}")
        if before and unlocked and advice:
            for key, value in (("before", before), ("unlocked", unlocked), ("advice", advice)):
                runs[key].append(value)
            ratios["unlocked"].append(unlocked / before)
            ratios["advice"].append(advice / before)

    def med(xs: list[float]) -> str:
        return f"{statistics.median(xs):.2f}" if xs else "-"
    print("| verdict | first advice | predicted | lock, 1 backend req/s | no lock, 1 backend | "
          "no lock, 2 backends | lock alone removed | advice applied |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    print(f"| {row['verdict']} | {row['first_advice'][:70]} | {row['predicted_gain']}x | {med(runs['before'])} | "
          f"{med(runs['unlocked'])} | {med(runs['advice'])} | {med(ratios['unlocked'])}x | "
          f"{med(ratios['advice'])}x ({len(ratios['advice'])} rounds) |")
    if args.json_out:
        args.json_out.write_text(json.dumps({**row, "runs": runs, "ratios": ratios}, indent=1))
    return 0


if __name__ == "__main__":
    with ExitStack():
        sys.exit(main())
