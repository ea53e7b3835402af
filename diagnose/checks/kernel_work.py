"""kernel_work: most of the service's CPU is the kernel's, working on system calls it makes.

What it finds:
    The share of the CPU the process (and its children) used over the window that was the
    kernel's time for it: its system time by /proc/PID/stat (stime: every thread it had, exited
    ones too). Beside it, where: the Python lines its threads made system calls from, read from
    native samples caught inside the C library's wrapper of a working call (write, read, openat,
    vfork, ...: model/syscall_sites.py), and which calls; or, from the process's counters, that
    the work is page faults (many minor faults, more than read and write calls: fresh memory
    touched on every request), which no frame shows; or that it is copying what the read calls
    take in (/proc/PID/io rchar, at the kernel's measured cost per GB, explains most of the
    system time: a file read again on every request, from the page cache when /proc/PID/io
    read_bytes says storage gave little of it). Without such samples (no native
    frames), each thread's own system time spread over the lines its running samples show,
    said as an estimate. Calls that sleep (a lock's futex,
    poll, a timer) are waits, left to the wait analysis. Not applicable without the process's
    counters (an older recording).

Why it matters:
    System time shows in no Python frame: a profile puts it on the line that made the call, as
    "running Python", and the other threads' waits for the GIL behind it as GIL contention. A
    file written line by line through an unbuffered file object, a socket read a few bytes at a
    time, a file opened and stat'ed per request, a process forked per request: each call costs
    the kernel's entry and exit whatever it moves. Vectorising the line or adding processes
    leaves the calls as they were.

What to do instead:
    Make fewer calls at the line named, by the kind of most of them (checks/kernel_calls.py):
    join messages sent on a socket into fewer, larger ones; buffer writes (open the file with a
    buffer, or join the pieces and write once); read in large blocks; keep files open and cache
    what a call returns; keep a worker process instead of starting one per request. Page faults
    and memory mapped per call: reuse the buffers. Reads whose copies are the work: read once
    what every call reads again (load the file at start-up and keep it, or map it), where a
    reused buffer would keep the copy. Sends and receives of one function, a request and its
    answer per item: fewer round trips, in the protocol's batch form (MGET, a pipeline, a bulk
    endpoint); the kernel's share is then a floor, the peer's work per item going too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from diagnose.checks.base import (MAX_CPU_SHARE, Finding, Lever, LeverKind, NotApplicable, ScoreBasis, Site,
                                  busy_samples, cpu_share_capped, cpu_share_gain, cpu_share_lever, cpu_weight,
                                  make_finding, pct, ramp, short_path)
from diagnose.checks.kernel_calls import CallKind, call_kind, fewer_calls_advice, round_trips
from diagnose.checks.scheduler_overhead import intra_op_libraries
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements
from diagnose.checks.spec import NOT_MEASURED, CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.report.model.findings import Fix
from diagnose.vocab import RUNNING

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis
    from diagnose.model.os_summary import ProcessOS

ID = "kernel_work"


# What fewer round trips remove beyond the kernel's work, which its share does not count.
ROUND_TRIP_UNCOUNTED = "the peer's work and the service's own Python per item, which the kernel's share does not count"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "The kernel does most of the work: system calls, page faults"
    what: str = ("Share of the CPU the service and its children used that was the kernel's time for the service's "
                 "threads (system time, /proc/PID/stat stime).")
    advice: tuple[str, ...] = (
        ("System time is in no Python frame: a profile shows it as the calling line running Python, and the "
         "other threads' GIL waits behind it. Vectorising that line or adding processes keeps every call."),
    )
    # the kernel's share of the CPU
    low: float = 0.20
    high: float = 0.45
    # the process's CPU, in cores, under which the kernel's time costs latency rather than throughput
    busy_cores: float = 0.2
    # the request threads' busy share under which a gain in throughput is not predicted, unless
    # the process keeps this share of the usable cores busy: a thread inside a read the page
    # cache serves samples as waiting on I/O while the kernel copies on its core
    saturated_share: float = 0.5
    saturated_cores: float = 0.8
    # the calls' share of the native samples under which the sites are not named
    min_call_samples: int = 3
    # Minor page faults per second from which, when they also outnumber the read and write calls,
    # fresh memory touched on every request is taken for the kernel's work. A first touch of a
    # page costs the kernel 2.6-3.6 us per 4 KB page and ~120-260 us per 2 MB huge page here, a
    # 1-byte read or write 0.2-0.3 us (benchmarks/fault_cost.py); a Python service at rest faults a few
    # hundred times a second, a busy one up to ~30,000 times with a few percent of system time
    # (the gil_contention fixture: 28,000/s, 9% system), which the share's floor leaves out.
    faults_per_s: float = 1000.0
    # The kernel's time to copy 1 GB into the process through read calls from the page cache
    # (0.15-0.17 s here, into a reused buffer or by np.load into a fresh array, whose huge pages
    # fault little: benchmarks/fault_cost.py), and the share of the system time such copies must
    # explain for the kernel's work to be taken for reading (a 40 MB weights file np.load-ed per
    # request: 60-72%). Into fresh bytes the faults cost 2.3x the copy: reusing the buffer pays there.
    copy_s_per_gb: float = 0.16
    reads_share: float = 0.5


@dataclass(frozen=True, kw_only=True)
class KernelWorkEvidence(Measurements):
    kernel_share: float = key("share of the CPU that was the kernel's time for the service (system time)", U.PERCENT)
    kernel_cpu_s: float = key("system time over the window (/proc/PID/stat stime)", U.SECONDS)
    process_cpu_s: float = key("CPU of the process and its reaped children over the window", U.SECONDS)
    kernel_cores: float | None = key("cores the kernel kept busy for the service", U.CORES)
    syscall_samples: int | None = key("native samples inside a working system call", U.SAMPLES, none=NOT_MEASURED)
    native_samples: int | None = key("native samples of the process's Python threads", U.SAMPLES, none=NOT_MEASURED)
    syscalls: dict[str, int] | None = key("system calls the native samples were inside (samples)", U.NUMBER,
                                          none=NOT_MEASURED)
    syscall_sites: dict[str, float] | None = key("lines the calls were made from (share of the calls' samples)",
                                                 U.PERCENT, none=NOT_MEASURED)
    minor_faults_per_s: float | None = key("minor page faults per second, the process's every thread "
                                           "(/proc/PID/stat minflt)", U.PER_S, none=NOT_MEASURED)
    io_calls_per_s: float | None = key("read- and write-family system calls per second (/proc/PID/io syscr + "
                                       "syscw)", U.PER_S, none=NOT_MEASURED)
    read_mb_per_s: float | None = key("bytes the process's read calls took in (/proc/PID/io rchar)", U.MB_PER_S,
                                      none=NOT_MEASURED)
    read_call_bytes: float | None = key("bytes per read call (rchar / syscr)", U.NUMBER, none=NOT_MEASURED)
    storage_read_share: float | None = key("share of those bytes fetched from storage (/proc/PID/io, bytes read "
                                           "from storage); the rest the page cache or a pipe served", U.PERCENT,
                                           none=NOT_MEASURED)
    read_copy_share: float | None = key("estimated: share of the system time copying those bytes takes "
                                        "(at the measured system seconds per GB)", U.PERCENT, none=NOT_MEASURED)
    stime_sites: dict[str, float] | None = key(
        "estimated, where no native sample caught a call: the lines each thread's running samples show, "
        "weighted by that thread's system time (share of the system time)", U.PERCENT, none=NOT_MEASURED)
    fix: Fix = shared_key()


EVIDENCE = declarations(KernelWorkEvidence)


# System calls that map, unmap or move the process's memory.
MEMORY_MAPPING_CALLS = frozenset({"mmap", "mmap64", "munmap", "mremap", "brk", "sbrk", "madvise", "mprotect"})


READ_CALLS = frozenset({"read", "pread", "readv", "preadv"})


def _reads_lead(calls: tuple[tuple[str, int], ...]) -> bool:
    """Most of the working calls' samples were in read-family calls."""
    total = sum(n for _name, n in calls)
    return bool(total) and sum(n for name, n in calls if name in READ_CALLS) * 2 > total


