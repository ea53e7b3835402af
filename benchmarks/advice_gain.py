#!/usr/bin/env python3
"""Advice proven by experiment: does the verdict's first advice, applied, make the service faster?

    python benchmarks/advice_gain.py [--fixtures pipeline,locked_blas,"async_executor:--executor named",...]
                                     [--rounds 3]
                                     [--seconds 8] [--duration 6] [--python 3.12]
                                     [--json-out FILE]

For each fixture workload (fixtures/workloads/, run with its "bad" defaults):

1. start it, `diagnose attach PID --duration D --json`, stop it: the verdict, its predicted gain
   and the first advice as a knob (`evidence.fix`: {"knob", "value"[, "stage"]});
2. translate the knob into the workload's own parameter (the table KNOB_ARGS below: e.g.
   OPENBLAS_NUM_THREADS=1 -> `--blas-threads 1`, stage_threads(model_stage)=2 ->
   `--model-threads 2`); a verdict whose advice has no knob (compute_bound: "a cheaper model",
   underloaded: "look upstream") is listed with no measurement;
3. measure requests/s before (defaults) and after (the advice applied), alternating over
   `--rounds` rounds on fresh processes (benchmarks/knob_sweep.py's runner), and print the
   medians, the measured ratio and the predicted gain side by side.

Waits only the kernel names (`--fixtures native_mutex,pipe_sidecar,wsgi_file_lock`, not run by
default): `native_mutex` (a pthread mutex through ctypes; the lock advice's instances ->
`--mutexes N`), `pipe_sidecar` (one sidecar behind a pipe; instances -> `--sidecars N`) and
`wsgi_file_lock`, a real gunicorn server (`-w 3 -k sync`, fixtures/servers/) whose workers share a
file lock: diagnosed at the master's pid under wrk load (8 connections), measured with wrk before
and after on a fresh server each run, the advice applied as `DIAGNOSE_FIXTURE_LOCK=none` (the
guard dropped: whatever the lock advice's knob, a file lock across processes has no instances to
add).

`--python X.Y` runs the workloads (diagnosed and measured) on that CPython's cached venv with
numpy (tests/integration/pythons.py), or a path's interpreter; diagnose runs on this one.

The machine is shared and noisy: the ratio is the median of same-round ratios. Progress goes to
stderr, the markdown table to stdout. The blocked-event-loop fixtures are real uvicorn servers
and have their own script (benchmarks/advice_event_loop.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import knob_sweep  # noqa: E402  (the runner: fresh process, READY, COUNT over a window, cleanup)

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = REPO / "fixtures" / "workloads"

DEFAULT_FIXTURES = ("pipeline", "locked_blas", "batching", "lock_contention", "pool_wait",
                    "logging_lock", "gil_contention", "preprocess_bound", "blas_fanout",
                    "scheduler_overhead", "compute_bound", "process_pool", "mp_pipeline",
                    "dataloader_job", "deadlock_two_locks", "deadlock_rlock", "lock_across_io",
                    "cpu_quota", "gc_heavy", "syscall_heavy", "fresh_buffers", "spawn_per_request", "poll_for_result",
                    "async_poll_for_result")

_BLAS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_PIPELINE_STAGES = {"decode_stage": "--decode-threads", "model_stage": "--model-threads",
                    "postprocess_stage": "--post-threads"}


def knob_args(fixture: str, fix: dict | list | None) -> list[str] | None:
    """The workload's parameters that apply `fix` (one knob, or a list of knobs changed together),
    or None when it has no such knob."""
    if not fix:
        return None
    if isinstance(fix, list):
        parts = [knob_args(fixture, one) for one in fix]
        return None if any(p is None for p in parts) else [a for p in parts if p for a in p]
    knob, value = fix.get("knob"), fix.get("value")
    if knob in _BLAS and fixture in ("locked_blas", "batching", "blas_fanout"):
        return ["--blas-threads", str(value)]
    if knob == "stage_threads":
        stage = fix.get("stage")
        if fixture == "pipeline" and stage in _PIPELINE_STAGES:
            return [_PIPELINE_STAGES[stage], str(value)]
        if fixture == "batching" and stage == "batcher_loop":
            return ["--batchers", str(value)]
    if knob == "model_instances" and fixture == "lock_contention":
        return ["--instances", str(value)]
    if knob == "model_instances" and fixture == "locked_blas":
        return ["--no-lock"]
    if knob == "pool_size" and fixture == "pool_wait":
        return ["--pool-size", str(value)]
    if knob == "queue_handler" and fixture == "logging_lock":
        return ["--queue-handler"]
    if knob == "vectorize" and fixture == "gil_contention":
        return ["--vectorized"]
    if knob == "faster_preprocessing" and fixture == "preprocess_bound":
        return ["--fast-resize"] if "resize" in str(value) else ["--fast-decode"]
    if knob == "request_threads":
        return ["--threads", str(value)]
    if knob == "workers" and fixture == "process_pool":
        return ["--threads", str(value)]
    if knob == "num_workers" and fixture == "dataloader_job":
        return ["--num-workers", str(value)]
    if knob in ("processes", "max_workers") and fixture == "mp_pipeline":
        return ["--processes", str(value)]
    if knob == "call_outside_lock" and fixture == "lock_across_io":
        return ["--fetch-outside-lock"]
    if knob == "lock_order" and fixture in ("deadlock_two_locks", "deadlock_rlock"):
        return ["--lock-order", "consistent"]
    if knob == "max_queue" and fixture == "unbounded_backlog":
        return ["--max-queue", str(value)]
    # async_wait names the semaphore itself as the knob (its name at the await site)
    if fixture == "async_semaphore" and isinstance(value, int) and not isinstance(value, bool):
        return ["--permits", str(value)]
    if knob == "release_gil" and fixture == "gil_held_asleep":
        return ["--release-gil"]
    if knob == "per_thread_instance" and fixture == "sqlite_shared_connection":
        return ["--per-thread"]
    if knob == "executor_max_workers" and fixture == "async_executor":
        return ["--max-workers", str(value)]
    if knob == "break_await" and fixture == "await_cycle":
        return ["--acyclic"]
    # gc_pressure's first advice: gc.freeze() after loading, and a higher young threshold
    if knob == "gc_freeze" and fixture == "gc_heavy":
        return ["--gc-freeze"] if value else []
    if knob == "gc_threshold" and fixture == "gc_heavy" and isinstance(value, list):
        return ["--gc-threshold", ",".join(str(int(v)) for v in value)]
    # kernel_work's first advice: fewer, larger system calls at the line (a buffered spool file)
    if knob == "batch_syscalls" and fixture == "syscall_heavy":
        return ["--buffer-bytes", "65536"]
    # kernel_work's first advice where the work is page faults: reuse the buffers
    if knob == "reuse_memory" and fixture == "fresh_buffers":
        return ["--reuse"]
    # children_cpu's first advice: the child's work done in the service (hashlib, not sha256sum)
    if knob == "children_in_process" and fixture == "spawn_per_request":
        return ["--in-process"]
    # poll_loop's first advice: wait on the result itself, not a sleep loop
    if knob == "wait_on_result" and fixture == "poll_for_result":
        return ["--wait", "event"]
    if knob == "wait_on_result" and fixture == "async_poll_for_result":
        return ["--wait", "future"]  # an asyncio.Future per job, resolved from the model thread
    # the workload makes its own cgroup v1 group with that quota (root; unlimited otherwise)
    if knob == "cpu_quota_cores" and fixture == "cpu_quota":
        return ["--cpu-quota", str(value)]
    return kernel_wait_args(fixture, knob, value)



def kernel_wait_args(fixture: str, knob, value) -> list[str] | None:
    """Waits only the kernel names: a native mutex, a pipe sidecar, a file lock across workers."""
    count = value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else None
    if fixture == "native_mutex" and knob in ("model_instances", "instances", "mutexes"):
        return ["--mutexes", str(count or 6)]
    if fixture == "pipe_sidecar" and knob in ("model_instances", "instances", "sidecars",
                                              "stage_threads", "workers", "processes"):
        return ["--sidecars", str(count or 8)]
    if fixture in SERVER_FIXTURES and knob:
        return ["=".join(SERVER_FIXTURES[fixture]["fix"])]
    return None


# Fixtures of fixtures/servers/ measured here: a gunicorn server diagnosed at its master's pid
# under wrk load; the fix is an environment variable of the app.
SERVER_FIXTURES = {
    "wsgi_file_lock": {"workers": 3, "connections": 8, "fix": ("DIAGNOSE_FIXTURE_LOCK", "none")},
}


def _servers():
    """The integration tests' server harness (gunicorn, wrk), imported when a server is asked
    for."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.integration import servers
    return servers


