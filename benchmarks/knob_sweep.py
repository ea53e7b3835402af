#!/usr/bin/env python3
"""Knob sweep: requests/s of one fixture workload under several configurations.

    python benchmarks/knob_sweep.py [OPTIONS] WORKLOAD CONFIG [CONFIG ...]

    python benchmarks/knob_sweep.py pipeline "--model-threads 1" "--model-threads 2"
    python benchmarks/knob_sweep.py --rounds 5 locked_blas "" "--blas-threads 1" "--no-lock"

WORKLOAD is a name under fixtures/workloads/ (``pipeline``) or a path to a script that follows
the fixture contract (``_harness.py``: ``READY pid=<pid>``, SIGUSR1 -> ``COUNT <n> <monotonic>``,
SIGTERM -> ``SERVED <n> <elapsed>``). Each CONFIG is one shell-quoted string of extra arguments
(``""`` = the workload's defaults); the sweep's own OPTIONS go *before* WORKLOAD, everything
after it is a configuration.

Each run starts a fresh process with the configuration's arguments, waits for ``READY``, lets it
warm up (``--warmup``, default 2 s), reads the live counter with SIGUSR1 (``COUNT``), waits
``--seconds`` (default 8), reads it again, and stops the process (SIGTERM, then SIGKILL of its
whole process group after a grace). The rate is the difference of the two counts over the
difference of the workload's own monotonic timestamps. If a workload does not answer SIGUSR1 the
rate of its ``SERVED`` line is used instead (that includes the warm-up).

The machine is shared and noisy, so configurations alternate: every round runs each
configuration once, the order rotated by one each round (round r starts with configuration
r mod n). The table shows per configuration the median rate over ``--rounds`` (default 3), the
min / max, the median of the per-round ratios to the first configuration (same round, so a
slow spell of the machine cancels out), the workload's CPU in cores during the window, and the
CPU the rest of the machine used meanwhile ("other", in cores: near 0 the numbers can be
trusted) and the workload's resident memory at the end of the window (VmRSS; for the
memory-bound knobs, e.g. ``unbounded_backlog --max-queue``). Progress goes to stderr, the
markdown table to stdout.

Every process started is in its own process group (session) and is killed with that group at
the end of its run, on an error, and on Ctrl-C / SIGTERM of the sweep, so nothing is left
behind (a pre-fork workload's workers included). ``--quiet-wait S`` waits up to S seconds
before each run for the rest of the machine to use less than 0.25 cores.

Standard library only (psutil, when importable, adds the CPU of forked workers to the
workload's CPU).
"""

import argparse
import json
import os
import select
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.ready import parse_ready  # noqa: E402  (the one READY-line reader)
WORKLOAD_DIR = REPO / "fixtures" / "workloads"
READY_TIMEOUT_S = 60.0
COUNT_TIMEOUT_S = 10.0
STOP_GRACE_S = 8.0       # SIGTERM -> SERVED; the harness joins threads for up to 5 s
_TICK = os.sysconf("SC_CLK_TCK")

try:
    import psutil
except ImportError:  # optional
    psutil = None


def log(message):
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


# tests/integration/pythons.py's venv builders, by what the target needs besides CPython.
VENVS = {"numpy": "venv_with_numpy", "servers": "venv_with_servers", "aiohttp": "venv_with_aiohttp",
         "grpc": "venv_with_grpc"}


def python_for(spec, venv="numpy"):
    """The interpreter a benchmark's target runs on for `--python SPEC`: this one (no SPEC), a
    path (SPEC has a "/"), or version SPEC's cached venv with what `venv` names (VENVS)."""
    if not spec:
        return sys.executable
    if "/" in spec:
        return spec
    from tests.integration import pythons

    python, reason = getattr(pythons, VENVS[venv])(spec)
    if python is None:
        raise SystemExit("--python %s: %s" % (spec, reason))
    log("targets on %s (%s)" % (python, reason))
    return python


# ----------------------------------------------------------------------------- CPU accounting

