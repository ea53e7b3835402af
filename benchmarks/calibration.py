#!/usr/bin/env python3
"""Calibration: every lever every finding offers, predicted beside measured.

    python benchmarks/calibration.py [--fixtures preprocess_bound,gil_contention,...]
                                     [--rounds 2] [--seconds 6] [--duration 5]
                                     [--python 3.12] [--json-out FILE]

For each fixture workload (fixtures/workloads/, its "bad" defaults):

1. diagnose it once (`diagnose attach PID --json`, benchmarks/advice_gain.py);
2. for every finding that shows a problem (score >= 25), list its first advice (the knob in
   `evidence.fix`, predicted `predicted_gain`) and each of its levers (`levers`: "if X cost
   half", "if X cost nothing" (an upper bound), "from more cores"), each with the workload
   parameters that apply it where the workload has them (advice_gain.knob_args for the advice,
   LEVER_ARGS below for the levers);
3. measure requests/s of the defaults and of every applied lever, alternating over `--rounds`
   rounds on fresh processes (the runner of benchmarks/knob_sweep.py), and print one row per
   lever: predicted, measured, measured/predicted, and whether the prediction is an upper bound.

A lever the workload has no parameter for is listed, not measured. Below the rows, the median
ratio per check and lever: where it is off by more than 1.5x, that check's model needs a
correction. Progress goes to stderr, the markdown to stdout.
"""

from __future__ import annotations

import fnmatch
import json
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import advice_gain  # noqa: E402  (diagnose a fixture, the advice's knob as workload parameters)
import knob_sweep  # noqa: E402  (the runner)

DEFAULT_FIXTURES = ("preprocess_bound", "gil_contention", "lock_contention", "locked_blas",
                    "pool_wait", "logging_lock", "pipeline", "blas_fanout", "scheduler_overhead",
                    "batching", "lock_across_io", "cpu_quota", "process_pool", "gc_heavy",
                    "syscall_heavy", "spawn_per_request")

# A lever's label (Lever.label) in one fixture, as that workload's parameters: what applying the
# lever means there. "cost half" levers take the workload's cheaper variant of the work; "cost
# nothing" levers take a variant that removes the work, where one exists ("*" matches any text).
LEVER_ARGS: dict[tuple[str, str, str], list[str]] = {
    ("preprocess_bound", "preprocess_bound", "if preprocessing cost half"): ["--fast-decode"],
    ("gil_contention", "gil_contention", "if * cost nothing"): ["--vectorized"],
    ("gil_contention", "gil_contention", "if * were vectorised"): ["--vectorized"],
    # the collector's work made free: nothing here makes reference cycles, so gc.disable() is safe
    ("gc_heavy", "gc_pressure", "if the collector cost nothing"): ["--gc-off"],
    # one write(2) per response instead of one per line: nearly all the calls gone
    ("syscall_heavy", "kernel_work", "if the system calls cost nothing"): ["--buffer-bytes", "1048576"],
    # no child at all: the digest computed in the request thread
    ("spawn_per_request", "children_cpu", "if the children cost nothing"): ["--in-process"],
}


@dataclass(frozen=True)
class LeverRow:
    fixture: str
    check: str
    lever: str  # "first advice: KNOB=VALUE" or the lever's label
    predicted: float | None
    upper_bound: bool
    applied: tuple[str, ...] | None  # the workload parameters, None: not measurable here
    measured: float | None = None
    before: float | None = None
    after: float | None = None

    @property
    def ratio(self) -> float | None:
        if self.measured is None or not self.predicted:
            return None
        return self.measured / self.predicted


def _lever_args(fixture: str, check: str, label: str) -> list[str] | None:
    for (fx, ck, pattern), args in LEVER_ARGS.items():
        if fx == fixture and ck == check and fnmatch.fnmatchcase(label, pattern):
            return args
    return None


