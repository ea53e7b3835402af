"""`attach --follow-peers` finds, before the window, the local processes the service's
connections lead to (collect/peers.py), and the /proc record keeps which roots were followed
(a peer is not one of the service's workers). A real listener in a child process and a real
connection from this one; no ptrace."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from diagnose.collect.peers import connected_peers
from diagnose.collect.procfs import TreeRecord

LISTENER = """
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
conn, _ = s.accept()
sys.stdin.read()
"""


def test_the_process_listening_where_a_connection_leads_is_its_peer() -> None:
    child = subprocess.Popen([sys.executable, "-c", LISTENER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        with socket.create_connection(("127.0.0.1", port)):
            peers = connected_peers([os.getpid()])
            assert [(p.pid, p.address, p.python) for p in peers] == [
                (child.pid, f"tcp 127.0.0.1:{port}", True)]
            # the child's accepted end leads back to a client, never to a server
            assert connected_peers([child.pid]) == []
    finally:
        child.kill()
        child.wait(5)


def test_a_process_with_no_connections_has_no_peers() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert connected_peers([child.pid]) == []
    finally:
        child.kill()
        child.wait(5)


def test_the_followed_roots_survive_the_recordings_round_trip() -> None:
    tree = TreeRecord(roots=[10, 20], followed=[20])
    assert TreeRecord.from_dict(tree.to_dict()).followed == [20]
    assert TreeRecord.from_dict(TreeRecord(roots=[10]).to_dict()).followed == []


def test_a_followed_backend_is_a_peer_and_its_own_hot_function_joins_the_verdict(tmp_path) -> None:
    """A live `attach --follow-peers` of fixtures/workloads/remote_backend.py
    (fixtures/recorded/backend_followed_peer): the front end and the feature backend it waits on,
    each with its stacks."""
    from tests.replay import replay

    report = replay("backend_followed_peer", "front_end_and_backend", tmp_path)
    roles = sorted(str(p.role) for p in report.processes)
    assert roles == ["peer", "worker"], roles
    assert report.verdict.primary == "backend_saturated", report.verdict
    found = next(f for f in report.findings if f.id == "backend_saturated")
    peer = next(p.pid for p in report.processes if p.role == "peer")
    assert found.evidence.get("backend_sampled_pid") == peer
    assert any(s.function == "score_features" for s in found.sites), found.sites
    assert "score_features" in found.advice[1]
    # the backend's own busy thread is no worker's: the service's findings are the front end's
    assert "in 1 of 2 worker processes" not in found.summary


def test_the_graph_follows_the_socket_into_the_followed_backends_busy_thread(tmp_path) -> None:
    """Three hops in the wait graph: the front end's threads -> the socket -> the backend's
    request thread (labelled where it ran, score_features) -> its GIL; not the backend's idle
    main thread, whose group the graph met first."""
    from tests.replay import replay

    report = replay("backend_followed_peer", "front_end_and_backend", tmp_path)
    graph = report.wait_graph
    assert graph is not None and graph.bottleneck
    served = [e.target for e in graph.edges if e.source == graph.bottleneck and e.kind == "served_by"]
    node = next(n for n in graph.nodes if n.id == served[0])
    assert node.label.startswith("peer ") and "request thread" in node.label, node
    assert node.site.startswith("score_features feature_backend.py:"), node
    assert any(e.source == node.id and e.kind == "waits_for" for e in graph.edges)


def test_a_backends_own_finding_at_the_info_line_joins_the_chain_by_its_interval() -> None:
    """CI's live attach of the followed backend read its cpu_bound under 25 where the replay
    read 29 (0-60): a point score at the threshold dropped the chain's last hop. A finding whose
    interval reaches the info line joins; one that shows nothing even at its high end does not."""
    from diagnose.checks.engine import CheckResults
    from diagnose.checks.service_verdict import _with_peer_verdict
    from diagnose.report.model.findings import EvidenceValues, Finding, Site, Verdict

    service = Finding(id="backend_saturated", title="Requests wait on a backend", score=100,
                      summary="16 threads waited", advice=("Run more of it.",),
                      evidence=EvidenceValues.of({"backend_sampled_pid": 7}))

    def peer_with(score: int, interval: tuple[int, int]) -> dict:
        own = Finding(id="cpu_bound", title="Busy threads", score=score, score_interval=interval,
                      summary="busy 92%", advice=("Vectorise score_features.",),
                      sites=(Site("score_features", "feature_backend.py", 40, 0.9),))
        idle = Finding(id="underloaded", title="Waiting for work", score=73, summary="idle")
        return {7: CheckResults((idle, own), (), Verdict(primary="underloaded"))}

    joined = _with_peer_verdict(service, peer_with(20, (0, 50)))
    assert [s.function for s in joined.sites] == ["score_features"], joined.sites
    assert "score_features" in joined.advice[1]
    assert _with_peer_verdict(service, peer_with(5, (0, 20))) == service
