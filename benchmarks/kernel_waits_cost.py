#!/usr/bin/env python3
"""The kernel wait reader's cost per blocked thread, beside the /proc sampler's own stat read.

    python benchmarks/kernel_waits_cost.py [--threads 64] [--wait lock] [--ticks 400]
    python benchmarks/kernel_waits_cost.py --pid PID      # a running process, as it is

Starts a target process whose request threads all sleep in the kernel (`lock`: each blocks on
one `threading.Lock` the main thread holds, a futex wait; `pipe`: each blocks in `os.read` on
an empty pipe, a descriptor the reader resolves once), then, in this process, times per tick
over every sleeping thread of it:

* `stat` read + parse: what ProcSampler.tick reads for every thread (`read_proc_text` of
  /proc/PID/task/TID/stat and `parse_stat`);
* `KernelWaitReader.observe`: what the tick adds for a thread in state S or D (its `syscall`
  file, a `wchan` read for calls it does not name, descriptors resolved the first time seen);
* `ProcSampler.tick` whole, with the reader on and off (`kernel_waits=`), per thread.

`--pid PID` times the same against a running process (a fixture workload) instead: every one of
its threads, whatever its state (the two loops then read some threads the tick would not: the
tick rows are the ones to read), and the share of thread-ticks the tick found asleep.

Each measure runs as one loop over the threads per tick (the timer is read twice a tick, not
per call), the measures in rotating order; the table gives the median and 90th percentile over
the ticks of (loop time / threads), as CPU time of this thread (CLOCK_THREAD_CPUTIME_ID: other
tenants of the machine do not inflate it) and as wall time. The last lines turn the medians
into a share of a core at the /proc interval `diagnose attach` plans for that many threads.
Standard library plus `diagnose` (the tree `import diagnose` finds: run from the repository).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from diagnose.collect import procfs  # noqa: E402
from diagnose.collect.kernel_waits import KernelRecord, KernelWaitReader, parse_syscall, syscall_name  # noqa: E402

TARGET = r"""
import os, sys, threading
n, wait = int(sys.argv[1]), sys.argv[2]
lock = threading.Lock()
lock.acquire()
r, w = os.pipe()
def worker():
    if wait == "lock":
        lock.acquire()
    else:
        os.read(r, 1)
threads = [threading.Thread(target=worker, daemon=True) for _ in range(n)]
for t in threads:
    t.start()
print("READY", flush=True)
sys.stdin.read()
"""


def start_target(threads: int, wait: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", TARGET, str(threads), wait],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "READY":
        proc.kill()
        raise SystemExit("the target did not start")
    return proc


def sleeping_threads(pid: int, want: int, timeout: float = 10.0) -> list[int]:
    """The target's threads in state S or D, once at least `want` of them are asleep."""
    deadline = time.monotonic() + timeout
    while True:
        tids = []
        for tid in procfs.list_tids(pid):
            stat = procfs.read_proc_text(f"/proc/{pid}/task/{tid}/stat")
            if stat and procfs.parse_stat(stat)[1] in ("S", "D"):
                tids.append(tid)
        if len(tids) >= want or time.monotonic() > deadline:
            return tids
        time.sleep(0.05)


def measures(pid: int, tids: list[int]) -> tuple[dict[str, callable], procfs.ProcSampler]:
    """name -> a function running one tick of that measure over `tids`; and the sampler
    with the reader on (its states tell how many thread reads found the thread asleep)."""
    reader = KernelWaitReader(pid, KernelRecord())
    on = procfs.ProcSampler(pid, kernel_waits=True)
    off = procfs.ProcSampler(pid, kernel_waits=False)
    for sampler in (on, off):
        sampler.start()  # the first tick reads each thread's counters once: not timed
        sampler.COUNTER_REFRESH_S = float("inf")  # the 2 s counter refresh: not timed either
    read, parse = procfs.read_proc_text, procfs.parse_stat
    paths = [f"/proc/{pid}/task/{tid}/stat" for tid in tids]

    def stat_tick() -> None:
        for path in paths:
            text = read(path)
            if text is not None:
                parse(text)

    def observe_tick() -> None:
        t = time.time()
        for tid in tids:
            reader.observe(t, tid)

    return {"`stat` read + `parse_stat`": stat_tick,
            "`KernelWaitReader.observe`": observe_tick,
            "`ProcSampler.tick`, kernel waits on": on.tick,
            "`ProcSampler.tick`, kernel waits off": off.tick}, on


