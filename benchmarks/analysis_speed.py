#!/usr/bin/env python3
"""Analysis speed: time, CPU and peak memory of `diagnose analyze` against a floor measured in
the same run.

    python benchmarks/analysis_speed.py [--sizes 100k,1m,10m] [--collapsed-stacks 300000]
                                        [--threads 20] [--stacks 400] [--repeat 1]
                                        [--keep DIR] [--cprofile CASE]

Speedscope cases (`--sizes`): a synthetic py-spy speedscope file of that many samples
(`--threads` threads) built from the stacks of the recorded profiles in fixtures/recorded/ (both
the Python-stack and the native calibration recordings: real stacks with native lock, GIL and
BLAS frames, as `py-spy record --native --idle --threads` writes them, thread pseudo-frame at the
root), widened to `--stacks` distinct stacks by call-site variants (the innermost Python frame
moved to another line of the same function). Request threads draw their stacks from the request
threads of the recordings, the main thread from the main threads, each with its own skewed
preference; each stack is held for a geometric run of samples (mean 6) so waits come in
episodes, as in a real recording. Floor: a bare `json.load` of the same file.

Collapsed case (`--collapsed-stacks`, 0 to skip): a `py-spy record --format raw` file of that
many distinct stacks (the recorded stacks' leaf parts under call-site variants, 20 threads).
Floor: reading its lines.

Every measurement runs `diagnose analyze FILE --output-dir TMP` (every output written) in a
fresh child and reads its wall seconds, CPU seconds and peak RSS (RUSAGE_CHILDREN); the floor is
measured the same way, in the same run, so the ratio is meaningful on a loaded machine. The
slope is the wall time per million samples between successive speedscope sizes.
Targets: 1M samples no slower than its floor and ≤ 600 MiB; the collapsed file ≤ 5 s and
≤ 600 MiB; 10M samples ≤ 12 s and ≤ 1 GiB. `--cprofile CASE` (e.g. `1m`, `collapsed`) also runs
that case once under cProfile and prints the functions that dominate.
"""

from __future__ import annotations

import argparse
import functools
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
MIB = 1 << 20
# (wall limit: seconds or "floor" = no slower than the floor, RSS limit) per case
TARGETS = {"1m": ("floor", 600 * MIB), "10m": (12.0, 1024 * MIB), "collapsed": (5.0, 600 * MIB)}
MEAN_RUN = 6  # samples a thread keeps the same stack, on average

_THREAD_PSEUDO = re.compile(r"^thread \((\d+|0x[0-9a-fA-F]+)\)")
_PROFILE_NAME = re.compile(r'^Thread \S+(?: "(.*)")?$', re.S)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


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
    """Writes the synthetic speedscope file (as `json.dump(..., separators=(",", ":"))` would,
    streamed: a 10M-sample file is written without building its document); returns facts."""
    rng = random.Random(seed)
    frames, request_stacks, main_stacks = collect_stacks()
    frames = list(frames)
    request_stacks = widen(frames, request_stacks, max(len(request_stacks), stacks - len(main_stacks)))
    # Each request thread favours a different slice of the pool (as real threads do), with a
    # long tail over all stacks.
    base_tid = 40000
    distinct: set[tuple] = set()
    pseudos = []
    for k in range(threads):
        tid = base_tid + k
        name = "MainThread" if k == 0 else f"request-{k - 1}"
        pseudos.append((tid, name, len(frames)))
        frames.append({"name": f"thread ({tid}): {name}", "file": "", "line": 0, "col": None})
    dumps = functools.partial(json.dumps, separators=(",", ":"))
    weight = dumps(0.01)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write('{"$schema":"https://www.speedscope.app/file-format-schema.json","profiles":[')
        for k, (tid, name, pseudo) in enumerate(pseudos):
            pool = main_stacks if k == 0 else request_stacks
            weights = [rng.paretovariate(1.2) for _ in pool]
            texts = [dumps([pseudo] + stack) for stack in pool]
            choices = rng.choices(range(len(pool)), weights=weights, k=per_thread)
            fh.write(("," if k else "") + dumps({
                "type": "sampled", "name": f'Thread {tid} "{name}"', "unit": "seconds",
                "startValue": 0.0, "endValue": round(per_thread * 0.01, 2)})[:-1] + ',"samples":[')
            written = 0
            i = 0
            chunk: list[str] = []
            while written < per_thread:
                choice = choices[i % per_thread]
                distinct.add(tuple(pool[choice]))
                run = min(per_thread - written, 1 + int(rng.expovariate(1 / (MEAN_RUN - 1))))
                chunk.extend([texts[choice]] * run)
                written += run
                i += 1
                if len(chunk) >= 100_000:
                    fh.write(",".join(chunk) + ("," if written < per_thread else ""))
                    chunk = []
            fh.write(",".join(chunk) + '],"weights":[')
            for start in range(0, per_thread, 100_000):
                fh.write(("," if start else "") + ",".join([weight] * min(100_000, per_thread - start)))
            fh.write("]}")
        fh.write('],"shared":' + dumps({"frames": frames}) + ',"activeProfileIndex":0,'
                 '"exporter":"py-spy@0.4.3","name":"py-spy profile"}')
    lock_frames = {i for i, f in enumerate(frames)
                   if f["name"] in ("PyThread_acquire_lock_timed", "pthread_mutex_lock",
                                    "pthread_cond_timedwait")}
    return {"samples": threads * per_thread, "threads": threads, "frames": len(frames),
            "distinct_stacks": len(distinct), "bytes": path.stat().st_size,
            "wait_stacks": sum(1 for s in distinct if lock_frames.intersection(s))}


