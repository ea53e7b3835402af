#!/usr/bin/env python3
"""Where an observer's CPU goes: diagnose's own threads and each py-spy child, per phase.

    python benchmarks/observer_cpu.py [--workload tree] [--seconds 8] [--runs 1] [-- ATTACH ARGS]
    python benchmarks/observer_cpu.py --compare --workload sixtyfour --runs 3 -- --no-kernel-waits

Starts a fresh fixture workload (the overhead benchmark's), runs `diagnose attach` at it (the
tree `import diagnose` finds: put it first on PYTHONPATH) and polls, 20 times a second, the CPU
seconds (/proc/<pid>/task/<tid>/stat) of diagnose's threads and of every descendant process it
starts. Each increment is charged to a phase: `probe` (before the first `py-spy record`),
`window` (while any recorder runs: what the overhead benchmark's "kept" counts) and `after`
(the analysis and report). CPU seconds, not throughput: robust to other tenants of the machine.

Components: diagnose's main thread (the /proc sampler, the recorders' bookkeeping; later the
analysis), its other threads (asyncio task readers, the template warm-up), `py-spy record`
per kind (main / native calibration), `py-spy dump` probes, other children (the asyncio layout
probe interpreter). A child that exits between two polls loses its last <= 50 ms; the total of
all of them is checked against getrusage(RUSAGE_CHILDREN) and printed beside.

`--compare`: each run is a pair of attaches on fresh workloads, one at the defaults and one with
ATTACH ARGS, in alternating order (the defaults first on odd runs); a last table gives, per side,
the medians of the window, of diagnose's main-thread CPU (window and after) and of the observer's
whole window CPU, in CPU seconds and per window second (cores), and their ratio defaults / ARGS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from overhead import WORKLOAD_ARGS, WORKLOAD_SLACK_S, WORKLOADS, Target  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")
POLL_S = 0.05


def _cpu(path: str) -> float | None:
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _kind(cmdline: list[str]) -> str:
    name = os.path.basename(cmdline[0]) if cmdline else "?"
    if name == "py-spy" and len(cmdline) > 1:
        if cmdline[1] == "record":
            rate = cmdline[cmdline.index("--rate") + 1] if "--rate" in cmdline else "?"
            kind = "native" if "--native" in cmdline else "main"
            return f"py-spy record {kind} at {rate} Hz"
        return f"py-spy {cmdline[1]}"
    return f"other child ({name})"


def measure(workload: str, seconds: float,
            attach_args: list[str]) -> tuple[dict[str, dict[str, float]], str]:
    script, threads, _ = WORKLOADS[workload]
    target = Target(script, threads, seconds + WORKLOAD_SLACK_S, WORKLOAD_ARGS.get(workload, ()))
    work = Path(tempfile.mkdtemp(prefix="observer-cpu-"))
    last: dict[tuple[str, int], float] = {}  # (component, id) -> cpu seconds last seen
    kinds: dict[int, str] = {}
    table: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, set[int]] = defaultdict(set)
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        cmd = [sys.executable, "-m", "diagnose", "attach", str(target.pid), "--duration",
               f"{seconds:g}", "--quiet", "--json", "--output-dir", str(work), *attach_args]
        # cwd: not a source tree, so PYTHONPATH alone says which diagnose is measured
        # stdout to a file: a report larger than a pipe would block the observer
        out = (work / "attach.json").open("w")
        observer = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, cwd=work)
        root = psutil.Process(observer.pid)
        phase, window_start, window_end = "probe", None, None
        while observer.poll() is None:
            seen: dict[tuple[str, int], float] = {}
            for tid in os.listdir(f"/proc/{observer.pid}/task") if os.path.exists(
                    f"/proc/{observer.pid}/task") else []:
                cpu = _cpu(f"/proc/{observer.pid}/task/{tid}/stat")
                if cpu is not None:
                    name = ("diagnose main thread" if int(tid) == observer.pid
                            else "diagnose other threads")
                    seen[(name, int(tid))] = cpu
            try:
                children = root.children(recursive=True)
            except psutil.Error:
                children = []
            recording = False
            for child in children:
                if child.pid not in kinds:
                    try:
                        kinds[child.pid] = _kind(child.cmdline())
                    except psutil.Error:
                        continue
                cpu = _cpu(f"/proc/{child.pid}/stat")
                if cpu is not None:
                    seen[(kinds[child.pid], child.pid)] = cpu
                    recording |= (kinds[child.pid].startswith("py-spy record")
                                  and _running(child))
            now = time.monotonic()
            if recording and phase == "probe":
                phase, window_start = "window", now
            elif not recording and phase == "window":
                phase, window_end = "after", now
            for key, cpu in seen.items():
                table[key[0]][phase] += cpu - last.get(key, 0.0)
                counts[key[0]].add(key[1])
                last[key] = cpu
            time.sleep(POLL_S)
        observer.wait()
        out.close()
        try:
            report = json.loads((work / "attach.json").read_text())
            verdict = report["verdict"]["primary"]
        except (ValueError, KeyError):
            report, verdict = {}, f"exit {observer.returncode}"
        # The report's own figure (sampling.observer, measured from /proc over its window), to
        # set beside this poller's.
        stated = (report.get("sampling") or {}).get("observer") or {}
        for key in ("observer_cpu_s", "observer_own_cpu_s", "observer_children_cpu_s",
                    "cpu_window_s", "observer_cores", "target_cores"):
            if isinstance(stated.get(key), (int, float)):
                table["(report)"][key] = stated[key]
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        total = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        window = (window_end or time.monotonic()) - (window_start or time.monotonic())
        for name, ids in counts.items():
            table[name]["n"] = len(ids)
        table["(getrusage total of the attach)"]["total"] = total
        table["(window seconds)"]["window"] = window
        return table, verdict
    finally:
        target.stop()
        subprocess.run(["rm", "-rf", str(work)], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="tree", choices=sorted(WORKLOADS))
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--compare", action="store_true",
                        help="each run: one attach at the defaults and one with ATTACH ARGS, "
                             "alternating which goes first; then a table of the two and their ratio")
    parser.add_argument("attach_args", nargs="*", help="after --: extra `diagnose attach` options")
    args = parser.parse_args()
    if args.compare and not args.attach_args:
        parser.error("--compare needs ATTACH ARGS after -- (what the defaults are compared with)")
    where = subprocess.run([sys.executable, "-c", "import diagnose; print(diagnose.__file__)"],
                           capture_output=True, text=True, cwd=tempfile.gettempdir()).stdout.strip()
    print(f"diagnose measured: {where}", file=sys.stderr)
    sides = {"defaults": [], " ".join(args.attach_args): []}
    for run in range(args.runs):
        if not args.compare:
            _print_run(run, args, measure(args.workload, args.seconds, args.attach_args), "")
            continue
        order = [[], args.attach_args] if run % 2 == 0 else [args.attach_args, []]
        for extra in order:
            result = measure(args.workload, args.seconds, extra)
            label = " ".join(extra) or "defaults"
            sides[label].append(result[0])
            _print_run(run, args, result, f", {label}")
    if args.compare:
        _print_comparison(args, sides)


def _print_run(run: int, args, result: tuple[dict[str, dict[str, float]], str], label: str) -> None:
    table, verdict = result
    print(f"\nrun {run + 1}{label}: {args.workload}, {args.seconds:g} s asked, "
          f"window {table['(window seconds)']['window']:.1f} s, "
          f"load average {os.getloadavg()[0]:.1f}, verdict {verdict}")
    print("| component | n | probe CPU s | window CPU s | after CPU s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    sums = defaultdict(float)
    for name in sorted(k for k in table if not k.startswith("(")):
        row = table[name]
        for phase in ("probe", "window", "after"):
            sums[phase] += row[phase]
        print(f"| {name} | {int(row['n'])} | {row['probe']:.2f} | {row['window']:.2f} | "
              f"{row['after']:.2f} |")
    print(f"| sum of components | | {sums['probe']:.2f} | {sums['window']:.2f} | "
          f"{sums['after']:.2f} |")
    print(f"getrusage total of the attach: "
          f"{table['(getrusage total of the attach)']['total']:.2f} s")
    stated = table.get("(report)") or {}
    if "observer_cpu_s" in stated:
        print(f"the report's figure: observer {stated['observer_cpu_s']:.2f} CPU s "
              f"(diagnose {stated.get('observer_own_cpu_s', float('nan')):.2f}, "
              f"children {stated.get('observer_children_cpu_s', float('nan')):.2f}) over "
              f"{stated.get('cpu_window_s', float('nan')):.1f} s: "
              f"{stated.get('observer_cores', float('nan')):.2f} cores beside the target's "
              f"{stated.get('target_cores', float('nan')):.2f}")


def _print_comparison(args, sides: dict[str, list[dict[str, dict[str, float]]]]) -> None:
    """Medians per side over the runs, CPU seconds and cores (per window second), and the
    ratio defaults / ARGS."""
    def figures(table: dict[str, dict[str, float]]) -> dict[str, float]:
        window = table["(window seconds)"]["window"]
        main = table["diagnose main thread"]
        observer = sum(row["window"] for name, row in table.items() if not name.startswith("("))
        return {"window s": window, "main window CPU s": main["window"],
                "main after CPU s": main["after"], "observer window CPU s": observer,
                "attach total CPU s": table["(getrusage total of the attach)"]["total"],
                "main window cores": main["window"] / window if window else float("nan"),
                "observer window cores": observer / window if window else float("nan")}

    labels = list(sides)
    medians = {label: {key: statistics.median(figures(t)[key] for t in tables)
                       for key in figures(tables[0])}
               for label, tables in sides.items() if tables}
    if len(medians) < 2:
        return
    base, other = labels
    print(f"\n{args.workload}: medians of {len(sides[base])} runs each, alternating "
          f"(`{other}` against the defaults)")
    print(f"| measure | defaults | `{other}` | defaults / `{other}` | difference |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for key in medians[base]:
        a, b = medians[base][key], medians[other][key]
        ratio = f"{a / b:.2f}" if b else "-"
        print(f"| {key} | {a:.3f} | {b:.3f} | {ratio} | {a - b:+.3f} |")


if __name__ == "__main__":
    main()
