#!/usr/bin/env python3
"""Stability: attach five times in a row to each fixture; the primary finding must not change.

    python benchmarks/stability.py [--fixtures a,b,...] [--attaches 5] [--duration 4]

Each fixture workload (fixtures/workloads/, defaults) is started once and attached
`--attaches` times back to back with `diagnose attach PID --duration D --json`. The table
lists, per fixture, the primary of each attach, the top finding's score and predicted gain
(min-max), and whether every attach agreed. Progress to stderr, the table to stdout; the exit
status is 1 when any fixture's primary changed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import knob_sweep  # noqa: E402  (fresh workload process, READY, cleanup of its process group)

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = REPO / "fixtures" / "workloads"
DEFAULT_FIXTURES = ("pipeline", "locked_blas", "batching", "lock_contention", "preprocess_bound",
                    "gil_contention", "pool_wait", "logging_lock", "compute_bound",
                    "scheduler_overhead", "blas_fanout", "underloaded", "unbounded_backlog",
                    "process_pool")


def attaches(fixture: str, count: int, duration: float) -> list[dict]:
    cmd = [sys.executable, str(WORKLOADS / f"{fixture}.py"), "--seconds",
           str(count * (duration + 30) + 60)]
    workload = knob_sweep.Workload(cmd)
    results = []
    try:
        pid = workload.wait_ready()
        for k in range(count):
            knob_sweep.log(f"  {fixture}: attach {k + 1}/{count}")
            proc = subprocess.run([sys.executable, "-m", "diagnose", "attach", str(pid),
                                   "--duration", str(duration), "--json", "--quiet",
                                   "--output-dir", f"/tmp/diagnose-stability-{fixture}"],
                                  capture_output=True, text=True, timeout=duration + 120, cwd=REPO)
            if not proc.stdout.strip():
                results.append({"primary": "error", "score": None, "gain": None})
                continue
            report = json.loads(proc.stdout)
            top = report["findings"][0] if report["findings"] else {}
            results.append({"primary": report["verdict"]["primary"], "score": top.get("score"),
                            "gain": top.get("predicted_gain")})
    finally:
        workload.kill()
    return results


def _span(values) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "–"
    low, high = min(known), max(known)
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", default=",".join(DEFAULT_FIXTURES))
    parser.add_argument("--attaches", type=int, default=5)
    parser.add_argument("--duration", type=float, default=4.0)
    args = parser.parse_args(argv)
    rows, unstable = [], 0
    for fixture in [f.strip() for f in args.fixtures.split(",") if f.strip()]:
        results = attaches(fixture, args.attaches, args.duration)
        primaries = [r["primary"] for r in results]
        same = len(set(primaries)) == 1
        unstable += not same
        rows.append(f"| {fixture} | {', '.join(primaries)} | {_span([r['score'] for r in results])} | "
                    f"{_span([r['gain'] for r in results])} | {'yes' if same else '**no**'} |")
    print(f"| fixture | primary of each of {args.attaches} attaches | top score | predicted gain | "
          "stable |\n| --- | --- | ---: | ---: | --- |")
    print("\n".join(rows))
    return 1 if unstable else 0


if __name__ == "__main__":
    sys.exit(main())
