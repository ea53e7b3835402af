"""A helper is not a worker: a process counts in the fleet worker_imbalance compares only when it
serves requests and is a sibling running the same program as the other workers; a child a server
started (an exporter, a housekeeping loop) is none, whatever CPU it used.

The recording (fixtures/recorded/grpc_helper_child/) is 5 s of `diagnose attach --keep-raw` of
`fixtures/servers/grpc_locked.py --helper-child` under 16 gRPC callers: the server's 16 handler
threads queue on the model lock (~0.95 cores), its exporter child sleeps in the gRPC C-core, and
its forked housekeeping child wakes every 50 ms on a stop event to run ~4 ms of Python (0.06
cores: the thread heuristics call its one thread a request thread). Before the fix the server and
the housekeeper were "2 worker processes [that] carry uneven load: from 0.06 to 0.95 cores", and
that led over the lock every request queues on.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from diagnose.checks.engine import load_check_settings
from diagnose.checks.service_verdict import worker_imbalance
from diagnose.model.service import QUIET_MAX_CORES, fleet
from tests.conftest import RECORDED, REPO, invoke_cli_report, marker_line
from tests.replay import restore
from tests.unit.test_roles_and_counters import (LIB, LIBC, LIBPYTHON, addr, build, locked_server,
                                                native, py, roles)

SERVER = REPO / "fixtures" / "servers" / "grpc_locked.py"
RECORDING = RECORDED / "grpc_helper_child"
SETTINGS = load_check_settings()["worker_imbalance"]


def _restored(name: str, into: Path) -> Path:
    """The recorded file with its paths' placeholders made this machine's (tests/replay.py): the
    analysis reads the source lines of the frames."""
    out = into / name
    out.write_text(restore((RECORDING / name).read_text()))
    return out


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """`diagnose analyze` of the three processes' recordings with the window's /proc record."""
    tmp = tmp_path_factory.mktemp("grpc_helper_child")
    files = [_restored(f"grpc_helper_child.{n}.chrometrace.json", tmp) for n in (1, 2, 3)]
    procfs = _restored("grpc_helper_child.procfs.json", tmp)
    native_profile = _restored("grpc_helper_child.native.speedscope.json", tmp)
    proc, report = invoke_cli_report("analyze", *files, "--procfs", procfs, "--native-profile",
                                     native_profile, "--json", "-o", tmp / "out")
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    return report


def _server_and_housekeeper(report):
    """The attached server (its parent was not sampled) and its forked child, which runs the
    server's own command line (the exporter runs `--exporter`)."""
    pids = {p.pid for p in report.processes}
    server = next(p for p in report.processes if p.ppid not in pids)
    return server, next(p for p in report.processes
                        if p.ppid == server.pid and p.cmdline == server.cmdline)


def test_a_servers_housekeeping_child_that_uses_cpu_is_a_helper_not_a_worker(replayed):
    server, housekeeper = _server_and_housekeeper(replayed)
    assert housekeeper.cpu_cores is not None and housekeeper.cpu_cores > QUIET_MAX_CORES
    assert server.role == "worker"
    assert housekeeper.role == "helper"


def test_the_lock_every_request_queues_on_is_the_verdict_beside_a_helper_child(replayed):
    assert replayed.verdict.primary == "lock_contention", replayed.verdict
    assert replayed.verdict.co_primary is None
    assert replayed.finding("worker_imbalance") is None
    lock = replayed.finding("lock_contention")
    assert lock.sites[0].file.endswith("grpc_locked.py")
    assert lock.sites[0].line == marker_line(SERVER, "model-lock")


# -- the housekeeping loop's role, from synthetic stacks ------------------------------------------