def _gunicorn(servers, fixture: str, port: int, python: str):
    return servers.gunicorn_sync(fixture, port, workers=SERVER_FIXTURES[fixture]["workers"],
                                 python=None if python == sys.executable else python)


def _scratch_env(scratch: str) -> dict:
    """The server's files in a directory removed after the run (wsgi_file_lock's lock file)."""
    return {"DIAGNOSE_FIXTURE_LOCK_PATH": str(Path(scratch) / "device.lock")}


def diagnose_server(fixture: str, duration: float, out_dir: Path, python: str = sys.executable) -> dict:
    """Starts the server, loads it with wrk and attaches at the gunicorn master's pid."""
    servers = _servers()
    port = servers.free_port()
    with tempfile.TemporaryDirectory(prefix="diagnose-advice-") as scratch, \
            servers.start_server(_gunicorn(servers, fixture, port, python), port,
                                 env=_scratch_env(scratch)) as server:
        with servers.load_during(server.url("/predict"), seconds=duration + 30,
                                 connections=SERVER_FIXTURES[fixture]["connections"]):
            return attach(server.pid, duration, out_dir)


def measure_server(fixture: str, configs: list[str], rounds: int, seconds: float, warmup: float,
                   python: str = sys.executable) -> list[dict]:
    """Requests/s by wrk per configuration ("" or "NAME=VALUE" in the server's environment), a
    fresh server per run, alternating over rounds; summarized as knob_sweep.summarize does
    ("other" there is the machine's CPU less the server's: wrk's share included)."""
    servers = _servers()
    connections = SERVER_FIXTURES[fixture]["connections"]
    runs = []
    for r in range(rounds):
        for k in range(len(configs)):
            index = (k + r) % len(configs)
            config = configs[index]
            knob_sweep.log(f"  {fixture} round {r + 1}/{rounds}: {config or 'defaults'}")
            port = servers.free_port()
            result = {"config": config, "ok": False, "round": r, "index": index}
            try:
                with tempfile.TemporaryDirectory(prefix="diagnose-advice-") as scratch, \
                        servers.start_server(_gunicorn(servers, fixture, port, python), port,
                                             env={**_scratch_env(scratch),
                                                  **(dict([config.split("=", 1)]) if config else {})}
                                             ) as server:
                    url = server.url("/predict")
                    with servers.load(url, seconds=warmup, connections=connections):
                        pass
                    busy0, cpu0, t0 = (knob_sweep.machine_busy(), knob_sweep.tree_cpu(server.pid),
                                       time.monotonic())
                    with servers.load(url, seconds=seconds, connections=connections) as run:
                        pass
                    wall = time.monotonic() - t0
                    cpu = knob_sweep.tree_cpu(server.pid) - cpu0
                    busy = knob_sweep.machine_busy() - busy0
                result.update(ok=True, rate=run.result.requests_per_second, cores=cpu / wall,
                              other=max(0.0, busy - cpu) / wall, rss_mb=None, method="wrk",
                              window=wall)
            except Exception as exc:  # one failed run must not end the measurement
                result["error"] = f"{type(exc).__name__}: {exc}"
            runs.append(result)
    return knob_sweep.summarize(configs, runs)

