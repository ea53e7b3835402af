#!/usr/bin/env python3
"""Analysis speed: time and peak memory of `diagnose analyze` on a 1,000,000-sample profile.

    python benchmarks/analysis_speed.py [--threads 20] [--samples-per-thread 50000]
                                        [--stacks 400] [--repeat 3] [--keep FILE] [--cprofile]

Builds a synthetic py-spy speedscope file (default 20 threads × 50,000 samples = 1,000,000)
from the stacks of the recorded profiles in fixtures/recorded/ (both the Python-stack and the
native calibration recordings: real stacks with native lock, GIL and BLAS frames, as
`py-spy record --native --idle --threads` writes them, thread pseudo-frame at the root), widened
to `--stacks` distinct stacks by call-site variants (the innermost Python frame moved to another
line of the same function). Request threads draw their stacks from the request threads of the
recordings, the main thread from the main threads, each with its own skewed preference; each
stack is held for a geometric run of samples (mean 6) so waits come in episodes, as in a real
recording.

Then runs `diagnose analyze FILE --output-dir TMP` as a subprocess `--repeat` times and reports
the wall seconds and the peak RSS of the child (resource.getrusage(RUSAGE_CHILDREN).ru_maxrss).
Targets: ≤ 5 s and ≤ 1 GiB. `--cprofile` also runs it once under cProfile and prints the
functions that dominate (own time and cumulative time).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pstats
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RECORDED = REPO / "fixtures" / "recorded"
TARGET_WALL_S = 5.0
TARGET_RSS_BYTES = 1 << 30
MEAN_RUN = 6  # samples a thread keeps the same stack, on average

_THREAD_PSEUDO = re.compile(r"^thread \((\d+|0x[0-9a-fA-F]+)\)")
_PROFILE_NAME = re.compile(r'^Thread \S+(?: "(.*)")?$', re.S)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def diagnose_cmd() -> list[str]:
    beside = Path(sys.executable).parent / "diagnose"
    if os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which("diagnose")
    return [found] if found else [sys.executable, "-m", "diagnose"]


def _has_native_frames(data: dict) -> bool:
    return any(".so" in str(f.get("file") or "") or str(f.get("name", "")).startswith("0x")
               for f in data["shared"]["frames"])


def collect_stacks() -> tuple[list[dict], list[list[int]], list[list[int]]]:
    """Frames shared by all recordings, and distinct stacks of request and main threads.

    Only recordings with native frames are used when there are any (a `--native` file has
    native frames under every stack; the Python-only recordings of diagnose's non-blocking
    recorder would make an unrealistic mix)."""
    frames: list[dict] = []
    index: dict[tuple, int] = {}
    request: dict[tuple, None] = {}
    main: dict[tuple, None] = {}
    recordings = [json.loads(path.read_text(encoding="utf-8"))
                  for path in sorted(RECORDED.glob("*.speedscope.json"))]
    native = [data for data in recordings if _has_native_frames(data)]
    for data in native or recordings:
        shared = data["shared"]["frames"]
        local: list[int | None] = []
        for f in shared:
            if _THREAD_PSEUDO.match(str(f.get("name", ""))) and not f.get("file"):
                local.append(None)  # re-added per synthetic thread
                continue
            key = (f.get("name"), f.get("file"), f.get("line"))
            if key not in index:
                index[key] = len(frames)
                frames.append({"name": f.get("name"), "file": f.get("file"),
                               "line": f.get("line"), "col": None})
            local.append(index[key])
        for prof in data["profiles"]:
            match = _PROFILE_NAME.match(str(prof.get("name", "")))
            thread_name = (match.group(1) if match else "") or ""
            into = main if thread_name == "MainThread" else request
            for sample in prof["samples"]:
                stack = tuple(local[i] for i in sample if local[i] is not None)
                if stack:
                    into[stack] = None
    if not request:
        raise SystemExit(f"no recorded profiles under {RECORDED}")
    return frames, [list(s) for s in request], [list(s) for s in (main or request)]


def widen(frames: list[dict], stacks: list[list[int]], target: int) -> list[list[int]]:
    """Adds variants of the recorded stacks until there are `target` distinct ones: the same
    path with its innermost Python frame at another line of the same function (another call
    site), as a larger service has. Native frames (lock, GIL, BLAS waits) are kept as they are."""
    out = [list(s) for s in stacks]
    seen = {tuple(s) for s in out}
    index = {(f["name"], f["file"], f["line"]): i for i, f in enumerate(frames)}
    offset = 0
    while len(out) < target and stacks:
        offset += 1
        grew = False
        for stack in stacks:
            if len(out) >= target:
                break
            python = [i for i, fid in enumerate(stack) if str(frames[fid]["file"]).endswith(".py")]
            if not python:
                continue
            pos = python[-1]
            f = frames[stack[pos]]
            key = (f["name"], f["file"], int(f["line"] or 0) + 7 * offset)
            if key not in index:
                index[key] = len(frames)
                frames.append({"name": key[0], "file": key[1], "line": key[2], "col": None})
            variant = stack[:pos] + [index[key]] + stack[pos + 1:]
            if tuple(variant) not in seen:
                seen.add(tuple(variant))
                out.append(variant)
                grew = True
        if not grew:
            break
    return out


def build_profile(path: Path, threads: int, per_thread: int, seed: int, stacks: int) -> dict:
    """Writes the synthetic speedscope file; returns facts about it."""
    rng = random.Random(seed)
    frames, request_stacks, main_stacks = collect_stacks()
    frames = list(frames)
    request_stacks = widen(frames, request_stacks, max(len(request_stacks), stacks - len(main_stacks)))
    # Each request thread favours a different slice of the pool (as real threads do), with a
    # long tail over all stacks.
    profiles = []
    base_tid = 40000
    distinct: set[tuple] = set()
    for k in range(threads):
        tid = base_tid + k
        name = "MainThread" if k == 0 else f"request-{k - 1}"
        pool = main_stacks if k == 0 else request_stacks
        weights = [rng.paretovariate(1.2) for _ in pool]
        pseudo = len(frames)
        frames.append({"name": f"thread ({tid}): {name}", "file": "", "line": 0, "col": None})
        choices = rng.choices(range(len(pool)), weights=weights, k=per_thread)
        samples = []
        i = 0
        while len(samples) < per_thread:
            stack = [pseudo] + pool[choices[i % per_thread]]
            distinct.add(tuple(stack[1:]))
            run = min(per_thread - len(samples), 1 + int(rng.expovariate(1 / (MEAN_RUN - 1))))
            samples.extend([stack] * run)
            i += 1
        profiles.append({
            "type": "sampled", "name": f'Thread {tid} "{name}"', "unit": "seconds",
            "startValue": 0.0, "endValue": round(per_thread * 0.01, 2),
            "samples": samples, "weights": [0.01] * per_thread,
        })
    doc = {"$schema": "https://www.speedscope.app/file-format-schema.json",
           "profiles": profiles, "shared": {"frames": frames}, "activeProfileIndex": 0,
           "exporter": "py-spy@0.4.3", "name": "py-spy profile"}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, separators=(",", ":"))
    lock_frames = {i for i, f in enumerate(frames)
                   if f["name"] in ("PyThread_acquire_lock_timed", "pthread_mutex_lock",
                                    "pthread_cond_timedwait")}
    return {"samples": threads * per_thread, "threads": threads, "frames": len(frames),
            "distinct_stacks": len(distinct), "bytes": path.stat().st_size,
            "wait_stacks": sum(1 for s in distinct if lock_frames.intersection(s))}


def run_analyze(profile: Path, out_dir: Path) -> tuple[float, float, int, str, int]:
    """One `diagnose analyze` in a fresh child: (wall s, CPU s, peak RSS bytes, verdict, rc).

    ru_maxrss of RUSAGE_CHILDREN is the largest of all waited-for descendants, so every
    measurement runs from a fresh helper process that has no other children."""
    helper = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.monotonic()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "wall = time.monotonic() - t\n"
        "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps({'wall': wall, 'rss': ru.ru_maxrss * 1024, 'cpu': ru.ru_utime + ru.ru_stime,"
        " 'rc': p.returncode, 'out': p.stdout[-2000:], 'err': p.stderr[-2000:]}))\n")
    cmd = diagnose_cmd() + ["analyze", str(profile), "--output-dir", str(out_dir)]
    out = subprocess.run([sys.executable, "-c", helper, *cmd], capture_output=True, text=True)
    result = json.loads(out.stdout)
    verdict = "?"
    for line in result["out"].splitlines():
        if line.startswith("Verdict:"):
            verdict = line[len("Verdict:"):].strip()
    if result["rc"] != 0:
        verdict = f"exit {result['rc']}: {(result['err'].strip().splitlines() or ['?'])[-1]}"
    return result["wall"], result["cpu"], result["rss"], verdict, result["rc"]


def run_cprofile(profile: Path, out_dir: Path, top: int) -> str:
    stats_path = out_dir / "analyze.pstats"
    cmd = [sys.executable, "-m", "cProfile", "-o", str(stats_path), "-m", "diagnose", "analyze",
           str(profile), "--output-dir", str(out_dir / "cprofile")]
    subprocess.run(cmd, capture_output=True, text=True)
    if not stats_path.exists():
        return "cProfile run failed"
    buf = io.StringIO()
    stats = pstats.Stats(str(stats_path), stream=buf).strip_dirs()
    buf.write(f"\n## cProfile of one `diagnose analyze` run: top {top} by own time\n")
    stats.sort_stats("tottime").print_stats(top)
    buf.write(f"\n## top {top} by cumulative time\n")
    stats.sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--samples-per-thread", type=int, default=50_000)
    parser.add_argument("--stacks", type=int, default=400,
                        help="distinct stacks: the recorded ones plus call-site variants "
                             "(default 400)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="write the synthetic profile here and keep it")
    parser.add_argument("--cprofile", action="store_true",
                        help="also profile one run with cProfile and print the top functions")
    parser.add_argument("--top", type=int, default=25, help="rows of the cProfile listings")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="diagnose-analysis-speed-"))
    try:
        profile = args.keep or (work / "synthetic.speedscope.json")
        t0 = time.monotonic()
        facts = build_profile(profile, args.threads, args.samples_per_thread, args.seed,
                              args.stacks)
        log(f"built {profile.name}: {facts['samples']:,} samples, {facts['threads']} threads, "
            f"{facts['distinct_stacks']} distinct stacks ({facts['wait_stacks']} with a native "
            f"lock/GIL wait frame), {facts['bytes'] / 2**20:.0f} MiB "
            f"in {time.monotonic() - t0:.1f} s")
        walls, cpus, rsses, verdicts = [], [], [], []
        for i in range(args.repeat):
            wall, cpu, rss, verdict, rc = run_analyze(profile, work / f"out{i}")
            walls.append(wall)
            cpus.append(cpu)
            rsses.append(rss)
            verdicts.append(verdict)
            log(f"run {i + 1}/{args.repeat}: {wall:.2f} s wall, {cpu:.2f} s CPU, peak RSS {rss / 2**20:.0f} MiB, "
                f"exit {rc}")
            shutil.rmtree(work / f"out{i}", ignore_errors=True)
        wall_med, rss_max = statistics.median(walls), max(rsses)
        ok_wall, ok_rss = wall_med <= TARGET_WALL_S, rss_max <= TARGET_RSS_BYTES
        print(f"`diagnose analyze` on a synthetic speedscope profile "
              f"({os.cpu_count()} cores, Python {sys.version.split()[0]}, "
              f"load average {os.getloadavg()[0]:.1f})\n")
        print("| samples | threads | distinct stacks (with native waits) | file MiB | runs "
              "| wall s (median; min–max) "
              "| CPU s (median) | peak RSS MiB (max) | wall ≤ 5 s | RSS ≤ 1 GiB | verdict |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |")
        print(f"| {facts['samples']:,} | {facts['threads']} | {facts['distinct_stacks']} "
              f"({facts['wait_stacks']}) "
              f"| {facts['bytes'] / 2**20:.0f} | {args.repeat} "
              f"| {wall_med:.2f} ({min(walls):.2f}–{max(walls):.2f}) | {statistics.median(cpus):.2f} "
              f"| {rss_max / 2**20:.0f} "
              f"| {'ok' if ok_wall else 'MISSED'} | {'ok' if ok_rss else 'MISSED'} "
              f"| {verdicts[0]} |")
        if args.cprofile:
            print(run_cprofile(profile, work, args.top))
        return 0 if ok_wall and ok_rss else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
