"""Every core-second accounted: where the CPU the kernel counted for the service went.

The kernel's counters say how much (collect/procfs.py): each sampled process's own user and
kernel time over the window (/proc/PID/stat utime and stime: every thread it had, exited ones
too), the CPU of the children it reaped meanwhile (cutime + cstime: whatever those ran before),
and the CPU of its descendants that were not sampled (a shell, a converter: their own and their
reaped children's). The samples say where the user time went:

- the user time of threads with no Python frames (an intra-op pool) is native code, measured;
- the user time of the Python threads is split by their running samples: with native frames,
  into Python code, native libraries and the garbage collector (model/collector.py; a process
  of a tree the native calibration did not sample takes the split of one running the same
  program); with Python frames only, into Python and native by the states the frames give, the
  collector not told apart. An estimate: a share of samples applied to measured seconds. A
  process whose collector's counters (read from its memory, collect/gc_state.py) say no
  collection ran in the window spent nothing in the collector, whatever frames it has or
  borrows;
- user time no thread's counters hold (threads that exited between the counters' snapshots: a
  thread per request) goes with the Python threads' when the samples show such threads running
  (an estimate, noted); otherwise, and Python threads' time no running sample apportions, it is
  unexplained.

Kernel time (stime) is the kernel's work for the service's threads (syscalls, page faults): no
Python frame shows it. A sampled child that exited and was reaped by a sampled parent is counted
once, as itself (its window's CPU is taken out of its parent's reaped children).

Old recordings lack the process-level counters: no account (None), and the report says "not
measured".
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnose.model.analysis import Analysis
from diagnose.model.service import Service, program_of
from diagnose.vocab import CpuPart, ThreadState
from diagnose.report.model.account import CpuAccount, CpuShare


# Running samples under which the user time's split is said to be of low confidence: a share of
# 30 samples is uncertain by up to +-18 points (95%, binomial at one half), of 2 samples by +-69.
MIN_SPLIT_SAMPLES = 30


def _split_confidence_note(samples: int) -> str | None:
    """What the account says of a split resting on few running samples; None when enough."""
    if not samples or samples >= MIN_SPLIT_SAMPLES:
        return None
    points = min(100, round(196 * (0.25 / samples) ** 0.5))
    return (f"the user time's split rests on {samples} running sample{'s' if samples > 1 else ''}: low "
            f"confidence, each estimated part's share of the user time uncertain by up to +-{points} "
            f"points (95%)")


@dataclass(frozen=True)
class _UserSplit:
    """How a process's Python threads' running samples divide: Python, native, the collector
    (None: not told apart), out of `samples`; `native_frames`: read from native samples."""

    python: float
    native: float
    collector: float | None
    samples: int
    native_frames: bool


def _native_split(analysis: Analysis) -> _UserSplit | None:
    """The split by this process's native samples; None without any that ran."""
    measured = analysis.collector
    if measured is None or not measured.running_samples or not measured.readable:
        return None
    n = measured.running_samples
    python = n - measured.collector_samples - measured.native_samples
    return _UserSplit(max(python, 0) / n, measured.native_samples / n, measured.collector_samples / n,
                      n, True)


def _split(analysis: Analysis, sibling: _UserSplit | None = None) -> _UserSplit | None:
    """The running samples' split of this process's Python threads: by its native samples; else
    by those of a process running the same program (the native calibration samples one process
    of each program); else by its Python frames. None when none ran."""
    own = _native_split(analysis)
    if own is not None:
        return own
    if sibling is not None:
        return _UserSplit(sibling.python, sibling.native, sibling.collector, 0, True)
    samples = analysis.samples
    running = samples[samples["state"].isin((ThreadState.PYTHON, ThreadState.NATIVE))]
    total = float(running["count"].sum())
    if not total:
        return None
    native = float(running[running["state"] == ThreadState.NATIVE]["count"].sum())
    return _UserSplit((total - native) / total, native / total, None, int(total), False)