def _mapping_memory(calls: tuple[tuple[str, int], ...] | list[tuple[str, int]]) -> bool:
    """Most of the working calls' samples were in calls that map or unmap memory."""
    total = sum(n for _name, n in calls)
    return bool(total) and sum(n for name, n in calls if name in MEMORY_MAPPING_CALLS) * 2 > total


def _touching_fresh_memory(os_: ProcessOS, settings: Settings) -> bool:
    """The kernel's work is pages mapped on first touch (the process takes many minor faults,
    more than it makes read and write calls), not calls that move data: fresh buffers allocated
    per request, unmapped again when they are freed. No native frame shows a fault; the
    counters do."""
    rate = os_.minor_faults_per_s
    if rate is None or rate < settings.faults_per_s:
        return False
    return os_.io_syscalls is None or (os_.minor_faults or 0) > os_.io_syscalls


def _read_copy_share(os_: ProcessOS, kernel_s: float, settings: Settings) -> float | None:
    """The estimated share of the kernel's time `kernel_s` spent copying what the process's read
    calls took in (rchar, at copy_s_per_gb); None without the counter or the time."""
    if os_.read_bytes is None or kernel_s <= 0:
        return None
    return min(1.0, os_.read_bytes / 1e9 * settings.copy_s_per_gb / kernel_s)


