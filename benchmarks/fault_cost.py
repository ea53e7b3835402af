#!/usr/bin/env python3
"""What the kernel's work costs per event on this machine: a page fault against a small call.

    python benchmarks/fault_cost.py [--megabytes 256] [--rounds 4] [--calls 200000]

kernel_work tells page faults from system calls by the counters (/proc/PID/stat minflt beside
/proc/PID/io syscr + syscw): when a process takes many minor faults and more of them than read
and write calls, its system time is fresh memory, not I/O. That rests on a fault costing the
kernel at least what a small call does. This measures both in this process, by getrusage's
system time and fault count:

* a first touch of a fresh anonymous 4 KB page (an mmap'd region filled through a memoryview:
  no transparent huge pages, which need madvise here);
* the same with numpy's arrays when numpy is installed (numpy asks for huge pages on large
  arrays: fewer faults, each zero-filling 2 MB);
* a 1-byte write(2) to /dev/null and a 1-byte read(2) from /dev/zero;
* the copy a read(2) of a file the page cache holds makes (`--file-megabytes`, read whole,
  `--rounds` x 4 times): into one reused buffer, into fresh bytes, and by numpy's `np.load`. The
  kernel's work for a file read again per request (kernel_work's `copy_s_per_gb`).

Standard library (numpy optional). Prints two tables: microseconds of system time per event, and
system seconds per GB read.
"""

from __future__ import annotations

import argparse
import mmap
import os
import resource
import tempfile


def _rusage() -> tuple[float, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_stime, r.ru_minflt


def page_faults(megabytes: int, rounds: int) -> tuple[float, int]:
    """System seconds and faults for `rounds` fresh mappings of `megabytes`, each touched."""
    size = megabytes << 20
    page = b"\x01" * mmap.PAGESIZE
    s0, f0 = _rusage()
    for _ in range(rounds):
        region = mmap.mmap(-1, size)
        view = memoryview(region)
        for offset in range(0, size, mmap.PAGESIZE):
            view[offset:offset + mmap.PAGESIZE] = page
        view.release()
        region.close()
    s1, f1 = _rusage()
    return s1 - s0, f1 - f0


def numpy_faults(megabytes: int, rounds: int) -> tuple[float, int] | None:
    try:
        import numpy as np
    except ImportError:
        return None
    s0, f0 = _rusage()
    for _ in range(rounds):
        array = np.empty((megabytes << 20) // 4, dtype=np.float32)
        array.fill(1.0)
        del array
    s1, f1 = _rusage()
    return s1 - s0, f1 - f0


def small_calls(calls: int) -> tuple[float, float]:
    """System seconds per 1-byte write to /dev/null and per 1-byte read from /dev/zero."""
    out, inp = os.open("/dev/null", os.O_WRONLY), os.open("/dev/zero", os.O_RDONLY)
    try:
        s0, _ = _rusage()
        for _ in range(calls):
            os.write(out, b"x")
        s1, _ = _rusage()
        for _ in range(calls):
            os.read(inp, 1)
        s2, _ = _rusage()
    finally:
        os.close(out)
        os.close(inp)
    return (s1 - s0) / calls, (s2 - s1) / calls


def cached_reads(megabytes: int, rounds: int) -> list[tuple[str, float, float]]:
    """(kind, GB read, system s) for a file of `megabytes` the page cache holds, read whole
    `rounds` times each way."""
    size = megabytes << 20
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cached.bin")
        try:
            import numpy as np
        except ImportError:
            np = None
        if np is not None:
            path += ".npy"
            np.save(path, np.ones(size // 4, dtype=np.float32))
        else:
            with open(path, "wb") as out:
                out.write(b"\x01" * size)
        buffer = bytearray(os.path.getsize(path))

        def reused():
            with open(path, "rb", buffering=0) as f:
                f.readinto(buffer)

        def fresh():
            with open(path, "rb") as f:
                f.read()

        kinds = [("into one reused buffer (readinto)", reused), ("into fresh bytes (read)", fresh)]
        if np is not None:
            kinds.append(("by np.load (a fresh array)", lambda: np.load(path)))
        for name, read in kinds:
            read()  # the file in the page cache, the first mapping made
            s0, _ = _rusage()
            for _ in range(rounds):
                read()
            s1, _ = _rusage()
            rows.append((name, rounds * len(buffer) / 1e9, s1 - s0))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=256, help="size of each fresh region (default 256)")
    parser.add_argument("--rounds", type=int, default=4, help="fresh regions per kind (default 4)")
    parser.add_argument("--calls", type=int, default=200_000, help="small calls per kind (default 200000)")
    parser.add_argument("--file-megabytes", type=int, default=40,
                        help="size of the cached file read again (default 40)")
    args = parser.parse_args()
    rows = []
    seconds, faults = page_faults(args.megabytes, args.rounds)
    rows.append(("first touch of a 4 KB page (mmap + memoryview)", faults, seconds))
    measured = numpy_faults(args.megabytes, args.rounds)
    if measured is not None:
        rows.append(("first touch, numpy array (huge pages where granted)", measured[1], measured[0]))
    write_s, read_s = small_calls(args.calls)
    rows.append(("write(2) of 1 byte to /dev/null", args.calls, write_s * args.calls))
    rows.append(("read(2) of 1 byte from /dev/zero", args.calls, read_s * args.calls))
    print("| event | events | system s | us per event |")
    print("| --- | ---: | ---: | ---: |")
    for name, count, secs in rows:
        per = 1e6 * secs / count if count else float("nan")
        print(f"| {name} | {count} | {secs:.3f} | {per:.2f} |")
    print()
    print("| a cached file read again | GB | system s | system s per GB |")
    print("| --- | ---: | ---: | ---: |")
    for name, gigabytes, secs in cached_reads(args.file_megabytes, 4 * args.rounds):
        print(f"| {name} | {gigabytes:.2f} | {secs:.3f} | {secs / gigabytes:.3f} |")


if __name__ == "__main__":
    main()