def run(pid: int, tids: list[int], ticks: int,
        interval: float) -> tuple[dict[str, tuple[list, list]], float]:
    funcs, sampler = measures(pid, tids)
    names = list(funcs)
    cpu: dict[str, list[float]] = {name: [] for name in names}
    wall: dict[str, list[float]] = {name: [] for name in names}
    for tick in range(ticks):
        for name in names[tick % len(names):] + names[:tick % len(names)]:
            c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
            funcs[name]()
            c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
            cpu[name].append((c1 - c0) / 1e3 / len(tids))
            wall[name].append((w1 - w0) / 1e3 / len(tids))
        if interval:
            time.sleep(interval)
    states = [s[2] for s in sampler.record.state_samples]
    asleep = sum(state in ("S", "D") for state in states) / max(1, len(states))
    return {name: (cpu[name], wall[name]) for name in names}, asleep


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=64, help="sleeping threads (default 64)")
    parser.add_argument("--wait", choices=("lock", "pipe"), default="lock",
                        help="what they sleep in: a Lock's futex or a pipe read (default lock)")
    parser.add_argument("--ticks", type=int, default=400, help="ticks timed (default 400)")
    parser.add_argument("--pid", type=int, help="time against this running process instead")
    parser.add_argument("--interval", type=float, default=0.01,
                        help="seconds slept between ticks (default 0.01)")
    args = parser.parse_args()
    target = None if args.pid else start_target(args.threads, args.wait)
    pid = args.pid or target.pid
    try:
        if args.pid:
            tids = procfs.list_tids(pid)
            what = f"pid {pid}, every thread"
        else:
            tids = sleeping_threads(pid, args.threads)
            text = procfs.read_proc_text(f"/proc/{pid}/task/{tids[-1]}/syscall") or ""
            reading = parse_syscall(text)
            what = f"sleeping ({args.wait}: {syscall_name(reading.nr) if reading else '?'})"
        total = len(procfs.list_tids(pid))
        results, asleep = run(pid, tids, args.ticks, args.interval)
    finally:
        if target is not None:
            target.kill()
            target.wait()
    print(f"{len(tids)} of {total} threads {what}, asleep at {asleep:.0%} of the ticks' thread "
          f"reads, {args.ticks} ticks, "
          f"CPython {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} cores")
    print("| per thread per tick | CPU µs (median) | CPU µs (p90) | wall µs (median) | wall µs (p90) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, (cpu, wall) in results.items():
        print(f"| {name} | {statistics.median(cpu):.1f} | {p90(cpu):.1f} | "
              f"{statistics.median(wall):.1f} | {p90(wall):.1f} |")
    med = {name: statistics.median(cpu) for name, (cpu, _) in results.items()}
    stat_us, observe_us = med["`stat` read + `parse_stat`"], med["`KernelWaitReader.observe`"]
    tick_on = med["`ProcSampler.tick`, kernel waits on"]
    tick_off = med["`ProcSampler.tick`, kernel waits off"]
    print(f"\nobserve / stat: {observe_us / stat_us:.2f}; tick on / off: {tick_on / tick_off:.2f} "
          f"(+{tick_on - tick_off:.1f} µs per thread)")
    try:
        from diagnose.collect.plan import plan_sampling
        interval = plan_sampling(total, None).proc_interval_s
    except ImportError:
        interval = 0.1
    per_s = len(tids) / interval  # thread reads a second; % of a core = µs * per_s / 1e4
    print(f"at the planned /proc interval for {total} threads ({interval * 1e3:.0f} ms): "
          f"the tick costs {tick_on * per_s / 1e4:.2f} % of a core with the reader, "
          f"{tick_off * per_s / 1e4:.2f} % without (the reader: "
          f"{(tick_on - tick_off) * per_s / 1e4:.2f} %); the loops: observe "
          f"{observe_us * per_s / 1e4:.2f} %, stat {stat_us * per_s / 1e4:.2f} %")


if __name__ == "__main__":
    main()
