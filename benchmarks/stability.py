#!/usr/bin/env python3
"""Stability: attach five times in a row to each fixture; the verdict must not change.

    python benchmarks/stability.py [--fixtures a,b,...] [--attaches 5] [--duration 4]
                                   [--python 3.12 | /path/to/python] [--keep DIR]

Each fixture workload (fixtures/workloads/, every one but those starting with "_"; and the gRPC
server fixtures/servers/grpc_locked.py under its gRPC load client) is started once and attached
`--attaches` times back to back with `diagnose attach PID --duration D --json`; late_thread starts
in its steady state (`--start-after 0`). `--python` runs the workloads on another interpreter: a
version ("3.13") gets the cached venv with numpy that the integration tests build (tests/integration/pythons.py, under
.cache/pythons/), with grpcio added for the gRPC server and its client (`venv_with_grpc`); a path
is used as it is; diagnose itself, and so every attach, runs on this interpreter. A verdict
is stable when the set it names (the primary, and the co-primary if any) is the same in every
attach. The table lists, per fixture, that set for each attach, the top finding's score and
predicted gain (min-max), and whether every attach agreed. Progress to stderr, the table to
stdout; the exit status is 1 when any fixture's verdict changed. `--keep DIR` writes each
attach's JSON report to DIR/<fixture>-<n>.json (every finding's score, intervals and gain: what
moved between attaches), and a failed attach's exit status and stderr to <fixture>-<n>.error.txt.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
import knob_sweep  # noqa: E402  (fresh workload process, READY, cleanup of its process group)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from diagnose.checks.arbiter import rank_key  # noqa: E402
from diagnose.checks.engine import order_of  # noqa: E402
WORKLOADS = REPO / "fixtures" / "workloads"
DEFAULT_FIXTURES = tuple(sorted([p.stem for p in WORKLOADS.glob("*.py") if not p.stem.startswith("_")]
                                + ["grpc_locked"]))
# Arguments that put a workload in its steady state from READY on: late_thread's threads start on
# a trigger (a window before it and one after see two different services, by design).
STEADY_ARGS = {"late_thread": ("--start-after", "0")}
# Workloads whose state moves on by design: a fresh process for each attach. unbounded_backlog's
# queue grows until its memory cap (1 GiB) ends it, ~60 s in: later attaches met another service.
FRESH_PER_ATTACH = {"unbounded_backlog"}


def workload_python(spec: str | None) -> str:
    """The interpreter the workloads run on: this one, a path, or a version's numpy venv."""
    return knob_sweep.python_for(spec)


def named(verdict: dict) -> str:
    """The findings a verdict names, in its own (stable) order: "a" or "a+b"."""
    return "+".join(v for v in (verdict.get("primary"), verdict.get("co_primary")) if v)


def point_first(findings: list[dict]) -> str:
    """The first finding by the point scores and gains alone (no intervals, no co-primary): the
    verdict a ranking blind to noise gives, for comparison within the same attaches."""
    if not findings:
        return "none"
    # each interval shrunk to its point
    rows = [SimpleNamespace(id=f["id"], score=f["score"], predicted_gain=f.get("predicted_gain"),
                            score_range=(f["score"], f["score"]),
                            gain_range=(f.get("predicted_gain") or 1.0,) * 2,
                            bounded_by_stage=f.get("bounded_by_stage"))
            for f in findings]
    first = min(rows, key=lambda f: rank_key(f, order_of(f)))
    return first.id if first.score >= 25 else "none"


@contextlib.contextmanager
def workload_target(fixture: str, seconds: float, python: str):
    """A self-loading workload: its READY pid."""
    workload = knob_sweep.Workload([python, str(WORKLOADS / f"{fixture}.py"), "--seconds",
                                    str(seconds), *STEADY_ARGS.get(fixture, ())])
    try:
        yield workload.wait_ready()
    finally:
        # SIGTERM first: a workload that changed the machine undoes it (cpu_quota removes its
        # cgroup); a SIGKILL left that group behind until the fixture's next start
        workload.stop()


def grpc_python(spec: str | None, python: str = sys.executable) -> str:
    """The gRPC server's and its load client's interpreter: for a `--python` version, that
    version's numpy venv with grpcio added (tests/integration/pythons.py's `venv_with_grpc`);
    otherwise `python` (this interpreter, or a path given as it is: it must have grpcio).
    RuntimeError, with pip's reason, when the venv cannot be built."""
    if not spec or "/" in spec:
        return python
    from tests.integration import pythons

    grpc_python_, reason = pythons.venv_with_grpc(spec)
    if grpc_python_ is None:
        raise RuntimeError(f"--python {spec}: no venv with grpcio: {reason}")
    knob_sweep.log(f"  grpc_locked on {grpc_python_} ({reason})")
    return grpc_python_


@contextlib.contextmanager
def grpc_target(seconds: float, python: str, spec: str | None = None):
    """The gRPC server under its gRPC load client for the whole run: the server's pid."""
    import advice_grpc

    python = grpc_python(spec, python)
    with advice_grpc.Server([], python) as server:
        client = advice_grpc.load(server.port, seconds, 16, python)
        try:
            time.sleep(2)  # the client's channels connected and the handlers busy
            yield server.proc.pid
        finally:
            client.kill()
            client.wait(10)