def attach(pid: int, duration: float, out_dir: Path) -> dict:
    """`diagnose attach PID --json` (diagnose on this interpreter): the report."""
    proc = subprocess.run([sys.executable, "-m", "diagnose", "attach", str(pid), "--duration",
                           str(duration), "--json", "--quiet", "--output-dir", str(out_dir)],
                          capture_output=True, text=True, timeout=duration + 120, cwd=REPO)
    if not proc.stdout.strip():
        raise RuntimeError(f"diagnose failed: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout)


def split_spec(spec: str) -> tuple[str, list[str]]:
    """A fixture and the arguments of its variant: `async_executor:--executor named` is the
    async_executor workload run with `--executor named` (diagnosed and measured so, the advice's
    parameters after them)."""
    name, _, variant = spec.partition(":")
    return name.strip(), variant.split()


def diagnose(fixture: str, duration: float, out_dir: Path, python: str = sys.executable) -> dict:
    name, variant = split_spec(fixture)
    cmd = [python, str(WORKLOADS / f"{name}.py"), *variant, "--seconds", str(duration + 60)]
    workload = knob_sweep.Workload(cmd)
    try:
        return attach(workload.wait_ready(), duration, out_dir)
    finally:
        workload.kill()


def measure(fixture: str, configs: list[str], rounds: int, seconds: float, warmup: float,
            python: str = sys.executable) -> list[dict]:
    name, variant = split_spec(fixture)
    script = WORKLOADS / f"{name}.py"
    runs = []
    for r in range(rounds):
        for k in range(len(configs)):
            index = (k + r) % len(configs)
            knob_sweep.log(f"  {fixture} round {r + 1}/{rounds}: {configs[index] or 'defaults'}")
            config = " ".join([*variant, configs[index]]).strip()
            result = knob_sweep.run_once(python, script, config, "", seconds, warmup)
            result.update(round=r, index=index)
            runs.append(result)
    return knob_sweep.summarize(configs, runs)


def row_for(fixture: str, args, out_dir: Path, python: str = sys.executable) -> dict:
    if fixture in SERVER_FIXTURES:
        return row_from(fixture, diagnose_server(fixture, args.duration, out_dir, python), args,
                        python)
    return row_from(fixture, diagnose(fixture, args.duration, out_dir, python), args, python)


def row_from(fixture: str, report: dict, args, python: str = sys.executable) -> dict:
    """The verdict of `report` and, when its first advice has a knob, the measured gain."""
    verdict = report["verdict"]["primary"]
    first = report["findings"][0] if report["findings"] else {}
    fix = (first.get("evidence") or {}).get("fix")
    applied = knob_args(split_spec(fixture)[0], fix) if verdict != "none" else None
    row = {"fixture": fixture, "verdict": verdict, "fix": fix,
           "advice": (first.get("advice") or [""])[0], "predicted_gain": first.get("predicted_gain"),
           "gain_basis": first.get("gain_basis"), "applied": applied}
    if applied is None:
        return row
    config = " ".join(applied)
    if fixture in SERVER_FIXTURES:
        rows = measure_server(fixture, ["", config], args.rounds, args.seconds, args.warmup, python)
    else:
        rows = measure(fixture, ["", config], args.rounds, args.seconds, args.warmup, python)
    row.update(before=rows[0]["median"], after=rows[1]["median"], ratio=rows[1]["ratio"],
               other_cpu=max(r["other"] or 0 for r in rows), runs=[r["rates"] for r in rows])
    return row


def _f(x, digits=2):
    return "–" if x is None else f"{x:,.{digits}f}"


def markdown(rows: list[dict]) -> str:
    out = ["| fixture | verdict | first advice applied | req/s before | req/s after | measured | "
           "predicted |", "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        applied = " ".join(r["applied"]) if r.get("applied") else \
            ("no knob: " + (r["advice"][:60] + "…" if r.get("advice") else "no advice"))
        measured = f"{_f(r.get('ratio'))}x" if r.get("ratio") else "–"
        if r.get("before") == 0 and r.get("after"):
            measured = "hung → serving"  # no ratio to a service that served nothing
        predicted = f"{_f(r.get('predicted_gain'))}x" if r.get("predicted_gain") else "–"
        if r.get("verdict") == "deadlock":
            predicted = "hung"  # the finding predicts no ratio: the service serves nothing
        out.append(f"| {r['fixture']} | {r['verdict']} | `{applied}` | {_f(r.get('before'), 0)} | "
                   f"{_f(r.get('after'), 0)} | {measured} | {predicted} |")
    return "\n".join(out)


def measuring_parser(doc: str, fixtures: tuple[str, ...], rounds: int, seconds: float,
                     duration: float) -> argparse.ArgumentParser:
    """The options of a benchmark that diagnoses fixtures and measures them (this one and
    benchmarks/calibration.py), with its own defaults."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--fixtures", default=",".join(fixtures))
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--seconds", type=float, default=seconds, help="measured window per run")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=duration,
                        help="diagnose's sampling window")
    parser.add_argument("--python", default=None, metavar="X.Y|PATH",
                        help="run the workloads on this CPython's venv (default: this interpreter)")
    parser.add_argument("--json-out", type=Path)
    return parser


def main(argv=None) -> int:
    args = measuring_parser(__doc__, DEFAULT_FIXTURES, rounds=3, seconds=8.0,
                            duration=6.0).parse_args(argv)
    python = knob_sweep.python_for(args.python)
    out_dir = Path("/tmp") / f"diagnose-advice-gain-{int(time.time())}"
    rows = []
    for fixture in [f.strip() for f in args.fixtures.split(",") if f.strip()]:
        knob_sweep.log(f"{fixture}: diagnosing")
        try:
            rows.append(row_for(fixture, args, out_dir, python))
        except Exception as exc:  # one fixture's failure must not lose the others
            rows.append({"fixture": fixture, "verdict": f"error: {exc}", "applied": None})
        knob_sweep.log(f"{fixture}: {rows[-1].get('verdict')} {rows[-1].get('ratio')}")
    print(markdown(rows))
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
