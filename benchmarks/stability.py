#!/usr/bin/env python3
"""Stability: attach five times in a row to each fixture; the verdict must not change.

    python benchmarks/stability.py [--fixtures a,b,...] [--attaches 5] [--duration 4]
                                   [--python 3.12 | /path/to/python]

Each fixture workload (fixtures/workloads/, every one but those starting with "_") is started
once and attached `--attaches` times back to back with `diagnose attach PID --duration D
--json`. `--python` runs the workloads on another interpreter: a version ("3.13") gets the
cached venv with numpy that the integration tests build (tests/integration/pythons.py, under
.cache/pythons/), a path is used as it is; diagnose itself runs on this interpreter. A verdict
is stable when the set it names (the primary, and the co-primary if any) is the same in every
attach. The table lists, per fixture, that set for each attach, the top finding's score and
predicted gain (min-max), and whether every attach agreed. Progress to stderr, the table to
stdout; the exit status is 1 when any fixture's verdict changed.
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
DEFAULT_FIXTURES = tuple(sorted(p.stem for p in WORKLOADS.glob("*.py") if not p.stem.startswith("_")))


def workload_python(spec: str | None) -> str:
    """The interpreter the workloads run on: this one, a path, or a version's numpy venv."""
    if not spec:
        return sys.executable
    if "/" in spec:
        return spec
    sys.path.insert(0, str(REPO))
    from tests.integration import pythons

    python, reason = pythons.venv_with_numpy(spec)
    if python is None:
        raise SystemExit(f"--python {spec}: {reason}")
    knob_sweep.log(f"workloads on {python} ({reason})")
    return python


def named(verdict: dict) -> str:
    """The findings a verdict names, in its own (stable) order: "a" or "a+b"."""
    return "+".join(v for v in (verdict.get("primary"), verdict.get("co_primary")) if v)


def attaches(fixture: str, count: int, duration: float, python: str = sys.executable) -> list[dict]:
    cmd = [python, str(WORKLOADS / f"{fixture}.py"), "--seconds",
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
                results.append({"verdict": "error", "score": None, "gain": None, "scores": ""})
                continue
            report = json.loads(proc.stdout)
            top = report["findings"][0] if report["findings"] else {}
            # The first three findings with their score intervals: why a verdict moved.
            scores = " ".join(f"{f['id']}={f['score']}" + (
                f"[{f['score_interval'][0]}-{f['score_interval'][1]}]" if f.get("score_interval") else "")
                + (f"x{f['predicted_gain']}" if f.get("predicted_gain") is not None else "")
                for f in report["findings"][:3])
            knob_sweep.log(f"    {named(report['verdict'])}: {scores}")
            results.append({"verdict": named(report["verdict"]), "score": top.get("score"),
                            "gain": top.get("predicted_gain"), "scores": scores})
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
    parser.add_argument("--python", default=None,
                        help="the workloads' interpreter: a version (3.11, 3.12, 3.13: a cached venv "
                             "with numpy) or a path (default: this interpreter)")
    args = parser.parse_args(argv)
    python = workload_python(args.python)
    rows, unstable = [], 0
    for fixture in [f.strip() for f in args.fixtures.split(",") if f.strip()]:
        try:
            results = attaches(fixture, args.attaches, args.duration, python)
        except RuntimeError as exc:  # the workload never got READY on this interpreter
            knob_sweep.log(f"  {fixture}: {exc}")
            rows.append(f"| {fixture} | not run: {str(exc)[:80]} | – | – | – |")
            continue
        primaries = [r["verdict"] for r in results]
        same = len(set(primaries)) == 1
        unstable += not same
        rows.append(f"| {fixture} | {', '.join(primaries)} | {_span([r['score'] for r in results])} | "
                    f"{_span([r['gain'] for r in results])} | {'yes' if same else '**no**'} |")
    print(f"| fixture | verdict (primary+co-primary) of each of {args.attaches} attaches | top score | predicted gain | "
          "stable |\n| --- | --- | ---: | ---: | --- |")
    print("\n".join(rows))
    return 1 if unstable else 0


if __name__ == "__main__":
    sys.exit(main())
