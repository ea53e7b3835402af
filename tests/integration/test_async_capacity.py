"""Requests of a FastAPI `def` endpoint queued for AnyIO's worker threads (the default
CapacityLimiter, set to 4 tokens) while every thread blocks on a slow backend, under real
uvicorn and real load: `async_wait` names the capacity limiter, its tokens and the requests
waiting, and its holders' blocking call (`load_user` in `sock.recv`, a call outside the
process). Stack sampling alone calls it `underloaded`: the waiting tasks run no application code
and are on no thread's stack. Decisions only, never throughput."""

from __future__ import annotations

import importlib

import pytest

from tests.conftest import REPO, marker_line
from tests.integration.conftest import requires_ptrace
from tests.integration.servers import free_port, load_during, start_server, uvicorn_app
from tests.integration.typed import evidence, run_report


def _reader_available() -> bool:
    try:
        importlib.import_module("diagnose.collect.asyncio_tasks")
    except ImportError:
        return False
    return True


pytestmark = [pytest.mark.integration, requires_ptrace,
              pytest.mark.skipif(not _reader_available(), reason="needs the asyncio task reader")]

APP = REPO / "fixtures" / "servers" / "asgi_capacity.py"
SAMPLE_SECONDS = "4"
LOAD_SECONDS = 16  # the bound; the load stops when the attach returns
CONNECTIONS = 40
TOKENS = 4


def test_requests_queued_for_worker_threads_are_async_wait_on_the_capacity_limiter(out_dir):
    port = free_port()
    with start_server(uvicorn_app("asgi_capacity", port), port,
                      env={"DIAGNOSE_FIXTURE_CAPACITY": str(TOKENS)}, loaded_marker=None) as server:
        with load_during(server.url("/predict"), seconds=LOAD_SECONDS, connections=CONNECTIONS):
            proc, report = run_report("attach", server.pid, "--duration", SAMPLE_SECONDS, "--json",
                                   "--output-dir", out_dir)
    assert proc.returncode == 0, proc.stderr
    verdict = report.verdict
    assert verdict.primary == "async_wait", verdict
    found = next(f for f in report.findings if f.id == "async_wait")
    assert found.severity == "critical", found.summary
    ev = found.evidence
    # The capacity limiter, its tokens, and most requests waiting for one of them.
    assert evidence(found, "primitive") == "a capacity limiter" and evidence(found, "permits") == TOKENS, ev
    assert evidence(found, "tasks_waiting_avg") > CONNECTIONS / 2, ev
    assert "CapacityLimiter" in found.summary and f"one of {TOKENS} worker threads" in found.summary
    assert found.sites[0].file.endswith("anyio/_backends/_asyncio.py"), found.sites
    # Its holders: the AnyIO worker threads, blocked in the backend call.
    assert evidence(found, "holders_in").startswith("load_user"), ev
    assert evidence(found, "holders_state") == "a call outside the process", ev
    holder = found.sites[1]
    assert (holder.function, holder.line) == ("load_user", marker_line(APP, "backend-recv"))
    assert f"all {TOKENS} are in load_user" in found.summary
    # The first advice: more tokens (about the requests that reach the limiter) or async def.
    assert found.fixes[0].knob == "anyio.to_thread.current_default_thread_limiter().total_tokens"
    assert found.fixes[0].value > TOKENS
    assert "async def" in verdict.first_advice[0] and "total_tokens" in verdict.first_advice[0]
    # The figure is capped by the cores the machine leaves idle, which a neighbour takes: what
    # is asserted is the basis and the cap's being said, not the machine's idle cores.
    assert "Little's law" in found.gain_basis
    assert found.predicted_gain > 1 or "the cores the process could use allow 1.00x" in found.gain_basis
    (tasks,) = report.tasks
    top = tasks.sites[0]
    assert (top.kind, top.capacity) == ("capacity", TOKENS), top
    # The wait-for graph: the request tasks wait for the capacity, held by the worker threads,
    # which the kernel saw waiting on a socket to the backend.
    graph = report.wait_graph
    capacity = next(n for n in graph.nodes if n.id == graph.bottleneck)
    assert capacity.resource == "capacity", capacity
    kinds = {n.id: n.kind for n in graph.nodes}
    assert any(e.target == capacity.id and kinds[e.source] == "tasks" for e in graph.edges)
    holders = [e.target for e in graph.edges if e.source == capacity.id and e.kind == "held_by"]
    assert holders and all(kinds[h] == "threads" for h in holders), graph.edges
    assert "socket to 127.0.0.1" in graph.summary, graph.summary
    print(verdict.headline)
    print(verdict.first_advice[0])
