#!/usr/bin/env python3
"""Waits no stack shows, per fixture and CPython version: what diagnose says, and what its first
advice buys when applied.

    python benchmarks/hidden_waits_table.py [--pythons 3.11,3.12,3.13] [--rounds 2]
        [--seconds 4] [--warmup 1] [--duration 4]
        [--servers async_semaphore,async_lock,async_queue,async_batcher,aiohttp_semaphore]
        [--workloads async_semaphore,await_cycle,deadlock_two_locks,deadlock_rlock,lock_across_io]
        [--json-out FILE]

For each fixture and each CPython version (its cached venv from tests/integration/pythons.py;
diagnose itself runs on this interpreter):

1. start the fixture at its "before" setting on that interpreter and `diagnose attach` it once
   (`--duration`; a server under wrk at its fixture's connections): the verdict, the site of the
   verdict's finding, what the asyncio tasks were seen waiting on (the `async_wait` evidence:
   primitive, name, permits, tasks waiting on average and at most) or the cycle a deadlock forms,
   the first advice and the predicted gain;
2. measure requests/s before and after the advice, alternating over `--rounds` rounds on fresh
   processes: the servers with benchmarks/advice_event_loop.py (after = 32 permits / consumers /
   batch, the advice's setting), the workloads with benchmarks/advice_gain.py (after = the
   finding's own fix knob, translated by its table).

Prints one Markdown table (stdout) and the load average at start and end; progress on stderr.
Ratios are within one paired run only: compare them across rows, never the absolute req/s
across runs of a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import advice_event_loop  # noqa: E402  (servers: start, load, paired runs)
import advice_gain  # noqa: E402  (workloads: diagnose, knob translation, paired runs)
import knob_sweep  # noqa: E402  (python_for, log)

from diagnose.checks.base import amdahl  # noqa: E402
from tests.integration.servers import load_during  # noqa: E402

SERVERS = ("async_semaphore", "async_lock", "async_queue", "async_batcher", "aiohttp_semaphore")
WORKLOADS = ("async_semaphore", "await_cycle", "deadlock_two_locks", "deadlock_rlock",
             "lock_across_io")
ADVICE_CHARS = 220  # the first advice, cut to a table cell (the JSON keeps it whole)


@dataclass(frozen=True)
class Diagnosis:
    """What one attach said, in table words."""

    verdict: str
    site: str
    waited_on: str
    advice: str
    predicted: str


@dataclass(frozen=True)
class Row:
    fixture: str  # "FastAPI async_lock", "workload await_cycle"
    python: str  # "3.12.1"
    diagnosis: Diagnosis
    applied: str  # the advice as applied to the fixture, or why it was not measured
    before: float | None  # req/s, median of the rounds
    after: float | None
    ratio: float | None  # median of same-round ratios (workloads) or of the medians (servers)
    other_cores: float | None  # the most the rest of the machine used during a measured run


def cell(text: object) -> str:
    """Text from the profiled process (names, files) in a Markdown table cell: no row breaks."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("`", "'")


def short(text: str, limit: int = ADVICE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def finding(report: dict, check_id: str | None) -> dict | None:
    return next((f for f in report.get("findings") or () if f.get("id") == check_id), None)


def site_words(found: dict | None) -> str:
    sites = (found or {}).get("sites") or ()
    if not sites:
        return "–"
    top = sites[0]
    return f"{os.path.basename(str(top.get('file', '')))}:{top.get('line')} ({top.get('function')})"


def waited_on(report: dict) -> str:
    """What the request tasks (or threads) waited on: a deadlock's cycle when it is critical,
    else the async_wait evidence when it saw a local primitive, else a lock finding's lock."""
    dead = finding(report, "deadlock") or {}
    evidence = dead.get("evidence") or {}
    if dead.get("severity") == "critical" and evidence.get("locks_in_cycle"):
        victims = (evidence.get("victim_threads") or 0) + (evidence.get("victim_tasks") or 0)
        return f"cycle: {evidence['locks_in_cycle']}; {victims} victims"
    wait = (finding(report, "async_wait") or {}).get("evidence") or {}
    if wait.get("primitive"):
        name = f" {wait['primitive_name']}" if wait.get("primitive_name") else ""
        permits = f", {wait['permits']} permits" if wait.get("permits") is not None else ""
        return (f"{wait['primitive']}{name}{permits}; waiting avg {wait.get('tasks_waiting_avg')}, "
                f"max {wait.get('tasks_waiting_max')} ({wait.get('task_reads')} reads)")
    lock = finding(report, "lock_contention") or {}
    if lock.get("severity") in ("critical", "warning"):
        share = (lock.get("evidence") or {}).get("lock_wait_share")
        return f"a lock at {site_words(lock)}" + (f", {share:.0%} of thread time" if share else "")
    return "no local wait seen" if wait else "tasks not read"


def describe(report: dict) -> Diagnosis:
    verdict = report.get("verdict") or {}
    primary = verdict.get("primary") or "none"
    named = "+".join(v for v in (primary, verdict.get("co_primary")) if v)
    found = finding(report, primary) or {}
    advice = (found.get("advice") or ["–"])[0]
    gain = found.get("predicted_gain")
    predicted = "hung" if primary == "deadlock" else (f"{gain:.2f}x" if gain else "–")
    share = (found.get("evidence") or {}).get("top_site_share") if primary == "async_wait" else None
    if share is not None and share < 1:
        # The check's Little's-law bound before its caps (loop headroom, cores the machine left
        # idle): on a shared machine the core cap can hide the whole gain.
        predicted += f" (uncapped {amdahl(share):.1f}x)"
    return Diagnosis(named, site_words(found), waited_on(report), advice, predicted)


def server_row(fixture: str, spec: str, args, out_dir: Path) -> Row:
    python = advice_event_loop.server_python(spec, [fixture])
    variant = advice_event_loop.FIXTURES[fixture]
    with advice_event_loop.started_server(fixture, False, python) as server:
        with load_during(server.url("/predict"), seconds=args.duration + 60,
                         connections=variant.connections):
            time.sleep(1.0)  # the connections open and the requests queue
            report = advice_gain.attach(server.pid, args.duration, out_dir)
    runs = advice_event_loop.paired_runs(fixture, args.rounds, args.seconds, args.warmup, None,
                                         python=python)
    before, after, ratio = advice_event_loop.medians(runs)
    label = ("aiohttp " if variant.aiohttp else "FastAPI ") + fixture
    return Row(label, advice_event_loop.python_version(python), describe(report), variant.advice,
               before, after, ratio, max((r["other_cores"] or 0.0) for r in runs))


def workload_row(fixture: str, spec: str, args, out_dir: Path) -> Row:
    python = knob_sweep.python_for(spec)
    report = advice_gain.diagnose(fixture, args.duration, out_dir, python)
    measured = advice_gain.row_from(fixture, report, args, python)
    applied = (" ".join(measured["applied"]) if measured.get("applied")
               else "not measured: the first advice has no knob for this fixture")
    return Row("workload " + fixture, advice_event_loop.python_version(python), describe(report),
               f"`{applied}`" if measured.get("applied") else applied,
               measured.get("before"), measured.get("after"), measured.get("ratio"),
               measured.get("other_cpu"))


def measured_words(row: Row) -> str:
    if row.before == 0 and row.after:
        return "hung → serving"  # no ratio to a service that served nothing
    return "–" if row.ratio is None else f"{row.ratio:.2f}x"


def number(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def markdown(rows: list[Row]) -> str:
    out = ["| fixture | CPython | verdict | site | waited on | first advice | applied | "
           "req/s before | req/s after | measured | predicted |",
           "| --- | --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        d = r.diagnosis
        out.append(f"| {r.fixture} | {r.python} | {cell(d.verdict)} | {cell(d.site)} | "
                   f"{cell(d.waited_on)} | {cell(short(d.advice))} | {r.applied} | {number(r.before)} | "
                   f"{number(r.after)} | {measured_words(r)} | {d.predicted} |")
    return "\n".join(out)


def names(text: str, known: tuple[str, ...], parser) -> list[str]:
    chosen = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in known]
    if unknown:
        parser.error(f"unknown {unknown}; known: {', '.join(known)}")
    return chosen


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pythons", default="3.11,3.12,3.13")
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=4, help="measured window per run")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--duration", type=float, default=4.0, help="diagnose's sampling window")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    servers = names(args.servers, SERVERS, parser)
    workloads = names(args.workloads, WORKLOADS, parser)
    versions = [v.strip() for v in args.pythons.split(",") if v.strip()]
    out_dir = Path("/tmp") / f"diagnose-hidden-waits-{int(time.time())}"
    load_start = os.getloadavg()
    jobs = [(server_row, f) for f in servers] + [(workload_row, f) for f in workloads]
    rows: list[Row] = []
    # Versions innermost: one fixture's three versions run close together in time.
    for build, fixture in jobs:
        for version in versions:
            knob_sweep.log(f"{fixture} on {version}: {build.__name__}")
            try:
                rows.append(build(fixture, version, args, out_dir))
            except Exception as exc:  # one cell's failure must not lose the others
                failed = Diagnosis(f"error: {short(str(exc), 200)}", "–", "–", "–", "–")
                rows.append(Row(fixture, version, failed, "–", None, None, None, None))
            knob_sweep.log(f"  {rows[-1].diagnosis.verdict}, {measured_words(rows[-1])}")
    load_end = os.getloadavg()
    print(f"Load average (1, 5, 15 min) at start {load_start[0]:.1f} {load_start[1]:.1f} "
          f"{load_start[2]:.1f}, at end {load_end[0]:.1f} {load_end[1]:.1f} {load_end[2]:.1f}; "
          f"{os.cpu_count()} CPUs; {args.rounds} rounds of {args.seconds} s after {args.warmup} s "
          f"warm-up; diagnose windows of {args.duration:g} s. Most CPU the rest of the machine "
          f"used during a measured run: "
          f"{max((r.other_cores or 0.0) for r in rows):.2f} cores.")
    print()
    print(markdown(rows))
    if args.json_out:
        args.json_out.write_text(json.dumps([asdict(r) for r in rows], indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