_FORKED = [py("<module>", "/srv/app/server.py", 240), py("main", "/srv/app/server.py", 237),
           py("serve", "/srv/app/server.py", 177), py("start_helper", "/srv/app/server.py", 167),
           py("BaseProcess.start", f"{LIB}/multiprocessing/process.py", 121),
           py("Popen._launch", f"{LIB}/multiprocessing/popen_fork.py", 71),
           py("BaseProcess._bootstrap", f"{LIB}/multiprocessing/process.py", 314),
           py("BaseProcess.run", f"{LIB}/multiprocessing/process.py", 108),
           py("housekeeping", "/srv/app/server.py", 141)]
PARKED = _FORKED + [py("Event.wait", f"{LIB}/threading.py", 629),
                    py("Condition.wait", f"{LIB}/threading.py", 331),
                    native("lock_PyThread_acquire_lock", LIBPYTHON),
                    native("PyThread_acquire_lock_timed", LIBPYTHON), addr(LIBC)]
TIDYING = _FORKED + [py("tidy", "/srv/app/server.py", 149)]


def housekeeper(cpu_s: float):
    """A forked child (the server's command line) whose one thread waits on a stop event 50 ms
    at a time and runs a little Python in between."""
    return (200, 100, ("python", "server.py"), {2000: ([(PARKED, 185), (TIDYING, 15)], cpu_s)})


def test_a_timer_loop_child_using_a_few_hundredths_of_a_core_beside_a_server_is_a_helper():
    views = build([locked_server(), housekeeper(cpu_s=0.6)])  # 0.06 cores beside ~1 core
    assert views[1].does_request_work  # the thread heuristics: busy now and then, never parked
    assert roles(views) == {100: "worker", 200: "helper"}


def test_a_timer_loop_child_using_as_much_cpu_as_the_server_stays_a_worker():
    views = build([locked_server(), housekeeper(cpu_s=9.0)])
    assert roles(views)[200] == "worker"


# -- the fleet worker_imbalance compares ----------------------------------------------------------

def view(pid, ppid, cores, cmdline, role="worker", serves=True):
    return SimpleNamespace(pid=pid, ppid=ppid, role=role, cpu_cores=cores, cmdline=list(cmdline),
                           does_request_work=serves)


def service(*views, cores=2):
    return SimpleNamespace(processes=list(views),
                           combined=SimpleNamespace(os=SimpleNamespace(usable_cores=cores)))


SERVER_CMD = ("python", "server.py", "--port", "50051")


def test_a_server_and_a_busy_child_it_started_are_no_fleet():
    # the child ran more than a helper may (not quiet) and is a worker by role: still no peer
    tree = service(view(100, 1, 1.01, SERVER_CMD), view(200, 100, 0.3, SERVER_CMD))
    assert fleet(tree.processes) == ()
    assert worker_imbalance(tree, SETTINGS) is None


def test_a_sibling_that_serves_no_request_is_no_peer_of_the_workers():
    gunicorn = ("/venv/bin/gunicorn", "-w", "2", "app:app")
    tree = service(view(100, 1, 0.0, gunicorn, role="master"), view(101, 100, 0.9, gunicorn),
                   view(102, 100, 0.9, gunicorn),
                   view(103, 100, 0.4, ("python", "exporter.py"), serves=False),
                   view(104, 100, 0.4, ("python", "exporter.py"), serves=False))
    assert [v.pid for v in fleet(tree.processes)] == [101, 102]
    assert worker_imbalance(tree, SETTINGS).evidence["workers"] == 2


def test_spawned_workers_whose_command_lines_differ_only_in_numbers_are_one_fleet():
    def spawned(handle):
        return ("python", "-c", f"from multiprocessing.spawn import spawn_main; "
                f"spawn_main(tracker_fd=5, pipe_handle={handle})", "--multiprocessing-fork")
    tree = service(view(100, 1, 0.0, ("uvicorn", "app:app", "--workers", "2"), role="master"),
                   view(101, 100, 0.95, spawned(7)), view(102, 100, 0.02, spawned(9), serves=False))
    found = worker_imbalance(tree, SETTINGS)
    assert found.evidence["workers"] == 2 and "uneven" in found.summary