def _collapsed_frame(f: dict) -> str:
    return f"{f['name']} ({f['file']}:{f['line']})" if f.get("line") else f"{f['name']} ({f['file']})"


def build_collapsed(path: Path, distinct: int, threads: int, seed: int) -> dict:
    """A `py-spy record --format raw` file of `distinct` distinct stacks over `threads` threads:
    the recorded stacks (their innermost 3 frames and the thread's pseudo-frame), each Python frame
    of a variant moved to another line of its function, so that there are as many call sites as
    a large service has. Counts are skewed (most stacks seen once or twice)."""
    rng = random.Random(seed)
    frames, request_stacks, main_stacks = collect_stacks()
    pool = [stack[-3:] for stack in request_stacks + main_stacks]
    lines = 0
    samples = 0
    seen: set[tuple] = set()
    with open(path, "w", encoding="utf-8") as fh:
        chunk: list[str] = []
        while lines < distinct:
            stack = pool[rng.randrange(len(pool))]
            k = rng.randrange(threads)
            tid = 40000 + k
            name = "MainThread" if k == 0 else f"request-{k - 1}"
            parts = [f"thread ({tid}): {name}"]
            variant = []
            for fid in stack:
                f = frames[fid]
                line = f["line"]
                if str(f["file"]).endswith(".py") and rng.random() < 0.5:
                    line = int(line or 0) + rng.randrange(1, 400)
                variant.append((fid, line))
                parts.append(_collapsed_frame({**f, "line": line}))
            key = (tid, tuple(variant))
            if key in seen:
                continue
            seen.add(key)
            count = 1 + int(rng.paretovariate(1.5)) - 1
            chunk.append(";".join(parts) + f" {count}")
            lines += 1
            samples += count
            if len(chunk) >= 50_000:
                fh.write("\n".join(chunk) + "\n")
                chunk = []
        fh.write("\n".join(chunk) + ("\n" if chunk else ""))
    return {"samples": samples, "threads": threads, "distinct_stacks": lines,
            "bytes": path.stat().st_size}


_HELPER = (
    "import resource, subprocess, sys, time, json\n"
    "t = time.monotonic()\n"
    "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "wall = time.monotonic() - t\n"
    "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(json.dumps({'wall': wall, 'rss': ru.ru_maxrss * 1024, 'cpu': ru.ru_utime + ru.ru_stime,"
    " 'rc': p.returncode, 'out': p.stdout[-2000:], 'err': p.stderr[-2000:]}))\n")


