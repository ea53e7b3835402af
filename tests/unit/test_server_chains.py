"""A wait on a socket followed to the local process serving it (collect/sockets.py,
model/servers.py, checks/backend_saturated.py): the kernel's tables in-process, and a recorded
attach of a front end whose 16 request threads wait on a backend at capacity
(fixtures/recorded/backend_saturated_tcp/, made by tests/integration/test_server_chains.py on
fixtures/workloads/remote_backend.py and feature_backend.py)."""

from __future__ import annotations

import json
import os
import socket
import struct
from pathlib import Path

from diagnose.collect.sockets import (_peer_attribute, listener_inodes, socket_owners, socket_table,
                                      unix_peer_inode)
from diagnose.model.servers import ServerProcess
from tests.conftest import RECORDED
from tests.replay import replay

CASE = "backend_saturated_tcp"
NAME = "front_end_16_threads"


def _inode(sock: socket.socket) -> int:
    return os.fstat(sock.fileno()).st_ino


# -- the kernel's tables, read in this process ---------------------------------------------------

def test_a_tcp_connection_names_its_peer_and_the_listener_there_names_its_owner() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        address = "127.0.0.1:%d" % listener.getsockname()[1]
        with socket.create_connection(listener.getsockname()) as client:
            table = socket_table(os.getpid(), {_inode(client), _inode(listener)})
            assert table[_inode(client)] == f"tcp {address}"
            assert table[_inode(listener)] == f"listen {address}"
        assert listener_inodes(os.getpid(), address) == {_inode(listener)}
        assert socket_owners({_inode(listener)}) == {_inode(listener): {os.getpid()}}


def test_a_connected_unix_socket_is_named_by_the_path_its_peer_listens_on(tmp_path: Path) -> None:
    path = str(tmp_path / "backend.sock")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(path)
        listener.listen(1)
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(path)
            accepted, _ = listener.accept()
            with accepted:
                assert unix_peer_inode(_inode(client)) == _inode(accepted)
                assert socket_table(os.getpid(), {_inode(client)}) == {_inode(client): f"unix {path}"}
        assert listener_inodes(os.getpid(), f"unix {path}") == {_inode(listener)}


def test_a_sock_diag_reply_for_another_socket_or_an_error_names_no_peer() -> None:
    header = struct.pack("=IHHII", 40, 20, 0, 1, 0)
    message = struct.pack("=BBBBIII", socket.AF_UNIX, 1, 1, 0, 77, 0, 0)
    peer = struct.pack("=HHI", 8, 2, 78)
    assert _peer_attribute(header + message + peer, 77) == 78
    assert _peer_attribute(header + message + peer, 99) is None
    error = struct.pack("=IHHII", 36, 2, 0, 1, 0) + struct.pack("=i", -2) + b"\0" * 16
    assert _peer_attribute(error, 77) is None


# -- how busy a server was ----------------------------------------------------------------------

def _server(cpu: float, busiest: float, gil: float, usable: float = 2.0, runnable: float = 0.0
            ) -> ServerProcess:
    return ServerProcess(1, ("python", "backend.py"), ("tcp 127.0.0.1:9000",), 4.0, cpu, usable, 8, 1,
                         "scorer", busiest, busiest + runnable, gil, "", 0.0)


def test_a_server_is_at_capacity_by_its_busiest_thread_its_cores_or_its_gil() -> None:
    assert _server(cpu=0.98, busiest=0.97, gil=0.0).saturation > 0.9  # one serving thread
    assert _server(cpu=1.9, busiest=0.5, gil=0.0).saturation > 0.9  # every usable core
    # four threads sharing a core's worth of Python, queued on the GIL
    assert _server(cpu=0.95, busiest=0.3, gil=0.4).saturation > 0.9
    # the same CPU without GIL waits: threads that mostly wait (an IO-bound lookup) have room
    assert _server(cpu=0.95, busiest=0.3, gil=0.0).saturation < 0.6
    assert _server(cpu=0.05, busiest=0.02, gil=0.0).saturation < 0.1
    # a serving thread that ran 0.6 of the window and waited for a core the rest: a machine whose
    # cores are taken, the server still at its capacity
    assert _server(cpu=0.6, busiest=0.6, gil=0.0, runnable=0.35).saturation > 0.9


# -- the recorded attach ------------------------------------------------------------------------