@dataclass
class _Tally:
    python: float = 0.0
    native: float = 0.0
    collector: float = 0.0
    kernel: float = 0.0
    reaped: float = 0.0
    unexplained: float = 0.0
    apportioned: float = 0.0  # user time of threads gone between reads, split by their samples
    samples: int = 0
    collector_measured: bool = True  # every process's collector told apart, or known idle
    collector_by_frames: int = 0  # processes whose collector's share came from native frames
    collector_idle: int = 0  # processes whose collector's counters say no collection ran
    native_frames: bool = True


def _add_process(tally: _Tally, analysis: Analysis, sibling: _UserSplit | None = None) -> bool:
    """The process's own CPU into the tally; False when its counters lack the process-level
    times (an older recording). `sibling`: the native split of a process running the same
    program, for one with no native samples of its own."""
    os_ = analysis.os
    if os_ is None or os_.process_user_s is None or os_.process_system_s is None:
        return False
    user = os_.process_user_s
    tally.kernel += os_.process_system_s
    tally.reaped += os_.reaped_children_s or 0.0
    python_tids = {int(t) for t in analysis.threads["tid"]}
    python_user = sum(t.user_s or 0.0 for tid, t in os_.threads.items() if tid in python_tids)
    other_user = sum(t.user_s or 0.0 for tid, t in os_.threads.items() if tid not in python_tids)
    placed = python_user + other_user
    if placed > user > 0:  # threads' first counters read an instant after the process's
        python_user, other_user = python_user * user / placed, other_user * user / placed
    unheld = max(0.0, user - python_user - other_user)
    if unheld and _uncounted_threads_ran(analysis):
        # threads that came and went between the counters' reads (a thread per request): their
        # running samples are the Python threads', so their time splits as those threads' does
        python_user += unheld
        tally.apportioned += unheld
    else:
        tally.unexplained += unheld
    tally.native += other_user
    split = _split(analysis, sibling)
    if split is None:
        tally.unexplained += python_user
        return True
    tally.samples += split.samples
    tally.native_frames &= split.native_frames
    if _collector_idle(analysis):
        # The counters outrank a split borrowed from a sibling: no collection ran here, so the
        # collector's share goes back to the code's parts in their proportion.
        code = split.python + split.native
        tally.python += python_user * (split.python / code if code else 1.0)
        tally.native += python_user * (split.native / code if code else 0.0)
        tally.collector_idle += 1
        return True
    tally.python += python_user * split.python
    tally.native += python_user * split.native
    if split.collector is not None:
        tally.collector += python_user * split.collector
        tally.collector_by_frames += 1
    else:
        tally.collector_measured = False
    return True


def _uncounted_threads_ran(analysis: Analysis) -> bool:
    """Some Python thread ran in the samples whose counters the sampler never read twice."""
    os_ = analysis.os
    samples = analysis.samples
    if os_ is None or not len(samples):
        return False
    running = samples["state"].isin((ThreadState.PYTHON, ThreadState.NATIVE)).to_numpy()
    ran = {int(t) for t in samples["tid"].to_numpy()[running]}
    return any(not os_.counted(tid) for tid in ran)


def _collector_idle(analysis: Analysis) -> bool:
    """No collection ran in the window, by the collector's own counters: exact, unlike a share
    of samples (a young collection counts one however short)."""
    state = analysis.os.collector if analysis.os is not None else None
    return (state is not None and state.unreadable is None and state.collections is not None
            and not any(state.collections))


def _reaped_twice(service: Service) -> float:
    """CPU of sampled processes that exited in the window under a sampled parent: counted as
    themselves, and again (their whole life's) in the parent's reaped children."""
    pids = {view.pid for view in service.processes}
    twice = 0.0
    for view in service.processes:
        os_ = view.analysis.os
        if view.exited_s is None or view.ppid not in pids or os_ is None:
            continue
        twice += (os_.process_user_s or 0.0) + (os_.process_system_s or 0.0)
    return twice


def _collector_how(tally: _Tally, by_frames: str) -> str:
    if not tally.collector_measured:
        return "not measured: no native frames tell the collector from the code"
    if not tally.collector_idle:
        return by_frames
    many = "es" if tally.collector_idle > 1 else ""
    idle = f"no collection ran in {tally.collector_idle} process{many} (the collector's counters, read from memory)"
    return f"{by_frames}; {idle}" if tally.collector_by_frames else idle