def levers_of(fixture: str, report: dict) -> list[LeverRow]:
    """Every lever of every finding that shows a problem, with its parameters where known."""
    rows: list[LeverRow] = []
    for finding in report["findings"]:
        if finding["score"] < 25:
            continue
        check = finding["id"]
        fix = (finding.get("evidence") or {}).get("fix")
        if fix:
            knob = f"{fix.get('knob')}={fix.get('value')}"
            applied = advice_gain.knob_args(fixture, fix)
            rows.append(LeverRow(fixture, check, f"first advice: {knob}",
                                 finding.get("predicted_gain"), False,
                                 tuple(applied) if applied else None))
        for lever in finding.get("levers") or []:
            applied = _lever_args(fixture, check, lever["label"])
            rows.append(LeverRow(fixture, check, lever["label"], lever["gain"],
                                 bool(lever.get("upper_bound")),
                                 tuple(applied) if applied else None))
    return rows


def measured(fixture: str, rows: list[LeverRow], args, python: str) -> list[LeverRow]:
    configs = [""] + sorted({" ".join(r.applied) for r in rows if r.applied})
    if len(configs) == 1:
        return rows
    results = advice_gain.measure(fixture, configs, args.rounds, args.seconds, args.warmup, python)
    by_config = {c: res for c, res in zip(configs, results)}
    before = results[0]["median"]
    out = []
    for row in rows:
        res = by_config.get(" ".join(row.applied)) if row.applied else None
        if res is None:
            out.append(row)
            continue
        out.append(LeverRow(row.fixture, row.check, row.lever, row.predicted, row.upper_bound,
                            row.applied, res["ratio"], before, res["median"]))
    return out


def _f(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def markdown(rows: list[LeverRow]) -> str:
    out = ["| fixture | check | lever | applied | predicted | measured | measured / predicted |",
           "| --- | --- | --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        applied = f"`{' '.join(r.applied)}`" if r.applied else "no parameter in this workload"
        bound = " (upper bound)" if r.upper_bound else ""
        out.append(f"| {r.fixture} | {r.check} | {r.lever} | {applied} | "
                   f"{_f(r.predicted)}x{bound} | {_f(r.measured)}{'x' if r.measured else ''} | "
                   f"{_f(r.ratio)} |")
    summary: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if r.ratio is not None:
            kind = (r.lever.split(":")[0] if r.lever.startswith("first advice")
                    else re.sub(r"^if (?!preprocessing )\S+ (cost|were)", r"if its holder's code \1", r.lever))
            summary.setdefault((r.check, kind), []).append(r.ratio)
    out += ["", "| check | lever | measured / predicted (median) | rows | off by > 1.5x |",
            "| --- | --- | ---: | ---: | --- |"]
    for (check, kind), ratios in sorted(summary.items()):
        median = statistics.median(ratios)
        off = "yes" if median > 1.5 or median < 1 / 1.5 else "no"
        out.append(f"| {check} | {kind} | {median:.2f} | {len(ratios)} | {off} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = advice_gain.measuring_parser(__doc__ or "", DEFAULT_FIXTURES, rounds=2, seconds=6.0,
                                        duration=5.0).parse_args(argv)
    python = knob_sweep.python_for(args.python)
    out_dir = Path("/tmp") / f"diagnose-calibration-{int(time.time())}"
    rows: list[LeverRow] = []
    for fixture in [f.strip() for f in args.fixtures.split(",") if f.strip()]:
        knob_sweep.log(f"{fixture}: diagnosing")
        try:
            report = advice_gain.diagnose(fixture, args.duration, out_dir, python)
            found = measured(fixture, levers_of(fixture, report), args, python)
        except Exception as exc:  # one fixture's failure must not lose the others
            knob_sweep.log(f"{fixture}: failed: {exc}")
            continue
        rows += found
        for r in found:
            knob_sweep.log(f"  {r.check} {r.lever}: predicted {_f(r.predicted)} measured {_f(r.measured)}")
    print(markdown(rows))
    if args.json_out:
        args.json_out.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
