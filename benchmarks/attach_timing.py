"""The whole `diagnose attach` command against the window it was asked for, timed from outside.

    python benchmarks/attach_timing.py PID [--attaches 3] [--duration 5] [-- attach options]

Runs `python -m diagnose attach PID --duration D --json` as a user would, `--attaches` times one
after another, and prints per attach, from the command's start (wall clock) and its JSON report
(`sampling.started_at`, `sampling.duration_s`):

- start-up: from the command's start to the window's start (imports, probes, sampling plan);
- window: the window as sampled;
- after: from the window's end to the command's exit (the recorders' exit, the analysis, the
  report written, the verdict printed);
- whole: the command's wall clock, and its excess over the D asked for (the target is 1 s);
- CPU: the command's CPU and its children's (py-spy, the analysis process), from getrusage.

The tree measured is the one `python -m diagnose` finds from the repository root.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def one_attach(pid: int, duration: float, extra: list[str]) -> dict[str, float]:
    usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.time()
    proc = subprocess.run([sys.executable, "-m", "diagnose", "attach", str(pid), "--duration",
                           str(duration), "--json", "-o", "/tmp/attach-timing", *extra],
                          cwd=REPO, capture_output=True, text=True)
    ended = time.time()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 10):
        sys.exit(f"attach exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    sampling = json.loads(proc.stdout)["sampling"]
    start, window = sampling["started_at"], sampling["duration_s"]
    return {"startup": start - began, "window": window, "after": ended - (start + window),
            "whole": ended - began, "excess": ended - began - duration,
            "cpu": (usage.ru_utime + usage.ru_stime) - (usage_before.ru_utime + usage_before.ru_stime)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pid", type=int)
    parser.add_argument("--attaches", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("attach_args", nargs="*", help="after --: extra `diagnose attach` options")
    args = parser.parse_args()
    rows = []
    for n in range(args.attaches):
        row = one_attach(args.pid, args.duration, args.attach_args)
        rows.append(row)
        print(f"attach {n + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in row.items()),
              file=sys.stderr)
    print("| attaches | start-up s | window s | after s | whole s | over the asked window s | CPU s |")
    print("| ---: | --- | --- | --- | --- | --- | --- |")
    cells = [f"{min(r[k] for r in rows):.2f}-{max(r[k] for r in rows):.2f} "
             f"(median {statistics.median(r[k] for r in rows):.2f})"
             for k in ("startup", "window", "after", "whole", "excess", "cpu")]
    print(f"| {len(rows)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