def _proc_cpu(pid):
    """utime + stime of one process (all its threads), seconds; 0 if gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def tree_cpu(pid):
    """CPU of the process and, with psutil, its live descendants (forked workers)."""
    total = _proc_cpu(pid)
    if psutil is not None:
        try:
            for child in psutil.Process(pid).children(recursive=True):
                total += _proc_cpu(child.pid)
        except psutil.Error:
            pass
    return total


def tree_rss_mb(pid):
    """VmRSS of the process and, with psutil, its live descendants, in MiB (None if unknown)."""
    pids = [pid]
    if psutil is not None:
        try:
            pids += [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            pass
    total, seen = 0, False
    for p in pids:
        try:
            with open("/proc/%d/status" % p) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        seen = True
                        break
        except (OSError, ValueError, IndexError):
            pass
    return total / 1024.0 if seen else None


def machine_busy():
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / _TICK  # all but idle and iowait


def wait_quiet(limit_s, threshold=0.25):
    """Waits (up to `limit_s`) until the machine's busy CPU over 1 s is below `threshold`
    cores; returns the last reading."""
    end = time.monotonic() + limit_s
    while True:
        b0, t0 = machine_busy(), time.monotonic()
        time.sleep(1.0)
        busy = (machine_busy() - b0) / (time.monotonic() - t0)
        if busy < threshold or time.monotonic() >= end:
            return busy


def self_cpu():
    t = os.times()
    return t.user + t.system


# ----------------------------------------------------------------------------- one process

class Workload:
    """One fresh workload process in its own session; stdout read through the raw fd."""

    live = {}  # pid -> Workload, for the signal handler

    def __init__(self, cmd):
        self.cmd = cmd
        self._buf = b""
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        Workload.live[self.proc.pid] = self
        self.pid = None
        self._killed = False

    def lines(self, timeout):
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

    def wait_ready(self):
        for line in self.lines(READY_TIMEOUT_S):
            ready = parse_ready(line)
            if ready is not None:
                self.pid = ready.pid
                return self.pid
        status = self.proc.poll()
        if status is None:
            raise RuntimeError("no READY line within %.0f s" % READY_TIMEOUT_S)
        raise RuntimeError("exited with status %s before READY: %s"
                           % (status, self.stderr_tail()))

    def count(self):
        """(requests, the workload's monotonic time) or None if it does not answer."""
        if self.proc.poll() is not None:
            return None
        os.kill(self.proc.pid, signal.SIGUSR1)
        for line in self.lines(COUNT_TIMEOUT_S):
            if line.startswith("COUNT"):
                _, n, t = line.split()
                return int(n), float(t)
        return None

    def stop(self):
        """SIGTERM, read SERVED (n, elapsed) within the grace, then kill the whole group."""
        served = None
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for line in self.lines(STOP_GRACE_S):
            if line.startswith("SERVED"):
                _, n, elapsed = line.split()
                served = int(n), float(elapsed)
                break
        self.kill()
        return served

    def kill(self):
        """SIGKILL to the workload's process group (it leads its own session), then reap.
        Once only: after that the group id may in theory be reused."""
        if self._killed:
            return
        self._killed = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log("warning: pid %d did not exit after SIGKILL" % self.proc.pid)
        Workload.live.pop(self.proc.pid, None)
        for stream in (self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass

    def stderr_tail(self):
        if self.proc.poll() is None:
            return ""
        try:
            return self.proc.stderr.read().decode("utf-8", "replace")[-500:].strip()
        except (OSError, ValueError):
            return ""


def _kill_all(signum=None, _frame=None):
    for w in list(Workload.live.values()):
        w.kill()
    if signum is not None:
        log("interrupted: every workload started was killed")
        sys.exit(128 + signum)


# ----------------------------------------------------------------------------- one run

def run_once(python, script, config, common, seconds, warmup):
    """Starts the workload with `config`, measures requests/s over `seconds` after `warmup`."""
    budget = warmup + seconds + 30.0  # the workload's own deadline: well after our window
    cmd = [python, str(script), "--seconds", "%g" % budget] + shlex.split(common) \
        + shlex.split(config)
    w = Workload(cmd)
    result = {"config": config, "ok": False}
    try:
        w.wait_ready()
        time.sleep(warmup)
        a = w.count()
        cpu0, busy0, me0, t0 = tree_cpu(w.proc.pid), machine_busy(), self_cpu(), time.monotonic()
        time.sleep(seconds)
        b = w.count()
        cpu1, busy1, me1, t1 = tree_cpu(w.proc.pid), machine_busy(), self_cpu(), time.monotonic()
        rss = tree_rss_mb(w.proc.pid)
        served = w.stop()
        wall = t1 - t0
        cores = (cpu1 - cpu0) / wall
        result.update(
            cores=cores,
            other=max(0.0, (busy1 - busy0) - (cpu1 - cpu0) - (me1 - me0)) / wall,
            rss_mb=rss, served=served)
        if a is not None and b is not None and b[1] > a[1]:
            result.update(ok=True, rate=(b[0] - a[0]) / (b[1] - a[1]), method="COUNT",
                          window=b[1] - a[1])
        elif served is not None and served[1] > 0:
            result.update(ok=True, rate=served[0] / served[1], method="SERVED",
                          window=served[1])
        else:
            result["error"] = "neither COUNT nor SERVED"
    except Exception as exc:  # one failed run must not end the sweep
        result["error"] = "%s: %s" % (type(exc).__name__, exc)
    finally:
        w.kill()
    return result


# ----------------------------------------------------------------------------- table

def _fmt(x, digits=1):
    if x is None:
        return "–"
    return "{:,.{}f}".format(x, digits)


def summarize(configs, runs):
    rows = []
    first = {r["round"]: r for r in runs if r["index"] == 0 and r["ok"]}
    for i, config in enumerate(configs):
        mine = [r for r in runs if r["index"] == i and r["ok"]]
        rates = [r["rate"] for r in mine]
        ratios = [r["rate"] / first[r["round"]]["rate"] for r in mine
                  if r["round"] in first and first[r["round"]]["rate"] > 0]
        rows.append({
            "config": config,
            "runs": len(mine),
            "failed": len([r for r in runs if r["index"] == i and not r["ok"]]),
            "median": statistics.median(rates) if rates else None,
            "min": min(rates) if rates else None,
            "max": max(rates) if rates else None,
            "ratio": statistics.median(ratios) if ratios else None,
            "cores": statistics.median([r["cores"] for r in mine]) if mine else None,
            "other": max(r["other"] for r in mine) if mine else None,
            "rss_mb": max((r["rss_mb"] for r in mine if r.get("rss_mb") is not None),
                          default=None),
            "rates": rates,
            "methods": sorted({r["method"] for r in mine}),
        })
    return rows


def markdown(workload, rows, args):
    out = ["| `%s` configuration | req/s (median of %d) | min / max | vs first (median ratio) "
           "| workload CPU (cores) | other CPU (max, cores) | RSS at end (max, MiB) | runs (req/s) |"
           % (workload, args.rounds),
           "| --- | ---: | --- | ---: | ---: | ---: | ---: | --- |"]
    for row in rows:
        label = "`%s`" % row["config"] if row["config"].strip() else "defaults"
        runs = ", ".join(_fmt(x, 0) for x in row["rates"])
        if row["failed"]:
            runs = (runs + " " if runs else "") + "(%d failed)" % row["failed"]
        if row["methods"] and row["methods"] != ["COUNT"]:
            runs += " [%s]" % "/".join(row["methods"])
        out.append("| %s | %s | %s / %s | %s | %s | %s | %s | %s |" % (
            label, _fmt(row["median"]), _fmt(row["min"], 0), _fmt(row["max"], 0),
            _fmt(row["ratio"], 2) + "×" if row["ratio"] is not None else "–",
            _fmt(row["cores"], 2), _fmt(row["other"], 2), _fmt(row["rss_mb"], 0), runs))
    return "\n".join(out)


# ----------------------------------------------------------------------------- main

def parse(argv):
    p = argparse.ArgumentParser(
        description="Requests/s of a fixture workload per configuration (medians of "
                    "alternated rounds).",
        usage="%(prog)s [OPTIONS] WORKLOAD CONFIG [CONFIG ...]")
    p.add_argument("--seconds", type=float, default=8.0,
                   help="measurement window per run, after the warm-up (default %(default)s)")
    p.add_argument("--warmup", type=float, default=2.0,
                   help="seconds between READY and the first count (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3,
                   help="alternated rounds; every configuration runs once per round "
                        "(default %(default)s)")
    p.add_argument("--common", default="",
                   help="arguments appended to every configuration, e.g. '--threads 8'")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter for the workload (default: this one)")
    p.add_argument("--quiet-wait", type=float, default=0.0, metavar="S",
                   help="before each run wait up to S seconds for the rest of the machine to "
                        "use < 0.25 cores (default 0: do not wait)")
    p.add_argument("--json-out", help="also write every run and the summary as JSON here")
    # The sweep's options end at the workload name: everything after it is a configuration,
    # even when it starts with "--" (e.g. "--no-lock").
    own, rest = [], list(argv)
    while rest and rest[0].startswith("-"):
        opt = rest.pop(0)
        own.append(opt)
        if opt in ("-h", "--help") or "=" in opt:
            continue
        if rest:
            own.append(rest.pop(0))
    args = p.parse_args(own)
    if len(rest) < 2:
        p.error("need WORKLOAD and at least one CONFIG (\"\" = the workload's defaults)")
    args.workload, args.configs = rest[0], rest[1:]
    if args.rounds < 1 or args.seconds <= 0 or args.warmup < 0:
        p.error("--rounds must be >= 1, --seconds > 0, --warmup >= 0")
    return args


def resolve(workload):
    path = Path(workload)
    if path.suffix == ".py" and path.exists():
        return path.resolve(), path.stem
    candidate = WORKLOAD_DIR / (workload + ".py")
    if candidate.exists():
        return candidate, workload
    raise SystemExit("unknown workload %r (no %s)" % (workload, candidate))


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    script, name = resolve(args.workload)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _kill_all)
    n = len(args.configs)
    per_run = args.warmup + args.seconds + 2
    log("%s: %d configurations x %d rounds, ~%.0f s each (~%.1f min)"
        % (name, n, args.rounds, per_run, n * args.rounds * per_run / 60))
    runs = []
    try:
        for rnd in range(args.rounds):
            order = [(rnd + k) % n for k in range(n)]
            for i in order:
                if args.quiet_wait > 0:
                    busy = wait_quiet(args.quiet_wait)
                    if busy >= 0.25:
                        log("machine still busy (%.2f cores) after %g s; running anyway"
                            % (busy, args.quiet_wait))
                r = run_once(args.python, script, args.configs[i], args.common,
                             args.seconds, args.warmup)
                r.update(round=rnd, index=i)
                runs.append(r)
                if r["ok"]:
                    log("round %d  %-40s %9.1f req/s  cpu %.2f cores  other %.2f"
                        % (rnd + 1, repr(args.configs[i]), r["rate"], r["cores"], r["other"]))
                else:
                    log("round %d  %-40s FAILED: %s" % (rnd + 1, repr(args.configs[i]),
                                                         r.get("error")))
    finally:
        _kill_all()
    rows = summarize(args.configs, runs)
    cmd = "python benchmarks/knob_sweep.py %s%s" % (
        "".join("%s %s " % (k, shlex.quote(str(v))) for k, v in (
            ("--seconds", "%g" % args.seconds), ("--warmup", "%g" % args.warmup),
            ("--rounds", args.rounds), ("--quiet-wait", "%g" % args.quiet_wait),
            ("--common", args.common)) if v not in ("", None, "0")),
        " ".join([name] + [shlex.quote(c) for c in args.configs]))
    print("`%s`\n" % cmd)
    print(markdown(name, rows, args))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"workload": name, "command": cmd, "rows": rows, "runs": runs}, f,
                      indent=1)
    return 0 if all(r["runs"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