def _storage_words(os_: ProcessOS) -> str:
    """Where the bytes read came from, by the storage counter: memory (the same data read
    again) or storage."""
    if os_.storage_read_bytes is None or not os_.read_bytes:
        return ""
    stored = os_.storage_read_bytes / os_.read_bytes
    if stored < 0.1:
        return (f", {pct(1 - stored)} of it served from memory (the page cache, or a pipe), not storage: "
                f"the same data read again")
    return f", {pct(min(1.0, stored))} of it fetched from storage"


def _reading_advice(os_: ProcessOS, share: float, at: str, copy_share: float) -> str:
    """The kernel's work is copying what read calls take in: a file every request reads again
    (a weights file np.load-ed per request: 60-72% of the system time, loaded once 1.80-5.42x). Reusing
    the buffer keeps the copy (0.15-0.17 s/GB either way); reading it once removes it."""
    per_call = os_.bytes_per_read
    return (f"Read once what every call reads again{at}: the process's read calls took in "
            f"{(os_.read_bytes_per_s or 0.0) / 1e9:.2f} GB a second"
            + (f" ({per_call / 1e6:,.1f} MB a call)" if per_call else "") + _storage_words(os_)
            + f"; copying it is an estimated {pct(copy_share)} of the kernel's time ({pct(share)} of the CPU was "
            f"the kernel's). Load a file every request needs at start-up and keep it (or cache it by path and "
            f"modification time), map a large array instead of copying it (np.load(path, mmap_mode=\"r\"), "
            f"mmap), and read only the part a call uses. A buffer reused for the read keeps the copy.")


def _score(share: float, cores: float | None, settings: Settings) -> float:
    return ramp(share, settings.low, settings.high) * cpu_weight(cores, settings.busy_cores)


def _busy_share(analysis: Analysis) -> float | None:
    req = analysis.request_samples()
    total = float(req["count"].sum())
    return float(busy_samples(req)["count"].sum()) / total if total else None


def _spread(weights: dict[int, float], system_s: float, site: np.ndarray, count: np.ndarray) -> None:
    """`system_s` over the sites of some running samples, by their counts, into `weights`."""
    total = float(count.sum())
    sites, first_at, at = np.unique(site, return_index=True, return_inverse=True)
    per_site = np.bincount(at, weights=count)
    for k in np.argsort(first_at):  # in the order the samples name them
        frame_id = int(sites[k])
        weights[frame_id] = weights.get(frame_id, 0.0) + system_s * float(per_site[k]) / total


