#!/usr/bin/env python3
"""A service's first advice, predicted beside measured, round after round.

    python benchmarks/services/calibrate_service.py [--service locked_model] [--python 3.12]
                                                    [--rounds 3] [--duration 6] [--seconds 6]

Services (each prints READY pid and total_rps; the fix is an environment variable):
  locked_model   a Lock around a forward pass over OpenBLAS; lock_contention's
                 OPENBLAS_NUM_THREADS=1
  text_features  trigram counting in a Python loop on 6 threads; gil_contention's
                 vectorised loop (VECTORIZED=1)
  embedding_rerank  cosine re-ranking of candidate embeddings in Python loops on 6 threads;
                 gil_contention's vectorised loop (VECTORIZED=1), held out: not used to fit
                 vectorise_gain.SPEEDUP

Each round, on fresh processes: one `diagnose attach` of the service at its defaults (the
verdict, the first advice, the figure the check predicts), then one paired run, defaults and
then the fix (requests/s each, the service's own count). Prints a row per round and the median
ratio measured / predicted. Progress to stderr, the markdown to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent))
import knob_sweep  # noqa: E402  (python_for, log)



@dataclass(frozen=True)
class Service:
    script: Path
    check: str  # the finding whose predicted gain the fix is measured against
    fix: dict[str, str]


SERVICES = {
    "locked_model": Service(HERE / "locked_model.py", "lock_contention", {"OPENBLAS_NUM_THREADS": "1"}),
    "text_features": Service(HERE / "text_features.py", "gil_contention", {"VECTORIZED": "1"}),
    "embedding_rerank": Service(HERE / "embedding_rerank.py", "gil_contention", {"VECTORIZED": "1"}),
}


def _start(service: Service, python: str, seconds: float,
           env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([python, str(service.script), str(seconds)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, **env})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise SystemExit(f"the service did not start: {line!r}")
    return proc, int(line.split()[1])


def _rps(proc: subprocess.Popen) -> float:
    out, _ = proc.communicate(timeout=120)
    return float(next(line.split()[1] for line in out.splitlines() if line.startswith("total_rps")))


def predicted(service: Service, python: str, duration: float) -> tuple[str, float | None, str]:
    """(verdict, the check's finding's predicted gain, its first advice) of one attach."""
    proc, pid = _start(service, python, duration + 15, {})  # killed once the attach ends
    try:
        time.sleep(1.5)  # past numpy's import and the threads' start
        with tempfile.TemporaryDirectory() as out:
            done = subprocess.run([sys.executable, "-m", "diagnose", "attach", str(pid), "--duration",
                                   str(duration), "--json", "--quiet", "--output-dir", out],
                                  capture_output=True, text=True, timeout=duration + 60)
            if done.returncode != 0:
                raise SystemExit(f"diagnose failed: {done.stderr.strip()[-300:]}")
            report = json.loads(done.stdout)
    finally:
        proc.kill()
        proc.wait()
    found = next((f for f in report["findings"] if f["id"] == service.check), None)
    verdict = report["verdict"]["primary"] + ("+" + report["verdict"]["co_primary"]
                                              if report["verdict"].get("co_primary") else "")
    return (verdict, found["predicted_gain"] if found else None,
            (found["advice"][0][:60] if found and found["advice"] else ""))


def measured(service: Service, python: str, seconds: float) -> tuple[float, float]:
    """(requests/s at the defaults, with the fix), one run each, one after the other."""
    before = _rps(_start(service, python, seconds, {})[0])
    after = _rps(_start(service, python, seconds, service.fix)[0])
    return before, after


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service", choices=sorted(SERVICES), default="locked_model")
    parser.add_argument("--python", default="", help="3.12, a path, or this interpreter")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=6.0, help="diagnose's window, s")
    parser.add_argument("--seconds", type=float, default=6.0, help="each measured run, s")
    args = parser.parse_args(argv)
    python = knob_sweep.python_for(args.python)
    service = SERVICES[args.service]
    rows = []
    for i in range(args.rounds):
        knob_sweep.log(f"round {i + 1}/{args.rounds}: attach")
        verdict, gain, advice = predicted(service, python, args.duration)
        knob_sweep.log(f"round {i + 1}/{args.rounds}: paired runs")
        before, after = measured(service, python, args.seconds)
        rows.append((verdict, gain, advice, before, after))
    print("| round | verdict | first advice | predicted | req/s before | after | measured | measured / predicted |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    ratios = []
    for i, (verdict, gain, advice, before, after) in enumerate(rows, 1):
        gained = after / before if before else float("nan")
        ratio = gained / gain if gain else None
        if ratio is not None:
            ratios.append(ratio)
        print(f"| {i} | {verdict} | {advice} | {gain if gain is not None else '—'} | {before:.0f} | "
              f"{after:.0f} | {gained:.2f}x | {f'{ratio:.2f}' if ratio is not None else '—'} |")
    if ratios:
        print(f"\nmedian measured / predicted: {statistics.median(ratios):.2f} "
              f"(range {min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