def child_env() -> dict:
    """The children's environment: this tree first on the path, and compiled bytecode cached
    (as an installed package has it): with PYTHONDONTWRITEBYTECODE set, as some shells set it,
    every run would compile the package from source (0.3-0.5 s of CPU), so the children keep
    their bytecode under PYTHONPYCACHEPREFIX (default: a directory beside the profiles)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def warm_bytecode(env: dict) -> None:
    """One untimed `diagnose analyze` of a recorded profile, so that no measured run pays for
    compiling what it imports (some modules are imported only when a check needs them)."""
    with tempfile.TemporaryDirectory(prefix="diagnose-warm-") as out:
        subprocess.run([sys.executable, "-m", "diagnose", "analyze",
                        str(RECORDED / "lock_contention.speedscope.json"), "--output-dir", out],
                       cwd=REPO, env=env, capture_output=True)


def measure(cmd: list[str]) -> dict:
    """One command in a fresh child: wall s, CPU s, peak RSS bytes, exit code, output tails.

    ru_maxrss of RUSAGE_CHILDREN is the largest of all waited-for descendants, so every
    measurement runs from a fresh helper process that has no other children."""
    env = child_env()
    out = subprocess.run([sys.executable, "-c", _HELPER, *cmd], capture_output=True, text=True,
                         cwd=REPO, env=env)
    return json.loads(out.stdout)


FLOORS = {
    # a bare json.load of the whole file
    "json": "import json, sys\nwith open(sys.argv[1], 'rb') as fh: json.load(fh)",
    # reading the lines of a text file
    "lines": "import sys\nwith open(sys.argv[1], encoding='utf-8', errors='replace') as fh: "
             "lines = fh.read().splitlines()",
}


def run_floor(kind: str, profile: Path) -> dict:
    return measure([sys.executable, "-c", FLOORS[kind], str(profile)])


def run_analyze(profile: Path, out_dir: Path) -> dict:
    """One `diagnose analyze` (every output written) in a fresh child, with its verdict."""
    result = measure([sys.executable, "-m", "diagnose", "analyze", str(profile), "--output-dir",
                      str(out_dir)])
    verdict = "?"
    for line in result["out"].splitlines():
        if line.startswith("Verdict:"):
            verdict = line[len("Verdict:"):].strip()
    if result["rc"] != 0:
        verdict = f"exit {result['rc']}: {(result['err'].strip().splitlines() or ['?'])[-1]}"
    result["verdict"] = verdict
    return result


def run_cprofile(profile: Path, out_dir: Path, top: int) -> str:
    stats_path = out_dir / "analyze.pstats"
    cmd = [sys.executable, "-m", "cProfile", "-o", str(stats_path), "-m", "diagnose", "analyze",
           str(profile), "--output-dir", str(out_dir / "cprofile")]
    subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=child_env())
    if not stats_path.exists():
        return "cProfile run failed"
    buf = io.StringIO()
    stats = pstats.Stats(str(stats_path), stream=buf).strip_dirs()
    buf.write(f"\n## cProfile of one `diagnose analyze` run: top {top} by own time\n")
    stats.sort_stats("tottime").print_stats(top)
    buf.write(f"\n## top {top} by cumulative time\n")
    stats.sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


def parse_size(text: str) -> int:
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * scale)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100k,1m,10m",
                        help="speedscope cases, samples each (default 100k,1m,10m)")
    parser.add_argument("--collapsed-stacks", type=int, default=300_000,
                        help="distinct stacks of the collapsed case (default 300000; 0: skip)")
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--stacks", type=int, default=400,
                        help="distinct stacks of the speedscope cases: the recorded ones plus "
                             "call-site variants (default 400)")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per case (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="write the synthetic profiles into this "
                        "directory and keep them (reused when present)")
    parser.add_argument("--cprofile", metavar="CASE",
                        help="also profile one run of this case (e.g. 1m, collapsed) with cProfile")
    parser.add_argument("--top", type=int, default=25, help="rows of the cProfile listings")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="diagnose-analysis-speed-"))
    where = args.keep or work
    where.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(where / "pycache"))
    warm_bytecode(child_env())
    cases = []
    for size in [s for s in args.sizes.split(",") if s.strip()]:
        n = parse_size(size)
        cases.append((size.strip().lower(), "speedscope", n))
    if args.collapsed_stacks:
        cases.append(("collapsed", "collapsed", args.collapsed_stacks))
    rows = []
    failed = False
    try:
        for name, kind, n in cases:
            t0 = time.monotonic()
            if kind == "speedscope":
                per_thread = max(1, n // args.threads)
                path = where / f"synthetic-{name}-{args.threads}x{per_thread}-{args.stacks}.speedscope.json"
                facts_path = path.with_suffix(".facts")
                if path.exists() and facts_path.exists():
                    facts = json.loads(facts_path.read_text())
                else:
                    facts = build_profile(path, args.threads, per_thread, args.seed, args.stacks)
                    facts_path.write_text(json.dumps(facts))
                floor_kind = "json"
            else:
                path = where / f"synthetic-collapsed-{n}.txt"
                facts_path = path.with_suffix(".facts")
                if path.exists() and facts_path.exists():
                    facts = json.loads(facts_path.read_text())
                else:
                    facts = build_collapsed(path, n, args.threads, args.seed)
                    facts_path.write_text(json.dumps(facts))
                floor_kind = "lines"
            log(f"{name}: {path.name}: {facts['samples']:,} samples, {facts['distinct_stacks']:,} "
                f"distinct stacks, {facts['bytes'] / MIB:.0f} MiB (ready in {time.monotonic() - t0:.1f} s)")
            floor = run_floor(floor_kind, path)
            log(f"{name}: floor ({floor_kind}) {floor['wall']:.2f} s wall, {floor['cpu']:.2f} s CPU, "
                f"{floor['rss'] / MIB:.0f} MiB")
            runs = []
            for i in range(args.repeat):
                result = run_analyze(path, work / f"out-{name}-{i}")
                runs.append(result)
                log(f"{name}: run {i + 1}/{args.repeat}: {result['wall']:.2f} s wall, "
                    f"{result['cpu']:.2f} s CPU, peak RSS {result['rss'] / MIB:.0f} MiB, exit {result['rc']}")
                shutil.rmtree(work / f"out-{name}-{i}", ignore_errors=True)
            wall = statistics.median(r["wall"] for r in runs)
            cpu = statistics.median(r["cpu"] for r in runs)
            rss = max(r["rss"] for r in runs)
            limit_wall, limit_rss = TARGETS.get(name, (None, None))
            verdicts = []
            if limit_wall == "floor":
                verdicts.append("ok" if wall <= floor["wall"] else "MISSED")
            elif limit_wall is not None:
                verdicts.append("ok" if wall <= limit_wall else "MISSED")
            if limit_rss is not None:
                verdicts.append("ok" if rss <= limit_rss else "MISSED")
            failed = failed or "MISSED" in verdicts or any(r["rc"] != 0 for r in runs)
            rows.append({"name": name, "kind": kind, "facts": facts, "floor": floor, "wall": wall,
                         "cpu": cpu, "rss": rss, "target": " / ".join(verdicts) or "–",
                         "verdict": runs[0]["verdict"]})
            if args.cprofile and args.cprofile.lower() == name:
                print(run_cprofile(path, work, args.top))
            if not args.keep:
                path.unlink(missing_ok=True)
        print(f"`diagnose analyze` on synthetic profiles ({os.cpu_count()} cores, Python "
              f"{sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f}, "
              f"{args.repeat} run(s) per case)\n")
        print("| case | samples | distinct stacks | file MiB | wall s | CPU s | peak RSS MiB "
              "| floor wall s (CPU, MiB) | wall / floor | s per M samples | target | verdict |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
        previous = None
        for row in rows:
            facts, floor = row["facts"], row["floor"]
            slope = "–"
            if row["kind"] == "speedscope" and previous is not None:
                grown = (facts["samples"] - previous["facts"]["samples"]) / 1e6
                if grown > 0:
                    slope = f"{(row['wall'] - previous['wall']) / grown:.2f}"
            if row["kind"] == "speedscope":
                previous = row
            print(f"| {row['name']} ({row['kind']}) | {facts['samples']:,} | {facts['distinct_stacks']:,} "
                  f"| {facts['bytes'] / MIB:.0f} | {row['wall']:.2f} | {row['cpu']:.2f} "
                  f"| {row['rss'] / MIB:.0f} | {floor['wall']:.2f} ({floor['cpu']:.2f}, "
                  f"{floor['rss'] / MIB:.0f}) | {row['wall'] / floor['wall']:.2f} | {slope} "
                  f"| {row['target']} | {row['verdict'][:90]} |")
        return 1 if failed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