def cpu_account(service: Service) -> CpuAccount | None:
    """The service's account over the window; None when no process has the kernel's
    process-level counters (an older recording, or no /proc record)."""
    tally = _Tally()
    by_program: dict[tuple[str, ...], _UserSplit] = {}
    for view in service.processes:
        native = _native_split(view.analysis)
        if native is not None:
            by_program.setdefault(program_of(view.cmdline), native)
    missing = [view.pid for view in service.processes
               if not _add_process(tally, view.analysis, by_program.get(program_of(view.cmdline)))]
    if len(missing) == len(service.processes):
        return None
    windows = [v.analysis.os.window_s for v in service.processes if v.analysis.os is not None]
    window = max(windows) if windows else 0.0
    reaped = max(0.0, tally.reaped - _reaped_twice(service))
    children = service.other_children_s
    collector = tally.collector if tally.collector_measured else None
    values = {CpuPart.PYTHON: tally.python, CpuPart.NATIVE: tally.native, CpuPart.COLLECTOR: collector,
              CpuPart.KERNEL: tally.kernel, CpuPart.CHILDREN: children, CpuPart.REAPED: reaped,
              CpuPart.UNEXPLAINED: tally.unexplained}
    total = sum(v for v in values.values() if v is not None)
    frames = "native" if tally.native_frames else "Python-only"
    share_of = (f"the Python threads' user time times their running samples' share in {{}} ({tally.samples} "
                f"samples, {frames} frames)")
    how = {
        CpuPart.PYTHON: share_of.format("Python code") + ("" if collector is not None else
                                                          ", the collector's time included"),
        CpuPart.NATIVE: "the user time of threads with no Python frames, and " + share_of.format("native code"),
        CpuPart.COLLECTOR: _collector_how(tally, share_of.format("the garbage collector")),
        CpuPart.KERNEL: "the processes' system time (/proc/PID/stat stime)",
        CpuPart.CHILDREN: ("child processes not sampled: their own CPU and their reaped children's"
                           if children is not None else "not measured: the recording predates it"),
        CpuPart.REAPED: "children reaped in the window (cutime + cstime: all they ran)",
        CpuPart.UNEXPLAINED: "user time of threads gone before their counters were read, and of Python "
                             "threads no running sample apportions",
    }
    # the collector's part is exact where its counters alone decided it (no collection ran)
    counted = tally.collector_idle and not tally.collector_by_frames
    estimated = {CpuPart.PYTHON, CpuPart.NATIVE} | (set() if counted else {CpuPart.COLLECTOR})
    parts = tuple(CpuShare(part, None if value is None else round(float(value), 3),
                           None if value is None or not total else round(value / total, 4),
                           part in estimated and value is not None, how[part])
                  for part, value in values.items())
    notes = []
    few = _split_confidence_note(tally.samples)
    if few:
        notes.append(few)
    if tally.samples and not tally.native_frames:
        # a Python-only sample shows a call into a native library as the Python line that made
        # it: 64 threads in numpy's sort read 99% "Python code" without the native calibration
        notes.append("no native frames: the user time's split into Python code and native libraries is by "
                     "Python frames only, which show a native library's call as the Python line that made it "
                     "(native libraries may be much of what reads as Python code)")
    if tally.apportioned:
        notes.append(f"{tally.apportioned:.2f} s of user time was threads' that came and went between the "
                     f"counters' reads (a thread per request): split as the Python threads' by their running "
                     f"samples, an estimate")
    if missing:
        notes.append(f"{len(missing)} of {len(service.processes)} processes have no process-level "
                     f"counters (an older recording): left out")
    return CpuAccount(window_s=round(window, 3), cpu_s=round(total, 3),
                      cores=round(total / window, 3) if window else 0.0, parts=parts,
                      samples=tally.samples or None, native_frames=tally.native_frames and bool(tally.samples),
                      notes=tuple(notes))
