#!/usr/bin/env python3
"""The asyncio task reader's own cost: wall time per snapshot of a live target's tasks.

    python benchmarks/asyncio_tasks.py [--tasks 100,1000] [--reads 20] [--pythons 3.11,3.12,3.13]

For each CPython found under ~/.pyenv/versions and each task count, starts a target holding
that many tasks suspended 3 frames deep (half behind an `asyncio.Semaphore`, a quarter on a
`Queue.get`, a quarter awaiting a plain Future), reads them `--reads` times with the reader
diagnose attach uses, and prints the median and worst time per snapshot, the per-task time and
the memory reads per snapshot. The target is not paused by a read; this is the reader's cost
(one core of the observer), not the target's. Run on a shared machine: compare rows of one run.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from diagnose.collect.asyncio_tasks.sampler import TaskReader  # noqa: E402

TARGET = r"""
import asyncio, sys
N = int(sys.argv[1])

async def guarded(sem):
    async with sem:
        await asyncio.sleep(3600)

async def consumer(queue):
    await queue.get()

async def batched(fut):
    await fut

async def request(i, sem, queue, fut):
    if i % 2 == 0:
        await guarded(sem)
    elif i % 4 == 1:
        await consumer(queue)
    else:
        await batched(fut)

async def main():
    sem, queue = asyncio.Semaphore(4), asyncio.Queue()
    fut = asyncio.get_running_loop().create_future()
    tasks = [asyncio.create_task(request(i, sem, queue, fut), name=f"req-{i}") for i in range(N)]
    await asyncio.sleep(0.2)
    print("READY", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def interpreters(wanted: list[str]) -> list[tuple[str, str]]:
    found = []
    for minor in wanted:
        paths = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{minor}.*/bin/python{minor}")))
        if paths:
            found.append((minor, paths[-1]))
        else:
            print(f"# CPython {minor}: not installed, skipped", file=sys.stderr)
    return found


def measure(python: str, count: int, reads: int) -> dict:
    target = subprocess.Popen([python, "-c", TARGET, str(count)], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout is not None
        if target.stdout.readline().strip() != "READY":
            raise RuntimeError("the target did not start")
        reader = TaskReader(target.pid)
        reader.snapshot()  # warm: the task sets found, code objects and type names cached
        times, seen, calls = [], 0, []
        for _ in range(reads):
            before = reader.mem.reads
            began = time.perf_counter()
            snapshot = reader.snapshot()
            times.append(time.perf_counter() - began)
            calls.append(reader.mem.reads - before)
            seen = len(snapshot.tasks)
        reader.close()
        return {"median": statistics.median(times), "max": max(times), "tasks": seen,
                "reads": statistics.median(calls)}
    finally:
        target.kill()
        target.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default="100,1000")
    parser.add_argument("--reads", type=int, default=20)
    parser.add_argument("--pythons", default="3.11,3.12,3.13")
    args = parser.parse_args()
    counts = [int(c) for c in args.tasks.split(",")]
    print(f"{'python':7} {'tasks':>6} {'read':>6} {'median ms':>10} {'max ms':>8} "
          f"{'us/task':>8} {'reads/snap':>10}")
    for minor, python in interpreters(args.pythons.split(",")):
        for count in counts:
            row = measure(python, count, args.reads)
            print(f"{minor:7} {count:6d} {row['tasks']:6d} {row['median'] * 1e3:10.2f} "
                  f"{row['max'] * 1e3:8.2f} {row['median'] * 1e6 / max(row['tasks'], 1):8.1f} "
                  f"{row['reads']:10.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