def _stime_sites(analysis: Analysis, settings: Settings) -> list[Site]:
    """Without native samples inside the calls (py-spy without --native, a recording without
    them): each thread's system time (/proc/TID/stat stime) spread over the lines its running
    samples show, an estimate. A thread that writes in a loop shows the write's line; the
    weights keep a busy thread that makes no calls from claiming another's system time. The
    process's system time no read thread's counter holds (threads that came and went between
    the sampler's ticks: a thread per request) is spread over the running samples of the
    threads without a counter, else it would land on the long-lived threads that start them."""
    os_ = analysis.os
    if os_ is None:
        return []
    # running samples only: a thread waiting for the GIL is not where its system time went
    running = analysis.samples["state"].isin(RUNNING).to_numpy()
    thread = analysis.samples["thread"].to_numpy()[running]
    site = analysis.samples["site"].to_numpy()[running]
    count = analysis.samples["count"].to_numpy()[running]
    tids = analysis.threads["tid"]
    weights: dict[int, float] = {}  # site frame -> estimated system seconds
    seen = 0
    uncounted: list[int] = []  # threads the samples show whose counters the sampler never read twice
    _, first_rows = np.unique(thread, return_index=True)
    for row in np.sort(first_rows):  # threads, then their sites, in the order the samples name them
        tid = int(tids.loc[thread[row]])
        system_s = os_.threads[tid].system_s if os_.counted(tid) else None
        if system_s is None:
            uncounted.append(int(thread[row]))
            continue
        sited = (thread == thread[row]) & (site >= 0)
        total = float(count[sited].sum())
        if not system_s or not total:
            continue
        seen += int(total)
        _spread(weights, system_s, site[sited], count[sited])
    read = [t.system_s for t in os_.threads.values() if t.system_s is not None]
    # (a recording that read no thread's system time names no line: the older ones)
    unheld = max(0.0, (os_.process_system_s or 0.0) - sum(read)) if read else 0.0
    sited = np.isin(thread, uncounted) & (site >= 0)
    if unheld > 0 and count[sited].sum() > 0:
        seen += int(count[sited].sum())
        _spread(weights, unheld, site[sited], count[sited])
    spread = sum(weights.values())
    if seen < settings.min_call_samples or spread <= 0:
        return []
    ranked = sorted(weights.items(), key=lambda kv: -kv[1])[:3]
    return [Site(frame.function, frame.file, frame.line, round(w / spread, 4))
            for frame, w in ((analysis.frame(f), w) for f, w in ranked)]


def _line(site: Site) -> str:
    """`function (dir/file.py:42)`: a site in a sentence."""
    return f"{site.function} ({short_path(site.file)}:{site.line})"


def _where(os_: ProcessOS, faulting: bool, sites: list[Site], estimated: list[Site], top_calls: str,
           copy_share: float | None = None) -> str:
    """The summary's account of where the kernel's time went: the reads' copies, the faults, the
    calls' line, or the estimate's line."""
    if copy_share is not None:
        shown = sites or estimated
        return (f"; its read calls took in {(os_.read_bytes_per_s or 0.0) / 1e9:.2f} GB a second, whose copying "
                f"is an estimated {pct(copy_share)} of it"
                + (f", most at {_line(shown[0])}" + ("" if sites else " (by each thread's system time over the "
                                                      "lines it ran, an estimate)") if shown else ""))
    if faulting:
        return (f"; {os_.minor_faults_per_s or 0:,.0f} page faults a second: fresh memory"
                + (f", by each thread's system time over the lines it ran (an estimate) most at "
                   f"{_line(estimated[0])}, {pct(estimated[0].share)}" if estimated else ""))
    if sites:
        return f"; its threads were inside {top_calls} called from {_line(sites[0])}"
    if estimated:
        return (f"; no native sample caught a call: by each thread's system time over the lines it ran "
                f"(an estimate), most at {_line(estimated[0])}, {pct(estimated[0].share)}")
    return "; no native sample caught a working call, so no line is named"


def _memory_advice(os_: ProcessOS, share: float, at: str, mapping_calls: str | None, faulting: bool) -> str:
    """Memory mapped, touched and unmapped at the line on every call: a large buffer of its own
    per request (above glibc's mmap threshold; the kernel zero-fills each page on its first
    touch: fresh_buffers, 80% system time, reused 5.87x), or CPython's frame stack growing a
    chunk past a deep recursion's edge and giving it back on return (measured on 3.11: 400
    frames deep, 49% system time; 100 deep, none). No buffering of I/O helps."""
    seen = []
    if mapping_calls:
        seen.append(f"the threads were inside {mapping_calls}")
    if faulting:
        seen.append(f"the process took {os_.minor_faults_per_s or 0:,.0f} page faults a second, "
                    f"each a page the kernel maps and zero-fills on its first touch")
    return (f"Stop mapping and unmapping memory on every call{at}: {' and '.join(seen)} ({pct(share)} of the "
            f"CPU was the kernel's). Reuse the buffers instead of allocating large ones per call (once per "
            f"thread or from a pool; numpy's out= arguments, fixed tensor shapes so the framework's caching "
            f"allocator reuses its blocks); where the line recurses, make the recursion iterative or shallower "
            f"(CPython maps a new chunk of its frame stack when a call chain passes its edge and unmaps it on "
            f"the way back).")