# Fixtures that are servers: started with their load driver (not in fixtures/workloads/).
SERVERS = {"grpc_locked": grpc_target}


def attaches(fixture: str, count: int, duration: float, python: str = sys.executable,
             keep: Path | None = None, spec: str | None = None) -> list[dict]:
    """`count` attaches to `fixture` on `python` (`spec`: the `--python` it came from, which
    picks a server fixture's venv)."""
    # Generous: under a loaded machine an attach of a many-thread workload takes far longer
    # than its window, and a workload that ended early makes a failed attach, not a verdict.
    seconds = count * (duration + 90) + 60
    results = []
    if fixture in FRESH_PER_ATTACH:
        for k in range(count):
            with workload_target(fixture, duration + 90, python) as pid:
                results.append(_attach_once(fixture, pid, k, count, duration, keep))
        return results
    target = (SERVERS[fixture](seconds, python, spec) if fixture in SERVERS
              else workload_target(fixture, seconds, python))
    with target as pid:
        for k in range(count):
            results.append(_attach_once(fixture, pid, k, count, duration, keep))
    return results


def _attach_once(fixture: str, pid: int, k: int, count: int, duration: float,
                 keep: Path | None = None) -> dict:
    """One attach: the verdict it named, its first finding by point scores, score and gain."""
    knob_sweep.log(f"  {fixture}: attach {k + 1}/{count}")
    proc = subprocess.run([sys.executable, "-m", "diagnose", "attach", str(pid),
                           "--duration", str(duration), "--json", "--quiet",
                           "--output-dir", f"/tmp/diagnose-stability-{fixture}"],
                          capture_output=True, text=True, timeout=duration + 120, cwd=REPO)
    if not proc.stdout.strip():
        knob_sweep.log(f"    error: {(proc.stderr.strip().splitlines() or ['no output'])[-1][:200]}")
        if keep is not None:  # the whole of it: a failure under load is rare and must be readable
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{fixture}-{k + 1}.error.txt").write_text(
                f"exit {proc.returncode}\n{proc.stderr}")
        return {"verdict": "error", "point": "error", "score": None, "gain": None,
                "scores": ""}
    report = json.loads(proc.stdout)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"{fixture}-{k + 1}.json").write_text(proc.stdout)
    top = report["findings"][0] if report["findings"] else {}
    # The first three findings with their score intervals: why a verdict moved.
    scores = " ".join(f"{f['id']}={f['score']}" + (
        f"[{f['score_interval'][0]}-{f['score_interval'][1]}]" if f.get("score_interval") else "")
        + (f"x{f['predicted_gain']}" if f.get("predicted_gain") is not None else "")
        for f in report["findings"][:3])
    knob_sweep.log(f"    {named(report['verdict'])}: {scores}")
    return {"verdict": named(report["verdict"]), "point": point_first(report["findings"]),
            "score": top.get("score"), "gain": top.get("predicted_gain"), "scores": scores}


def _span(values) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "–"
    low, high = min(known), max(known)
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", default=",".join(DEFAULT_FIXTURES))
    parser.add_argument("--attaches", type=int, default=5)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--python", default=None,
                        help="the workloads' interpreter: a version (3.11, 3.12, 3.13: a cached venv "
                             "with numpy, and grpcio for grpc_locked) or a path (default: this "
                             "interpreter)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="write each attach's JSON report to KEEP/<fixture>-<n>.json")
    args = parser.parse_args(argv)
    python = workload_python(args.python)
    rows, unstable = [], 0
    for fixture in [f.strip() for f in args.fixtures.split(",") if f.strip()]:
        try:
            results = attaches(fixture, args.attaches, args.duration, python, args.keep, args.python)
        except RuntimeError as exc:  # never READY on this interpreter, or no venv for the server
            knob_sweep.log(f"  {fixture}: {exc}")
            # one line in a table cell: the error's last line says what failed (a traceback's)
            why = (str(exc).strip().splitlines() or ["no reason given"])[-1].replace("|", "/")
            rows.append(f"| {fixture} | not run: {why[:100]} | – | – | – | – |")
            continue
        # Stable: every attach that gave a verdict named the same set (failed attaches are
        # counted apart: a workload that could not be attached to is no verdict that moved).
        verdicts = [r["verdict"] for r in results if r["verdict"] != "error"]
        points = [r["point"] for r in results if r["point"] != "error"]
        errors = len(results) - len(verdicts)
        same = len(set(verdicts)) == 1
        unstable += not same
        rows.append(f"| {fixture} | {', '.join(r['verdict'] for r in results)} | "
                    f"{'yes' if same else '**no**'}{f' ({errors} failed)' if errors else ''} | "
                    f"{'yes' if len(set(points)) == 1 else '**no**'}: {', '.join(points)} | "
                    f"{_span([r['score'] for r in results])} | {_span([r['gain'] for r in results])} |")
    print(f"| fixture | verdict (primary+co-primary) of each of {args.attaches} attaches | stable | "
          "first by point scores alone (stable?) | top score | predicted gain |\n"
          "| --- | --- | --- | --- | ---: | ---: |")
    print("\n".join(rows))
    return 1 if unstable else 0


if __name__ == "__main__":
    sys.exit(main())
