"""Every stack of a pre-fork tree's report belongs to its process: attached at the supervisor,
each process's stacks in the JSON report and the .speedscope.json agree with `py-spy dump` of
that process (the same outermost frames, a depth in the range its dumps show), and no stack
mixes the supervisor's frames with a worker's.

Forked processes share their threads' pthread ids and py-spy's chrometrace writer diffs traces
per pthread id across processes (readers/chrometrace.py); read per (pid, thread), the stacks grew
towers hundreds of frames deep (`… → app → tokenize → Arbiter.run → … → app → …`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psutil
import pytest

from diagnose.collect.pyspy import pyspy_binary
from tests.conftest import run_cli
from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.servers import free_port, gunicorn_sync, load_during, start_server
from tests.integration.typed import read_report
from tests.speedscope_file import read_speedscope

pytestmark = [pytest.mark.integration, requires_ptrace]

SAMPLE_SECONDS = "3"
# an upper bound covering the attach (probes, the window, py-spy's wrap-up) and the dumps; the
# load stops when they are done
LOAD_SECONDS = 25
DUMPS = 3  # per process
# A report samples many more instants than a few dumps: it may see calls the dumps missed
# (a response being serialised, a heartbeat); a tower of stacks adds a whole process's depth.
DEPTH_SLACK = 8


def frame_key(function: str, file: str) -> tuple[str, str]:
    return function, os.path.basename(file)


def dump_stacks(pid: int) -> list[list[tuple[str, str]]]:
    """`py-spy dump` of one process: each thread's stack, root→leaf, as (function, file name);
    the main thread's first."""
    out = subprocess.run([pyspy_binary(), "dump", "--pid", str(pid)], capture_output=True,
                         text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    stacks, current = [], None
    for line in out.stdout.splitlines():
        if line.startswith("Thread "):
            current = []
            if line.rstrip().endswith('"MainThread"'):
                stacks.insert(0, current)
            else:
                stacks.append(current)
        elif current is not None and line.startswith("    ") and line.rstrip().endswith(")"):
            function, _, where = line.strip().rpartition(" (")
            current.insert(0, frame_key(function, where[:-1].rsplit(":", 1)[0]))
    return [s for s in stacks if s]


def report_stacks(out_dir: Path) -> dict[str, dict[int, list[list[tuple[str, str]]]]]:
    """Per output ("json", "speedscope"): per pid, (thread name, stack root→leaf) of every
    stack."""
    raw = (".speedscope.json", ".procfs.json", ".chrometrace.json", ".tasks.json",
           ".sampling.json")  # and --keep-raw's
    report = read_report(next(p for p in out_dir.glob("*.json") if not p.name.endswith(raw)))
    frames = report.stacks.frames
    by_json: dict = {}
    for row in report.stacks.samples:
        by_json.setdefault(row.pid, []).append(
            (row.thread, [frame_key(frames[i].function, frames[i].file) for i in row.stack]))
    speedscope = read_speedscope(next(p for p in out_dir.glob("*.speedscope.json")
                                      if not p.name.endswith(".native.speedscope.json")))
    shared = speedscope.frames
    by_speedscope: dict = {}
    for profile in speedscope.profiles:
        _, pid, _, _, thread = profile.name.split(maxsplit=4)  # Process P Thread T "name"
        by_speedscope.setdefault(int(pid), []).extend(
            (thread.strip('"'), [frame_key(shared[i].name, shared[i].file) for i in sample])
            for sample in profile.samples)
    return {"json": by_json, "speedscope": by_speedscope}


def common_prefix(stacks: list[list]) -> list:
    prefix = list(stacks[0])
    for stack in stacks[1:]:
        n = 0
        while n < min(len(prefix), len(stack)) and prefix[n] == stack[n]:
            n += 1
        del prefix[n:]
    return prefix


def assert_stacks_match_dumps(outputs: dict, supervisor: int, dumps: dict[int, list]) -> None:
    """`dumps`: per pid of the tree, its dumped stacks. Checks each output's stacks against
    them: present for every process; every main-thread stack opens with the frames all the
    tree's main threads share (the code above the fork), each once; depth within the dumps' range of its role; the
    supervisor's own frames never in a worker's stack, a worker's never in the supervisor's."""
    workers = [pid for pid in dumps if pid != supervisor]
    assert workers, dumps
    shared_root = common_prefix([stacks[0] for stacks in dumps.values()])
    assert shared_root, dumps  # at least the program's entry point
    worker_frames = {f for pid in workers for s in dumps[pid] for f in s}
    supervisor_frames = {f for s in dumps[supervisor] for f in s}
    only = {supervisor: supervisor_frames - worker_frames,
            "worker": worker_frames - supervisor_frames}
    deepest = {supervisor: max(len(s) for s in dumps[supervisor]),
               "worker": max(len(s) for pid in workers for s in dumps[pid])}
    assert only["worker"] and only[supervisor], (only, dumps)
    for output, by_pid in outputs.items():
        assert set(by_pid) == set(dumps), (output, sorted(by_pid), sorted(dumps))
        for pid, stacks in by_pid.items():
            role = supervisor if pid == supervisor else "worker"
            other = "worker" if role == supervisor else supervisor
            for thread, stack in stacks:
                where = (output, pid, thread, [f[0] for f in stack])
                if thread == "MainThread":  # the thread that forked, or was forked
                    assert stack[:len(shared_root)] == shared_root, where
                    assert all(stack.count(f) == 1 for f in shared_root), where
                assert 0 < len(stack) <= deepest[role] + DEPTH_SLACK, where
                assert not only[other] & set(stack), where


def dumps_of(pids: list[int]) -> dict[int, list]:
    """Per pid, the stacks of DUMPS dumps (the first dump's main thread first)."""
    dumps: dict[int, list] = {pid: [] for pid in pids}
    for _ in range(DUMPS):
        for pid in pids:
            dumps[pid].extend(dump_stacks(pid))
    return dumps


def test_gunicorn_workers_stacks_in_the_report_match_their_dumps(out_dir):
    port = free_port()
    with (start_server(gunicorn_sync("wsgi_preprocess", port, workers=3), port) as server,
          load_during(server.url("/predict"), seconds=LOAD_SECONDS, connections=6)):
        proc, _ = run_cli("attach", server.pid, "--duration", SAMPLE_SECONDS, "--quiet",
                          "--keep-raw", "--output-dir", out_dir)
        assert proc.returncode == 0, proc.stderr
        dumps = dumps_of([server.pid, *server.worker_pids()])
    assert len(dumps) == 4
    outputs = report_stacks(out_dir)
    assert_stacks_match_dumps(outputs, server.pid, dumps)
    # the kept recordings (one per process), replayed offline together, give the same stacks
    recordings = sorted(out_dir.glob("*.chrometrace.json"))
    assert recordings
    base = out_dir / recordings[0].name.split(".")[0]
    replayed = out_dir / "replayed"
    proc, _ = run_cli("analyze", *recordings, "--procfs", f"{base}.procfs.json",
                      "--native-profile", f"{base}.native.speedscope.json",
                      "--output-dir", replayed)
    assert proc.returncode == 0, proc.stderr
    assert_stacks_match_dumps(report_stacks(replayed), server.pid, dumps)
    # the arbiter's loop is the supervisor's: above a request it would be a tower
    request = {pid: stacks for pid, stacks in outputs["json"].items() if pid != server.pid}
    for stacks in request.values():
        for _thread, stack in stacks:
            names = [f[0] for f in stack]
            assert names.count("Arbiter.run") == 1, names
            if "app" in names:
                assert names.index("Arbiter.run") < names.index("app"), names


@pytest.mark.parametrize("executor", ["process", "pool"])
def test_multiprocessing_fork_workers_stacks_in_the_report_match_their_dumps(out_dir, executor):
    command = workload_command("process_pool", "--seconds", "40", "--threads", "2",
                               "--executor", executor)
    with running(command) as pid:
        proc, _ = run_cli("attach", pid, "--duration", SAMPLE_SECONDS, "--quiet",
                          "--output-dir", out_dir)
        assert proc.returncode == 0, proc.stderr
        workers = sorted(p.pid for p in psutil.Process(pid).children())
        assert len(workers) == 2
        dumps = dumps_of([pid, *workers])
    assert_stacks_match_dumps(report_stacks(out_dir), pid, dumps)