def test_threads_waiting_on_a_backend_at_capacity_are_told_the_backend_is_the_limit(tmp_path: Path) -> None:
    report = replay(CASE, NAME, tmp_path)
    assert report.verdict.primary == "backend_saturated", report.verdict
    found = report.finding("backend_saturated")
    assert found is not None
    procfs = json.loads((RECORDED / CASE / f"{NAME}.procfs.json").read_text())
    # the backend's own client connections were looked up too, and no local process serves them
    procfs["servers"] = {a: pids for a, pids in procfs["servers"].items() if pids}
    (backend,) = {p for pids in procfs["servers"].values() for p in pids}
    assert f"pid {backend}" in str(found.value("backend").value)
    assert found.value("backend_clients").value == 16
    assert "run more of it" in found.advice[0].lower()
    # a request thread asleep in recv at its own loop is the backend's client, not idle
    underloaded = report.finding("underloaded")
    assert underloaded is None or underloaded.score < 25
    (address,) = procfs["servers"]
    graph = report.wait_graph
    assert graph is not None and graph.bottleneck == "r:socket:" + address.split(" ")[1]
    served = {e.target for e in graph.edges if e.source == graph.bottleneck and e.kind == "served_by"}
    assert served == {f"p:{backend}"}


def test_the_same_waits_on_a_backend_that_used_no_cpu_do_not_call_it_the_limit(tmp_path: Path) -> None:
    procfs = json.loads((RECORDED / CASE / f"{NAME}.procfs.json").read_text())
    for entry in procfs["server_processes"]:  # the backend's counters: no CPU over the window
        record = entry["record"]
        for tid, first in record["first"].items():
            record["last"][tid] = dict(record["last"].get(tid, first), cpu_s=first["cpu_s"])
    case = tmp_path / "recorded"
    case.mkdir()
    for path in (RECORDED / CASE).glob(f"{NAME}.*"):
        (case / path.name).write_text(path.read_text())
    (case / f"{NAME}.procfs.json").write_text(json.dumps(procfs))
    report = replay(str(case), NAME, tmp_path)
    assert report.verdict.primary != "backend_saturated", report.verdict
    found = report.finding("backend_saturated")
    assert found is not None and found.score < 25


def test_a_backends_command_line_is_named_without_its_secrets() -> None:
    from diagnose.checks.backend_saturated import _who

    server = ServerProcess(7, ("/opt/venv/bin/python", "/srv/backend.py", "--api-key=sk-live-SECRET123",
                               "--password", "hunter2"), ("tcp 127.0.0.1:9000",), 4.0, 0.98, 2.0, 4, 1,
                           "scorer", 0.98, 0.99, 0.0, "", 0.0)
    said = _who((server,))
    assert "SECRET123" not in said and "hunter2" not in said
    assert said.startswith("pid 7 `python backend.py")


def test_a_lock_whose_holder_waits_on_a_backend_at_capacity_names_the_backend_as_the_lever(tmp_path: Path) -> None:
    """A recorded attach of the front end with one lock across each backend call
    (fixtures/recorded/lock_across_saturated_backend, remote_backend.py --lock-around-call):
    before, the verdict said "move SocketIO.readinto out of the lock" and predicted 1.57x, while
    the backend it waits on already served at its capacity. The chain goes on: lock -> holder
    -> socket -> the backend, whose capacity is the lever; the call out of the lock alone is
    bounded by the backend's headroom."""
    report = replay("lock_across_saturated_backend", NAME, tmp_path)
    assert report.verdict.primary == "lock_contention"
    found = next(f for f in report.findings if f.id == "lock_contention")
    assert found.evidence.get("fix") == {"knob": "backend_processes", "value": 2}
    assert found.advice[0].startswith("The lock's holder waits on the socket to 127.0.0.1:")
    assert "Run more of the backend" in found.advice[0]
    assert "the call taken out of the lock alone: about 1." in (found.gain_basis or "")


def test_a_backend_starved_of_cores_but_runnable_all_window_is_at_capacity_behind_a_lock() -> None:
    """A CI run beside other tests read the lock-around-call front end's backend at 0.27 cores
    running and 0.53 more runnable: busy 80% of the window, where backend_saturated starts to
    score. Behind the lock it is the chain's end (its capacity the lever), not a sidecar behind
    a pipe; a backend with room is not."""
    from types import SimpleNamespace

    from diagnose.checks.lock_contention import _saturated_backend
    from diagnose.model.kernel_waits import Blocking, ServingPeer, WaitObject
    from diagnose.vocab import ResourceKind

    def backend(busy: float) -> ServerProcess:
        return ServerProcess(7, ("python", "backend.py"), ("tcp 127.0.0.1:9000",), 4.0, 0.27, 2.0, 17, 0,
                             "scorer", 0.27, busy, 0.0, "", 0.0)

    socket_to = WaitObject(ResourceKind.SOCKET, "socket:127.0.0.1:9000", "socket to 127.0.0.1:9000",
                           Blocking.OUTSIDE, "recvfrom", holders=(7,))
    peer = ServingPeer(socket_to, 0.72)
    starved = SimpleNamespace(servers={7: backend(0.80)})
    assert _saturated_backend(starved, peer) is starved.servers[7]  # type: ignore[arg-type]
    roomy = SimpleNamespace(servers={7: backend(0.30)})
    assert _saturated_backend(roomy, peer) is None  # type: ignore[arg-type]
