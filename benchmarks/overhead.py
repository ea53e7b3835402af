#!/usr/bin/env python3
"""Observer overhead: how much throughput a live service loses while it is being observed.

    python benchmarks/overhead.py [--pairs 5] [--seconds 10] [--workloads ten,sixtyfour]
                                  [--modes none,py-spy,diagnose] [--seed N] [--json-out FILE]
    python benchmarks/overhead.py --from-json FILE     # the table of a saved run again

Each run starts a fresh fixture workload (fixtures/workloads/), waits for its `READY` line,
observes it in one mode, and stops it. The workload's live request counter is read by sending
it SIGUSR1 (the harness answers `COUNT <n> <monotonic>`), so throughput is measured over exactly
the observation window:

* **sampling window**: while `py-spy record` runs. For `diagnose` it is the lifetime of the
  `py-spy record` child that diagnose starts (found by polling its children), so the probes
  before it and the analysis after it are excluded. For `none` it is a plain `--seconds` sleep.
* **whole attach**: from starting the observer to its exit. For `diagnose` this adds its two
  `py-spy dump` probes (read without pausing the target; a native one pauses it) and its
  analysis/report writing (CPU that competes with the target on a small machine).

Rounds are randomized blocks: every round runs each mode once on a fresh process, in shuffled
order; a mode's "pair" is its run and the same round's `none` run, and its ratio is
mode / none. The table reports the median ratio over the rounds ("throughput kept"), the loss
in percent, the min/max ratio and the verdict each run led to. The `none` row shows the spread
of the unobserved runs around their median: the noise floor of the machine.

Modes (`--modes`, comma separated; `none` is always run). Every mode but `none` and `procfs`
takes a sampling rate suffix, `MODE@HZ` (e.g. `diagnose@20`, `py-spy-idle-nb@20`):

  none                  no observer
  py-spy                `py-spy record --pid P --duration S -o FILE` at py-spy's defaults
                        (100 Hz, blocking, flamegraph, no --native/--idle/--threads)
  py-spy-nonblocking    the same with --nonblocking
  diagnose              `diagnose attach P --duration S --quiet --json --output-dir TMP` at its
                        defaults: the sampling plan picks the rates from the thread count (the
                        "gentle" plan: non-blocking Python stacks at ~200 thread-samples/s plus a
                        sparse blocking native recorder at ~20 thread-samples/s)
  diagnose@HZ           `--rate HZ`: diagnose's full-fidelity mode, one blocking recorder with
                        native frames on every sample (diagnose@100 = diagnose's original default)
  diagnose-no-native    the defaults with --no-native
  diagnose-no-async     the defaults with --no-async-tasks (no reads of the asyncio tasks)
  diagnose-no-kernel    the defaults with --no-kernel-waits (no reads of sleeping threads'
                        syscalls, descriptors and /proc/locks: the kernel wait reader off)
  py-spy-native         diagnose's blocking native recorder alone (`--native --idle --threads`,
                        speedscope) at the plan's native rate for this target; with @HZ, at HZ
  py-spy-idle-nb        diagnose's non-blocking Python-stack recorder alone (`--nonblocking
                        --idle --threads`, speedscope) at the plan's rate; with @HZ, at HZ
  procfs                diagnose's /proc sampler alone, at the plan's interval, for S seconds

Multi-process workloads (`workers`: a pre-fork parent that only supervises 3 worker processes):
the benchmark attaches at the parent pid, as a user would, and observes the whole process tree
the way `diagnose attach` does by default. Every py-spy mode gets `--subprocesses`, `procfs` runs
diagnose's per-process tree sampler, the sampling plan is computed from the thread count summed
over the tree (psutil, children recursive), the target's CPU (for "other tenants' CPU") is the
tree's, and the whole tree is killed after each run. Single-process workloads are unaffected.

The two py-spy-* modes measure parts of diagnose's cost without its probes, its /proc sampler
and its analysis; their verdict is `diagnose analyze` of their profile, offline (no /proc
counters), marked "(offline)".

Standard library plus the `diagnose` package (for the /proc sampler and its py-spy command)
and psutil (already a dependency of diagnose). Progress goes to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
from tests.ready import parse_ready  # noqa: E402  (the one READY-line reader)
WORKLOAD_DIR = REPO / "fixtures" / "workloads"

# name -> (fixture script, request threads (worker processes for a tree), what it stands for)
WORKLOADS = {
    "ten": ("lock_contention", 10, "~10 request threads queueing on one model lock"),
    "sixtyfour": ("scheduler_overhead", 64, "64 runnable request threads on the cores"),
    "workers": ("process_pool", 3, "pre-fork parent supervising 3 preprocess-bound worker "
                                   "processes; observed as a process tree"),
    "tree": ("forked_workers", 4, "pre-fork parent supervising 3 worker processes of 4 busy "
                                  "request threads each; observed as a process tree"),
    "async": ("async_semaphore", 32, "asyncio service: 32 request tasks (JSON parse, then a 20 ms "
                                     "backend call under a Semaphore of 32 permits), one thread "
                                     "busy on its event loop; diagnose reads its tasks"),
    "backend": ("remote_backend", 16, "front end of 16 request threads waiting on a feature backend "
                                      "it started apart (detached); diagnose reads the backend "
                                      "beside it"),
}
# Workload arguments beyond --threads/--seconds: the async service with enough permits that its
# event loop, not the semaphore, limits it (so an observer's CPU shows in its throughput).
WORKLOAD_ARGS = {"async": ("--permits", "32"), "backend": ("--spawn-backend",)}
# Workloads whose requests run in child processes of the pid that prints READY: observers sample
# the whole tree (py-spy --subprocesses), as `diagnose attach` does by default.
PROCESS_TREE_WORKLOADS = {"workers", "tree"}
DEFAULT_MODES = ["none", "py-spy", "diagnose"]  # fits 10 minutes with 5 rounds; add more by --modes
ALL_MODES = DEFAULT_MODES + ["py-spy-nonblocking", "diagnose-no-native", "diagnose-no-async",
                             "diagnose-no-kernel", "py-spy-native",
                             "py-spy-idle-nb", "procfs"]
OFFLINE_VERDICT_MODES = ("py-spy-native", "py-spy-idle-nb")  # speedscope out: analyze it after


READY_TIMEOUT_S = 60.0
COUNT_TIMEOUT_S = 15.0
OBSERVER_GRACE_S = 180.0  # probes of a 64-thread target on a loaded 2-core box can take long
WORKLOAD_SLACK_S = 300.0  # the workload's own --seconds: it must outlive any observer


def split_mode(mode: str) -> tuple[str, int | None]:
    """'diagnose@20' -> ('diagnose', 20); 'diagnose' -> ('diagnose', None)."""
    base, _, rate = mode.partition("@")
    return base, (int(rate) if rate else None)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def tool(name: str) -> str:
    """A console script installed beside this interpreter (the venv), else on PATH."""
    beside = Path(sys.executable).parent / name
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if not found:
        raise SystemExit(f"{name} is not installed (pip install -e . installs diagnose and py-spy)")
    return found


# --------------------------------------------------------------------------- the target


def process_tree(pid: int) -> list[psutil.Process]:
    """The process and its live descendants (just the process for a single-process target)."""
    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return []
    try:
        return [root] + root.children(recursive=True)
    except psutil.Error:
        return [root]


def tree_threads(pid: int) -> int | None:
    """Threads summed over the process tree: what diagnose's shared sampling budget divides."""
    total, known = 0, False
    for proc in process_tree(pid):
        try:
            total += proc.num_threads()
            known = True
        except psutil.Error:
            pass
    return total if known else None


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of the process and its live descendants (nan if it is gone)."""
    procs = process_tree(pid)
    if not procs:
        return float("nan")
    total = 0.0
    for i, proc in enumerate(procs):
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            if i == 0:
                return float("nan")
    return total


class Target:
    """A fixture workload started fresh, with a live request counter read via SIGUSR1."""

    def __init__(self, script: str, threads: int, seconds: float, args: tuple[str, ...] = ()):
        cmd = [sys.executable, str(WORKLOAD_DIR / f"{script}.py"), "--threads", str(threads),
               "--seconds", str(seconds), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._buf = b""
        self.pid = self._wait_ready()

    def _lines(self, timeout: float):
        """Yields complete stdout lines until `timeout` passes (raw fd reads: no hidden buffer)."""
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                yield line.decode("utf-8", "replace").strip()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            readable, _, _ = select.select([fd], [], [], left)
            if not readable:
                return
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            self._buf += chunk

    def _wait_ready(self) -> int:
        for line in self._lines(READY_TIMEOUT_S):
            ready = parse_ready(line)
            if ready is not None:
                return ready.pid
        self.stop()
        raise RuntimeError(f"workload did not print READY: {self.proc.args}")

    def count(self) -> tuple[int, float]:
        """(requests served so far, the target's time.monotonic() when it counted)."""
        self.proc.send_signal(signal.SIGUSR1)
        for line in self._lines(COUNT_TIMEOUT_S):
            if line.startswith("COUNT"):
                _, n, t = line.split()
                return int(n), float(t)
        raise RuntimeError("the workload did not answer SIGUSR1 with a COUNT line "
                           "(fixtures/workloads/_harness.py too old?)")

    def threads(self) -> int | None:
        """Threads of the target's whole process tree (its own for a single-process workload)."""
        return tree_threads(self.pid)

    def stop(self) -> None:
        """SIGKILL: the run is over and SERVED is not needed (SIGTERM would join 64 threads).
        A process-tree workload's descendants are killed too, so none lingers into the next run."""
        descendants = process_tree(self.pid)[1:] if self.proc.poll() is None else []
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for child in descendants:
            try:
                child.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(descendants, timeout=5)
        self.proc.stdout.close()


# --------------------------------------------------------------------------- one run


@dataclass
class Run:
    workload: str
    round: int
    mode: str
    ok: bool = False
    error: str = ""
    window_rate: float | None = None  # requests/s over the sampling window
    window_s: float | None = None
    attach_rate: float | None = None  # requests/s from observer start to observer exit
    attach_s: float | None = None
    observer_wall_s: float | None = None
    observer_cpu_s: float | None = None  # CPU of the observer's whole process tree
    pyspy_cpu_s: float | None = None  # diagnose's own account of py-spy's CPU
    # the report's own figure (sampling.observer, from /proc over its window): diagnose and its
    # children, and the target tree, in cores
    report_observer_cores: float | None = None
    report_target_cores: float | None = None
    paused_share: float | None = None  # diagnose's /proc view of the py-spy pauses
    verdict: str = "n/a"
    target_threads: int | None = None
    loadavg_1m: float | None = None
    foreign_cores: float | None = None  # CPU used by other processes during the run, in cores
    achieved_hz: float | None = None  # sampling ticks per second of window actually recorded
    asked_hz: int | None = None  # the rate py-spy was asked for (diagnose: its plan's choice)
    extra: dict = field(default_factory=dict)


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


_TICK = os.sysconf("SC_CLK_TCK")


class CpuAccount:
    """Machine-wide busy CPU minus the target, the observer tree and this script: what the
    machine's other tenants used while a run lasted (the noise this run was exposed to)."""

    def __init__(self, target_pid: int | None):
        self.target_pid = target_pid
        self.start = self._snapshot()

    def _snapshot(self) -> tuple[float, float, float, float, float]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / _TICK  # all but idle and iowait
        target = 0.0
        if self.target_pid is not None:
            target = tree_cpu(self.target_pid)  # a process-tree target's workers are not "others"
        me = resource.getrusage(resource.RUSAGE_SELF)
        return busy, target, _children_cpu(), me.ru_utime + me.ru_stime, time.monotonic()

    def foreign_cores(self) -> float:
        end = self._snapshot()
        d = [b - a for a, b in zip(self.start, end)]
        return max(0.0, d[0] - d[1] - d[2] - d[3]) / d[4] if d[4] > 0 else float("nan")


def _rate(a: tuple[int, float], b: tuple[int, float]) -> tuple[float, float]:
    dt = b[1] - a[1]
    return (b[0] - a[0]) / dt if dt > 0 else float("nan"), dt


def _record_children(parent: psutil.Process) -> list[psutil.Process]:
    found = []
    for child in parent.children(recursive=True):
        try:
            cmd = child.cmdline()
        except psutil.Error:
            continue
        if len(cmd) > 1 and os.path.basename(cmd[0]) == "py-spy" and cmd[1] == "record":
            found.append(child)
    return found


def _find_record_children(parent: psutil.Process, observer: subprocess.Popen) -> list[psutil.Process]:
    """Polls (20 Hz) until the observer has started `py-spy record` (diagnose's default plan
    starts two side by side: Python stacks and sparse native ones); [] if it exited first."""
    while observer.poll() is None:
        try:
            found = _record_children(parent)
            if found:
                time.sleep(0.2)  # the second recorder is started right after the first
                return list({c.pid: c for c in found + _record_children(parent)}.values())
        except psutil.Error:
            return []
        time.sleep(0.05)
    return []


def _wait_gone(children: list[psutil.Process], observer: subprocess.Popen, expected_s: float) -> None:
    """Until every child exits (or turns zombie). Sleeps through most of the window, then polls."""
    time.sleep(max(0.0, expected_s - 1.5))
    while observer.poll() is None:
        alive = 0
        for child in children:
            try:
                alive += child.status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                pass
        if not alive:
            return
        time.sleep(0.02)


def diagnose_plan(threads: int | None) -> tuple[int, int, float]:
    """(main rate Hz, native calibration rate Hz or 0, /proc interval s) that `diagnose attach`
    picks by default for this many threads."""
    try:
        from diagnose.collect.plan import plan_sampling
    except ImportError:  # a diagnose without a sampling plan: its old fixed defaults
        return 100, 0, 0.1
    plan = plan_sampling(threads, None)
    return plan.rate_hz, getattr(plan, "native_rate_hz", 0), plan.proc_interval_s


def observer_command(mode: str, pid: int, seconds: float, work: Path,
                     threads: int | None = None, subprocesses: bool = False) -> list[str] | None:
    """The command a mode runs, or None for `none`. `subprocesses`: a process-tree target, so
    the py-spy modes sample the pid's descendants too (`--subprocesses`), as diagnose does, and
    `procfs` samples every process of the tree. `threads` is then the total over the tree."""
    cmd = _observer_command(mode, pid, seconds, work, threads, subprocesses)
    if subprocesses and cmd and os.path.basename(cmd[0]) == "py-spy" \
            and "--subprocesses" not in cmd:
        cmd.append("--subprocesses")
    return cmd


def _observer_command(mode: str, pid: int, seconds: float, work: Path, threads: int | None,
                      subprocesses: bool) -> list[str] | None:
    from diagnose.collect import pyspy

    base, rate = split_mode(mode)
    plan_rate, plan_native_rate, _ = diagnose_plan(threads)
    pyspy_bin = tool("py-spy")
    dur = str(max(1, int(round(seconds))))
    out = str(work / PROFILE_NAME)
    rate_args = ["--rate", str(rate)] if rate else []
    diagnose = [tool("diagnose"), "attach", str(pid), "--duration", f"{seconds:g}", "--quiet",
                "--json", "--output-dir", str(work / "reports")] + rate_args
    plain = [pyspy_bin, "record", "--pid", str(pid), "--duration", dur,
             "-o", str(work / "p.svg")] + rate_args
    if base == "none":
        return None
    if base == "py-spy":
        return plain
    if base == "py-spy-nonblocking":
        return plain + ["--nonblocking"]
    if base == "diagnose":
        return diagnose
    if base == "diagnose-no-native":
        return diagnose + ["--no-native"]
    if base == "diagnose-no-async":
        return diagnose + ["--no-async-tasks"]
    if base == "diagnose-no-kernel":
        return diagnose + ["--no-kernel-waits"]
    if base == "py-spy-native":
        return pyspy.record_command(pid, out, seconds, rate or plan_native_rate or plan_rate,
                                    native=True)
    if base == "py-spy-idle-nb":
        return pyspy.record_command(pid, out, seconds, rate or plan_rate, native=False,
                                    nonblocking=True)
    if base == "procfs":
        return [sys.executable, str(Path(__file__).resolve()), "--procfs-only", str(pid), dur] \
            + (["--procfs-tree"] if subprocesses else [])
    raise ValueError(f"unknown mode {mode!r}")


# The py-spy-* modes record as diagnose's recorders do (pyspy.record_command: chrometrace).
PROFILE_NAME = "profile.chrometrace.json"


def _asked_rate(cmd: list[str] | None) -> int | None:
    if not cmd or os.path.basename(cmd[0]) != "py-spy":
        return None
    return int(cmd[cmd.index("--rate") + 1]) if "--rate" in cmd else 100  # py-spy's default


def _ticks(profile: Path) -> int:
    """Sampling instants in a py-spy profile: the longest thread track. A chrometrace file (the
    format diagnose's recorders write) is a list of events: a thread's instants are the distinct
    times its stacks were stamped with; a speedscope file lists each thread's samples."""
    try:
        data = json.loads(profile.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    if isinstance(data, list):
        instants: dict[tuple, set] = {}
        for event in data:
            if isinstance(event, dict) and event.get("ph") == "B":
                instants.setdefault((event.get("pid"), event.get("tid")), set()).add(event.get("ts"))
        return max((len(seen) for seen in instants.values()), default=0)
    return max((len(p.get("samples", [])) for p in data.get("profiles", [])), default=0)


def wait_for_quiet(max_wait: float, threshold: float = 0.25) -> None:
    """Up to `max_wait` s until the machine's other tenants use < `threshold` cores (2 s probes)."""
    deadline = time.monotonic() + max_wait
    while True:
        account = CpuAccount(None)
        time.sleep(2.0)
        used = account.foreign_cores()
        if used < threshold or time.monotonic() >= deadline:
            if used >= threshold:
                log(f"  machine still busy ({used:.2f} cores used by others); running anyway")
            return


def offline_verdict(profile: Path, work: Path) -> str:
    if not profile.exists() or profile.stat().st_size == 0:
        return "no profile"
    out = subprocess.run([tool("diagnose"), "analyze", str(profile), "--json", "--output-dir",
                          str(work / "offline")], capture_output=True, text=True, timeout=300)
    try:
        return json.loads(out.stdout)["verdict"]["primary"] + " (offline)"
    except (ValueError, KeyError):
        return f"analyze exit {out.returncode}"


def run_once(workload: str, round_no: int, mode: str, seconds: float, grace: float) -> Run:
    script, threads, _ = WORKLOADS[workload]
    tree = workload in PROCESS_TREE_WORKLOADS
    run = Run(workload, round_no, mode)
    target = Target(script, threads, seconds + WORKLOAD_SLACK_S, WORKLOAD_ARGS.get(workload, ()))
    work = Path(tempfile.mkdtemp(prefix="diagnose-overhead-"))
    try:
        run.target_threads = target.threads()
        run.loadavg_1m = round(os.getloadavg()[0], 2)
        cmd = observer_command(mode, target.pid, seconds, work, run.target_threads,
                               subprocesses=tree)
        run.asked_hz = _asked_rate(cmd)
        account = CpuAccount(target.pid)
        if cmd is None:
            start = target.count()
            time.sleep(seconds)
            end = target.count()
            run.foreign_cores = round(account.foreign_cores(), 2)
            run.window_rate, run.window_s = _rate(start, end)
            run.attach_rate, run.attach_s = run.window_rate, run.window_s
            run.ok = True
            return run
        cpu_before = _children_cpu()
        start = target.count()
        wall0 = time.monotonic()
        observer = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        w_start = w_end = None
        is_diagnose = split_mode(mode)[0].startswith("diagnose")
        if is_diagnose:
            records = _find_record_children(psutil.Process(observer.pid), observer)
            if records:
                w_start = target.count()
                _wait_gone(records, observer, seconds)
                w_end = target.count()
                run.extra["recorders"] = len(records)
        if not is_diagnose:
            # py-spy's --duration counts samples, not seconds: a py-spy starved of CPU (64
            # runnable target threads on 2 cores) runs far longer than asked. Stop it as a user
            # would, with Ctrl-C (it still writes its output), `grace` s after the window.
            try:
                observer.wait(timeout=seconds + grace)
            except subprocess.TimeoutExpired:
                observer.send_signal(signal.SIGINT)
                run.extra["stopped_by_sigint"] = True
                if split_mode(mode)[0] not in OFFLINE_VERDICT_MODES:
                    # its output is not used: do not wait for a blocking sample of 64 threads
                    # to finish (seconds, on a starved py-spy); the window ends now
                    try:
                        observer.wait(timeout=1.0)
                    except subprocess.TimeoutExpired:
                        observer.kill()
        try:
            stdout, stderr = observer.communicate(timeout=seconds + OBSERVER_GRACE_S)
        except subprocess.TimeoutExpired:
            observer.kill()
            stdout, stderr = observer.communicate()
            run.error = "observer timed out"
        end = target.count()
        run.foreign_cores = round(account.foreign_cores(), 2)
        run.observer_wall_s = round(time.monotonic() - wall0, 2)
        run.observer_cpu_s = round(_children_cpu() - cpu_before, 2)
        run.attach_rate, run.attach_s = _rate(start, end)
        if w_start is None:
            w_start, w_end = start, end  # plain py-spy / procfs: the observer's lifetime is the window
        run.window_rate, run.window_s = _rate(w_start, w_end)
        if is_diagnose:
            try:
                report = json.loads(stdout)
                run.verdict = report["verdict"]["primary"]
                sampling = report.get("sampling", {})
                run.pyspy_cpu_s = sampling.get("pyspy_cpu_s")
                stated = sampling.get("observer") or {}
                run.report_observer_cores = stated.get("observer_cores")
                run.report_target_cores = stated.get("target_cores")
                run.paused_share = sampling.get("paused_share")
                run.extra.update({k: sampling.get(k) for k in (
                    "mode", "plan", "rate_hz", "native_rate_hz", "samples", "errors",
                    "native_samples", "native_errors", "duration_s", "notes")})
                run.achieved_hz = sampling.get("achieved_rate_hz")
                run.asked_hz = sampling.get("rate_hz", run.asked_hz)
            except (ValueError, KeyError):
                run.verdict = f"exit {observer.returncode}"
                run.error = run.error or (stderr.strip().splitlines() or ["?"])[-1][:200]
        elif observer.returncode != 0 and not run.extra.get("stopped_by_sigint"):
            run.error = run.error or (stderr.strip().splitlines() or ["?"])[-1][:200]
        profile = work / PROFILE_NAME
        if profile.exists() and run.window_s:
            run.achieved_hz = round(_ticks(profile) / run.window_s, 1)
        # diagnose: a parsed report is a result (exit 8 = partial still reports a verdict)
        run.ok = not run.error and (is_diagnose or observer.returncode == 0
                                    or bool(run.extra.get("stopped_by_sigint")))
    except Exception as exc:  # one failed run must not lose the others
        run.error = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        target.stop()
        if run.ok and split_mode(mode)[0] in OFFLINE_VERDICT_MODES:
            run.verdict = offline_verdict(work / PROFILE_NAME, work)
        if run.ok or not any(work.iterdir()):
            shutil.rmtree(work, ignore_errors=True)
        else:
            run.error += f" (outputs kept in {work})"
    return run


# --------------------------------------------------------------------------- summary


def _fmt_verdicts(runs: list[Run]) -> str:
    counts = Counter(r.verdict for r in runs)
    if list(counts) == ["n/a"]:
        return "n/a"
    return ", ".join(f"{v} ×{n}" for v, n in counts.most_common())


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except OSError:
        return os.cpu_count() or 1


def _per_free_core(run: Run) -> float:
    """Requests/s per core the other tenants left free: corrects a CPU-bound target for them."""
    free = _usable_cores() - (run.foreign_cores or 0.0)
    return run.window_rate / max(0.2, free)


def summarize(runs: list[Run], modes: list[str], workloads: list[str]) -> list[dict]:
    rows = []
    for wl in workloads:
        base = {r.round: r for r in runs if r.workload == wl and r.mode == "none" and r.ok}
        base_rates = [r.window_rate for r in base.values()]
        med_base = _median(base_rates)
        for mode in modes:
            mine = [r for r in runs if r.workload == wl and r.mode == mode]
            if mode == "none":
                kept = [x / med_base for x in base_rates] if med_base else []
                attach = kept
                free = [_per_free_core(r) for r in base.values()]
                adjusted = [x / statistics.median(free) for x in free] if free else []
            else:
                paired = [r for r in mine if r.ok and r.round in base]
                kept = [r.window_rate / base[r.round].window_rate for r in paired]
                attach = [r.attach_rate / base[r.round].window_rate for r in paired]
                adjusted = [_per_free_core(r) / _per_free_core(base[r.round]) for r in paired]
            ok_runs = [r for r in mine if r.ok]
            rows.append({
                "workload": wl, "script": WORKLOADS[wl][0], "threads": WORKLOADS[wl][1],
                "mode": mode, "pairs": len(kept), "failed": len(mine) - len(ok_runs),
                "median_kept": _median(kept), "min_kept": min(kept) if kept else None,
                "max_kept": max(kept) if kept else None, "median_attach_kept": _median(attach),
                "median_adjusted_kept": _median(adjusted),
                "min_adjusted_kept": min(adjusted) if adjusted else None,
                "max_adjusted_kept": max(adjusted) if adjusted else None,
                "median_rate": _median([r.window_rate for r in ok_runs]),
                "observer_cpu_s": _median([r.observer_cpu_s for r in ok_runs]),
                "observer_wall_s": _median([r.observer_wall_s for r in ok_runs]),
                "pyspy_cpu_s": _median([r.pyspy_cpu_s for r in ok_runs]),
                "report_observer_cores": _median([r.report_observer_cores for r in ok_runs]),
                "report_target_cores": _median([r.report_target_cores for r in ok_runs]),
                "paused_share": _median([r.paused_share for r in ok_runs]),
                "foreign_cores": _median([r.foreign_cores for r in ok_runs]),
                "achieved_hz": _median([r.achieved_hz for r in ok_runs]),
                "asked_hz": _median([r.asked_hz for r in ok_runs]),
                "window_s": _median([r.window_s for r in ok_runs]),
                "verdicts": _fmt_verdicts(ok_runs) if mode != "none" else "",
                "errors": sorted({r.error for r in mine if r.error}),
            })
    return rows


def _f(value, fmt: str, none: str = "–") -> str:
    return none if value is None else format(value, fmt)


def markdown(rows: list[dict], args, started: float | None, loads: tuple[float, float]) -> str:
    took = "" if started is None else f"{(time.monotonic() - started) / 60:.1f} min in all, "
    lines = [
        f"Observer overhead: {args.pairs} rounds × {args.seconds:g} s windows, "
        f"{os.cpu_count()} cores, py-spy {_pyspy_version()}, Python {sys.version.split()[0]}, "
        f"load average (1 min) {loads[0]:.1f} at start / {loads[1]:.1f} at end, "
        f"{took}seed {args.seed}, diagnose at {getattr(args, 'revision', None) or _revision()}.",
        "",
        "| workload | threads | mode | pairs | req/s (median) | throughput kept (median) | lost % "
        "| min / max kept | whole attach kept | kept per free core (min / max) | window s "
        "| Hz achieved / asked | observer CPU s "
        "| observer wall s | other tenants' CPU | verdicts |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: "
        "| ---: | ---: | --- |",
    ]
    for r in rows:
        kept = r["median_kept"]
        lost = None if kept is None else (1 - kept) * 100
        pairs = f"{r['pairs']}" + (f" ({r['failed']} failed)" if r["failed"] else "")
        extra = ""
        if r["pyspy_cpu_s"] is not None:
            extra = f" (py-spy {r['pyspy_cpu_s']:.1f})"
        if r.get("report_observer_cores") is not None:  # the report's own figure, in cores
            extra += (f"; report: {r['report_observer_cores']:.2f} cores beside the target's "
                      f"{_f(r.get('report_target_cores'), '.2f')}")
        lines.append(
            f"| {r['workload']} ({r['script']}) | {r['threads']} | {r['mode']} | {pairs} "
            f"| {_f(r['median_rate'], '.0f')} "
            f"| {_f(kept, '.3f')} | {_f(lost, '.1f')} "
            f"| {_f(r['min_kept'], '.3f')} / {_f(r['max_kept'], '.3f')} "
            f"| {_f(r['median_attach_kept'], '.3f')} "
            f"| {_f(r['median_adjusted_kept'], '.3f')} ({_f(r['min_adjusted_kept'], '.2f')} / "
            f"{_f(r['max_adjusted_kept'], '.2f')}) | {_f(r['window_s'], '.1f')} "
            f"| {_f(r['achieved_hz'], '.1f')} / {_f(r['asked_hz'], '.0f')} "
            f"| {_f(r['observer_cpu_s'], '.1f')}{extra} | {_f(r['observer_wall_s'], '.1f')} "
            f"| {_f(r['foreign_cores'], '.2f')} "
            f"| {r['verdicts']}"
            f"{' (paused share ' + format(r['paused_share'], '.1%') + ')' if r['paused_share'] is not None else ''} |")
    errors = [(r["workload"], r["mode"], e) for r in rows for e in r["errors"]]
    if errors:
        lines += ["", "Failed runs:"] + [f"- {w} / {m}: {e}" for w, m, e in errors]
    lines += ["", "`none` rows: each unobserved run relative to their median (the noise floor). "
              "Other rows: run / same-round `none` over the sampling window; \"whole attach\" "
              "also counts diagnose's probes and analysis. \"Window s\": how long sampling really "
              "lasted (py-spy's --duration counts samples, so a starved py-spy overruns; py-spy "
              "modes are stopped with Ctrl-C --grace s after the window, diagnose stops its own "
              "py-spy 20 s after it). \"Hz achieved / asked\": sampling instants per second "
              "actually recorded (diagnose and speedscope modes only) / the rate py-spy was "
              "asked for (for diagnose, its sampling plan's choice). Observer CPU is the observer's whole "
              "process tree; for diagnose, py-spy's own share is in parentheses. \"Other tenants' CPU\": "
              "cores used by processes other than the target, the observer and this script during "
              "the run (median), i.e. the noise the runs were exposed to. \"Kept per free core\": the "
              "same ratio after dividing each run's rate by the cores the other tenants left "
              "free; it removes their noise for a CPU-bound target (sixtyfour) but not for a "
              "lock-bound one (ten), and is optimistic for blocking modes (while py-spy pauses "
              "the target, the other tenants take the cores)."]
    return "\n".join(lines)


def _revision() -> str:
    """The diagnose commit measured (read-only git), '+' when diagnose/ has local changes."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "diagnose"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return (head or "?") + ("+" if dirty else "")


def _pyspy_version() -> str:
    try:
        out = subprocess.run([tool("py-spy"), "--version"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip().replace("py-spy ", "")
    except (OSError, subprocess.SubprocessError):
        return "?"


# --------------------------------------------------------------------------- entry points


def procfs_only(pid: int, seconds: float, tree: bool = False) -> None:
    """diagnose's /proc sampler alone, ticking as `diagnose attach` does (the `procfs` mode).
    `tree`: the per-process sampler over the pid's descendants too (a process-tree workload)."""
    from diagnose.collect import procfs

    if tree and hasattr(procfs, "TreeSampler"):
        interval = diagnose_plan(tree_threads(pid))[2]
        sampler = procfs.TreeSampler([pid], children=True)
    else:
        interval = diagnose_plan(psutil.Process(pid).num_threads())[2]
        sampler = procfs.ProcSampler(pid)
    sampler.start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sampler.tick()
        time.sleep(interval)
    sampler.finish()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Throughput a live fixture service loses while py-spy / diagnose observe it.",
        epilog="Modes: " + ", ".join(ALL_MODES) + ". All but none and procfs take a rate "
               "suffix, MODE@HZ (e.g. diagnose@20). See the module docstring.")
    parser.add_argument("--pairs", type=int, default=5,
                        help="rounds per workload; each round runs every mode once (default 5)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="observation window per run (default 10)")
    parser.add_argument("--workloads", default="ten,sixtyfour",
                        help="comma separated, from: " + "; ".join(
                            f"{k} = {v[0]} --threads {v[1]}, {v[2]}" for k, v in WORKLOADS.items()))
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES),
                        help="comma separated; `none` is always included (default %(default)s)")
    parser.add_argument("--seed", type=int, default=None, help="shuffle seed (default: random)")
    parser.add_argument("--grace", type=float, default=2.0,
                        help="py-spy modes: Ctrl-C py-spy this long after the window if it is "
                             "still sampling (its --duration counts samples; default 2)")
    parser.add_argument("--quiet-wait", type=float, default=0.0, metavar="SECONDS",
                        help="before each run, wait up to this long for the other tenants of the "
                             "machine to use < 0.25 cores (default 0: do not wait)")
    parser.add_argument("--json-out", type=Path, help="also write every run and the summary here")
    parser.add_argument("--from-json", type=Path, metavar="FILE",
                        help="print the table of runs saved earlier with --json-out; run nothing")
    parser.add_argument("--procfs-only", nargs=2, metavar=("PID", "SECONDS"), help=argparse.SUPPRESS)
    parser.add_argument("--procfs-tree", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.procfs_only or args.from_json:
        return args
    args.workload_list = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in args.workload_list if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; known: {sorted(WORKLOADS)}")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = []
    for m in modes:
        try:
            base, rate = split_mode(m)
        except ValueError:
            base, rate = m, None
        if base not in ALL_MODES or (rate is not None and (base in ("none", "procfs")
                                                           or not 1 <= rate <= 1000)):
            bad.append(m)
    if bad:
        parser.error(f"unknown mode(s) {bad}; known: {ALL_MODES}")
    args.mode_list = ["none"] + [m for m in dict.fromkeys(modes) if m != "none"]
    if args.pairs < 1 or args.seconds < 1:
        parser.error("--pairs and --seconds must be at least 1")
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.procfs_only:
        procfs_only(int(args.procfs_only[0]), float(args.procfs_only[1]), args.procfs_tree)
        return 0
    if args.from_json:
        saved = json.loads(args.from_json.read_text(encoding="utf-8"))
        runs = [Run(**r) for r in saved["runs"]]
        for key in ("pairs", "seconds", "seed", "revision"):
            setattr(args, key, saved["args"].get(key, "?"))
        rows = summarize(runs, saved["args"]["mode_list"], saved["args"]["workload_list"])
        print(markdown(rows, args, None, tuple(saved.get("loads", (float("nan"),) * 2))))
        return 0
    if os.geteuid() != 0:
        try:
            if Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip() != "0":
                log("warning: not root and ptrace_scope != 0: py-spy will not be able to attach")
        except OSError:
            pass
    rng = random.Random(args.seed)
    args.revision = _revision()
    started = time.monotonic()
    load_start = os.getloadavg()[0]
    total = len(args.workload_list) * args.pairs * len(args.mode_list)
    log(f"{total} runs: workloads {args.workload_list}, modes {args.mode_list}, "
        f"{args.pairs} rounds × {args.seconds:g} s, seed {args.seed}, "
        f"load average {load_start:.1f}")
    runs: list[Run] = []
    done = 0
    for round_no in range(args.pairs):
        for wl in args.workload_list:  # interleave workloads too: slow drifts hit both alike
            order = list(args.mode_list)
            rng.shuffle(order)
            for mode in order:
                done += 1
                t0 = time.monotonic()
                if args.quiet_wait:
                    wait_for_quiet(args.quiet_wait)
                run = run_once(wl, round_no, mode, args.seconds, args.grace)
                runs.append(run)
                status = (f"{run.window_rate:.1f} req/s over {run.window_s:.1f} s"
                          if run.ok else f"FAILED: {run.error}")
                verdict = f", verdict {run.verdict}" if run.verdict != "n/a" else ""
                log(f"[{done}/{total}] round {round_no + 1} {wl} {mode}: {status}{verdict} "
                    f"({time.monotonic() - t0:.0f} s, others used {run.foreign_cores} cores)")
    rows = summarize(runs, args.mode_list, args.workload_list)
    table = markdown(rows, args, started, (load_start, os.getloadavg()[0]))
    print(table)
    if args.json_out:
        args.json_out.write_text(json.dumps({"args": {k: v for k, v in vars(args).items()
                                                      if k not in ("json_out", "from_json")},
                                             "loads": [load_start, os.getloadavg()[0]],
                                             "runs": [asdict(r) for r in runs], "summary": rows},
                                            indent=2, default=str) + "\n")
    log(f"done in {(time.monotonic() - started) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