def run(analysis: Analysis, settings: Settings) -> Finding | NotApplicable:
    os_ = analysis.os
    if os_ is None or os_.process_system_s is None or os_.process_user_s is None:
        return NotApplicable(ID, "needs the process's own CPU split into user and system time (/proc/PID/stat, "
                                 "read by `attach`); this recording predates it")
    total = os_.process_user_s + os_.process_system_s + (os_.reaped_children_s or 0.0)
    # An intra-op pool's own threads (no Python frames: OpenBLAS's, OpenMP's) spin for work in
    # sched_yield: their system time is the pool's synchronisation (scheduler_overhead's
    # fan-out), not calls the service's code makes. blas_fanout on CPython 3.6 read "the kernel
    # does most of the work, 63%", 0.49 s of its 0.66 s the one pool thread's.
    pool = analysis.working_native_system_s if intra_op_libraries(analysis) else 0.0
    kernel = max(0.0, os_.process_system_s - pool)
    children = analysis.children
    if children is not None:
        total += children.alive_s
    if total <= 0:
        return NotApplicable(ID, "the process used no CPU over the window")
    share = kernel / total
    cores = total / os_.window_s if os_.window_s else None
    score = _score(share, cores, settings)
    calls = analysis.syscalls
    named = calls is not None and calls.in_calls >= settings.min_call_samples
    sites = ([Site(s.function, s.file, s.line, round(s.samples / calls.in_calls, 4)) for s in calls.sites]
             if named and calls is not None else [])
    # Page faults show in no native call: where the system time went is where the threads ran,
    # weighted by their system time (the calls' samples name where the buffers are unmapped)
    faulting = _touching_fresh_memory(os_, settings)
    # Reads whose copies explain most of the kernel's time: their line is the read calls' (the
    # fresh arrays they fill fault too, and go with them)
    copy_share = _read_copy_share(os_, kernel, settings)
    reading = copy_share is not None and copy_share >= settings.reads_share
    if reading:
        sites = sites if calls is not None and _reads_lead(calls.calls) else []
        faulting = False
    estimated = _stime_sites(analysis, settings) if faulting or not sites else []
    busy = _busy_share(analysis)
    saturated = (busy is None or busy >= settings.saturated_share
                 or os_.cpu_utilization >= settings.saturated_cores)
    gain = cpu_share_gain(share) if saturated else 1.0
    # a request and its answer, item after item, from one function: fewer round trips take the
    # peer's work per item and the service's own Python per item too
    round_trip = (not reading and not faulting and bool(sites) and calls is not None and named
                  and round_trips(calls.top_caller_calls))
    if saturated and round_trip:
        gain_words = (f"estimate: the kernel's work is {pct(share)} of the CPU; fewer round trips remove most of it, "
                      f"and {ROUND_TRIP_UNCOUNTED}: at least {gain:.2f}x (Amdahl on the kernel's share"
                      + (f", capped at {pct(MAX_CPU_SHARE)})" if cpu_share_capped(share) else ")"))
    elif saturated:
        remedy = "reading once" if reading else "buffers reused" if faulting else "fewer, larger calls"
        gain_words = (f"estimate: the kernel's work is {pct(share)} of the CPU; if {remedy} removed most "
                      + (f"of it, about {gain:.2f}x (Amdahl, its share capped at {pct(MAX_CPU_SHARE)}, where a "
                         f"share says only 'large')"
                         if cpu_share_capped(share) else f"of it, at most {gain:.2f}x (Amdahl)"))
    else:
        gain_words = (f"estimate: the request threads were busy {pct(busy or 0.0)} of the time, so the kernel's "
                      f"{pct(share)} of the CPU costs their requests latency, not the service throughput")
    top_calls = ", ".join(f"{name}" for name, _ in calls.calls[:3]) if named and calls is not None else ""
    # the line the summary and the advice name: the calls' own, else the estimate's, said as one
    shown = (estimated or sites) if faulting else (sites or estimated)
    where = _where(os_, faulting, sites, estimated, top_calls, copy_share if reading else None)
    summary = (f"{pct(share)} of the CPU was the kernel's ({kernel:.2f} s of system time over "
               f"{os_.window_s:.1f} s" + (f"; an intra-op pool's own {pool:.2f} s left out" if pool else "")
               + ")" + where)
    evidence = KernelWorkEvidence(
        kernel_share=share, kernel_cpu_s=kernel, process_cpu_s=total,
        kernel_cores=kernel / os_.window_s if os_.window_s else None,
        syscall_samples=calls.in_calls if calls is not None else None,
        native_samples=calls.samples if calls is not None else None,
        syscalls=dict(calls.calls) if calls is not None else None,
        syscall_sites={_line(s): s.share for s in sites} if sites else None,
        stime_sites={_line(s): s.share for s in estimated} if estimated else None,
        minor_faults_per_s=os_.minor_faults_per_s, io_calls_per_s=os_.io_calls_per_s,
        read_mb_per_s=os_.read_bytes_per_s / 1e6 if os_.read_bytes_per_s is not None else None,
        read_call_bytes=os_.bytes_per_read,
        storage_read_share=(os_.storage_read_bytes / os_.read_bytes
                            if os_.storage_read_bytes is not None and os_.read_bytes else None),
        read_copy_share=copy_share,
        fix=Fix("batch_syscalls", f"{sites[0].function}:{sites[0].line}" if sites else True))
    at = f" at {_line(shown[0])}" if shown else ""
    if shown and shown is estimated:
        at += ", by an estimate from the threads' system time"
    mapping = named and calls is not None and _mapping_memory(calls.calls)
    if reading and copy_share is not None:
        advice = [_reading_advice(os_, share, at, copy_share)]
        evidence = replace(evidence, fix=Fix("read_once", f"{shown[0].function}:{shown[0].line}" if shown
                                             else True))
    elif faulting or mapping:
        advice = [_memory_advice(os_, share, at, top_calls if mapping else None, faulting)]
        evidence = replace(evidence, fix=Fix("reuse_memory", f"{shown[0].function}:{shown[0].line}" if shown
                                             else True))
    else:
        kind = call_kind(calls.calls) if named and calls is not None else CallKind.MIXED
        if round_trip:
            kind = CallKind.ROUND_TRIP
            evidence = replace(evidence, fix=Fix("batch_round_trips", f"{sites[0].function}:{sites[0].line}"))
        advice = [fewer_calls_advice(kind, at, pct(share))]
    advice += list(settings.advice)
    work = "reads' copies" if reading else "page faults" if faulting else "system calls"
    # Round trips rank the advice's own lever: it removes more than the calls, so Amdahl on the
    # kernel's share is its floor. Otherwise the work made free, whose figure past the cap is a
    # floor too; the advice's own is not (it removes most of the work, not all of it: a buffered
    # spool file measured 3.24x where the cap said 4.00x).
    levers = ([Lever(LeverKind.REMOVE_WORK, round(cpu_share_gain(share), 2), "with fewer round trips",
                     f"estimate: the kernel's time is {pct(share)} of the CPU; fewer round trips remove most of "
                     f"it, and {ROUND_TRIP_UNCOUNTED}: at least {cpu_share_gain(share):.2f}x (Amdahl on the "
                     f"kernel's share), a floor")] if round_trip
              else [cpu_share_lever(f"if the {work} cost nothing", "the kernel's time is", share)])
    found = make_finding(ID, settings, score, summary, evidence, sites=shown, advice=advice,
                         gain=(gain, gain_words), levers=levers,
                         basis=ScoreBasis("kernel_share", lambda s: _score(s, cores, settings),
                                          cpu_share_gain if saturated else None))
    if round_trip and saturated and isinstance(found, Finding):
        # a GET per key measured 9.88x where the kernel's share said 2.60x
        found = replace(found, gain_floor=f"fewer round trips also remove {ROUND_TRIP_UNCOUNTED}")
    return found


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 uses=(Input.NATIVE_FRAMES, Input.OS_COUNTERS))
