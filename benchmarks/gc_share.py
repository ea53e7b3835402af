#!/usr/bin/env python3
"""The garbage collector's share, from outside beside inside, in the same window.

    python benchmarks/gc_share.py [--rounds 3] [--duration 6] [--python 3.12]
                                  [--fixture-args "--heap 500000"] [--json-out FILE]

For each round: start fixtures/workloads/gc_heavy.py (a fresh process), `diagnose attach PID
--duration D --json` while the workload is asked for its own collector figures every 0.2 s
(SIGUSR2 -> `GCSTAT <gc_cpu_s> <gc_wall_s> <process_cpu_s> <monotonic_s> <young> <middle>
<full>`, from gc.callbacks: the thread CPU time and wall time from each collection's "start" to
its "stop"), then stop it. The two GCSTAT lines nearest the report's window (its
`sampling.started_at` and `duration_s`, put on the monotonic clock by an offset taken here) give
the inside figure over the same span: collector CPU / process CPU. diagnose's figures are the
gc_pressure finding's `collector_share` (of its running native samples, with the 95% interval),
`collector_held_share` (the share of the window a collection was in progress, read from its
memory: collect/gc_state.py) and `collections` (per
generation, from its memory) beside the callbacks' count.

Prints one row per round and the medians; a benchmark, not a test: the inside figure is the
reference, and the row says whether it lies inside diagnose's interval.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import knob_sweep  # noqa: E402  (the workload runner: fresh process, READY, cleanup)
from advice_gain import attach  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "fixtures" / "workloads" / "gc_heavy.py"
POLL_S = 0.2


def _gcstats(workload: knob_sweep.Workload, stop: threading.Event, into: list[tuple[float, ...]]) -> None:
    """Asks for GCSTAT every POLL_S and keeps (monotonic, gc_cpu, gc_wall, process_cpu, young,
    middle, full) per answer."""
    while not stop.is_set():
        try:
            os.kill(workload.proc.pid, signal.SIGUSR2)
        except ProcessLookupError:
            return
        for line in workload.lines(POLL_S):
            if line.startswith("GCSTAT"):
                cpu, wall, process, mono, young, middle, full = (float(x) for x in line.split()[1:])
                into.append((mono, cpu, wall, process, young, middle, full))
        stop.wait(0.0)


def _nearest(stats: list[tuple[float, ...]], at: float) -> tuple[float, ...]:
    return min(stats, key=lambda s: abs(s[0] - at))


def one_round(python: str, duration: float, extra: list[str], out_dir: Path) -> dict:
    workload = knob_sweep.Workload([python, str(SCRIPT), "--seconds", str(duration + 90), *extra])
    stats: list[tuple[float, ...]] = []
    stop = threading.Event()
    try:
        pid = workload.wait_ready()
        poller = threading.Thread(target=_gcstats, args=(workload, stop, stats), daemon=True)
        poller.start()
        offset = time.monotonic() - time.time()  # wall clock -> monotonic (one machine)
        report = attach(pid, duration, out_dir)
        stop.set()
        poller.join(5)
    finally:
        stop.set()
        workload.kill()
    sampling = report["sampling"]
    start = sampling["started_at"] + offset
    end = start + sampling["duration_s"]
    a, b = _nearest(stats, start), _nearest(stats, end)
    gc_cpu, gc_wall, process_cpu = b[1] - a[1], b[2] - a[2], b[3] - a[3]
    finding = next((f for f in report["findings"] if f["id"] == "gc_pressure"), None)
    evidence = finding["evidence"] if finding else {}
    interval = (finding or {}).get("intervals", {}).get("collector_share", {})
    inside = gc_cpu / process_cpu if process_cpu > 0 else None
    read = evidence.get("collections") or {}
    return {"verdict": report["verdict"]["primary"],
            "first_advice": (report["verdict"].get("first_advice") or [""])[0],
            "predicted_gain": finding.get("predicted_gain") if finding else None,
            "basis": finding.get("basis_key") if finding else None,
            "diagnose_share": evidence.get("collector_share"),
            "diagnose_low": interval.get("low"), "diagnose_high": interval.get("high"),
            "running_samples": evidence.get("collector_running_samples"),
            "diagnose_share_of_cpu": evidence.get("collector_share_of_process_cpu"),
            "diagnose_wall_share": evidence.get("collector_held_share"),
            "polls": evidence.get("collector_polls"),
            "diagnose_collections": [read.get(k) for k in ("young", "middle", "full")] if read else None,
            "inside_share_of_cpu": inside,
            "inside_wall_share": gc_wall / (b[0] - a[0]) if b[0] > a[0] else None,
            "span_s": b[0] - a[0], "window_s": sampling["duration_s"],
            "collections": [int(b[i] - a[i]) for i in (4, 5, 6)],
            "inside_interval": (interval.get("low") is not None and inside is not None
                                and interval["low"] <= inside <= interval["high"])}


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def markdown(rows: list[dict]) -> str:
    out = ["| round | verdict | native: share of running samples (95%) | running samples | "
           "memory: share of window | polls | gc.callbacks: share of CPU | "
           "gc.callbacks: share of window | young/middle/full (memory) | young/middle/full (callbacks) | "
           "predicted |",
           "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |"]
    for i, r in enumerate(rows, 1):
        if "error" in r:
            out.append(f"| {i} | error: {r['error']} |" + " |" * 9)
            continue
        read = "/".join(map(str, r["diagnose_collections"])) if r["diagnose_collections"] else "–"
        out.append(f"| {i} | {r['verdict']} | {_pct(r['diagnose_share'])} ({_pct(r['diagnose_low'])}-"
                   f"{_pct(r['diagnose_high'])}) | {r['running_samples']} | "
                   f"{_pct(r['diagnose_wall_share'])} | {r['polls']} | {_pct(r['inside_share_of_cpu'])} | "
                   f"{_pct(r['inside_wall_share'])} | {read} | {'/'.join(map(str, r['collections']))} | "
                   f"{r['predicted_gain']}x |")
    ok = [r for r in rows if "error" not in r and r["diagnose_share"] is not None
          and r["inside_share_of_cpu"] is not None]
    if ok:
        out.append("")
        def median(key: str) -> str:
            return _pct(statistics.median(r[key] or 0.0 for r in ok))

        out.append(f"medians over {len(ok)} rounds: diagnose {median('diagnose_share')} of the running "
                   f"samples (native), {median('diagnose_wall_share')} of the window (memory); gc.callbacks "
                   f"{median('inside_share_of_cpu')} of the CPU, {median('inside_wall_share')} of the window")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=6.0, help="diagnose's sampling window")
    parser.add_argument("--python", default=None, metavar="X.Y|PATH")
    parser.add_argument("--fixture-args", default="", help="more arguments for gc_heavy.py")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    python = knob_sweep.python_for(args.python)
    rows = []
    with tempfile.TemporaryDirectory(prefix="diagnose-gc-share-") as scratch:
        for r in range(args.rounds):
            knob_sweep.log(f"round {r + 1}/{args.rounds}")
            try:
                rows.append(one_round(python, args.duration, args.fixture_args.split(), Path(scratch)))
            except Exception as exc:  # one failed round must not lose the others
                rows.append({"error": f"{type(exc).__name__}: {exc}"})
    print(markdown(rows))
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
