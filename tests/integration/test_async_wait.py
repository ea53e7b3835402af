"""Requests parked on an asyncio primitive in real servers (uvicorn/FastAPI, aiohttp) under real
load, attached with the real reader of asyncio tasks: `async_wait` names the await site, the
primitive and its permits; a downstream await is `underloaded`, named by its site.

Skipped until the reader (diagnose.collect.asyncio_tasks) exists: stack sampling alone cannot
see a suspended coroutine, so these verdicts rest on it."""

from __future__ import annotations

import importlib
import sys

import pytest

from diagnose.report.model import Report, TaskAwaitSite
from tests.conftest import REPO, marker_line
from tests.integration.conftest import requires_ptrace
from tests.integration.servers import free_port, load_during, start_server, uvicorn_app
from tests.integration.typed import evidence, finding, run_report


def _reader_available() -> bool:
    try:
        importlib.import_module("diagnose.collect.asyncio_tasks")
    except ImportError:
        return False
    return True


pytestmark = [pytest.mark.integration, requires_ptrace,
              pytest.mark.skipif(not _reader_available(), reason="needs the asyncio task reader")]

SERVERS = REPO / "fixtures" / "servers"
APP = SERVERS / "asgi_async_wait.py"
SAMPLE_SECONDS = "4"  # as the version matrix of the semaphore servers
LOAD_SECONDS = 16
CONNECTIONS = 32


def attach_under_load(server, out_dir, connections=CONNECTIONS) -> Report:
    with load_during(server.url("/predict"), seconds=LOAD_SECONDS, connections=connections):
        proc, report = run_report("attach", server.pid, "--duration", SAMPLE_SECONDS, "--json",
                               "--output-dir", out_dir)
    assert proc.returncode == 0 and report is not None, proc.stderr
    return report


def top_local_site(report: Report) -> TaskAwaitSite:
    sites = [s for t in report.tasks for s in t.sites if s.local]
    assert sites, report.tasks
    return max(sites, key=lambda s: s.share)


# mode -> (marker of the await site, kind the reader names, the finding's primitive words)
MODES = {
    "semaphore": ("semaphore-wait", "semaphore", "asyncio.Semaphore"),
    "lock": ("lock-wait", "lock", "asyncio.Lock"),
    "queue": ("queue-put", "queue_put", "asyncio.Queue put"),
    "batcher": ("batch-result", "future", "a future another task resolves"),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_fastapi_requests_parked_on_an_asyncio_primitive_are_async_wait_at_its_site(out_dir, mode):
    marker, kind, words = MODES[mode]
    port = free_port()
    env = {"DIAGNOSE_FIXTURE_WAIT": mode, "DIAGNOSE_FIXTURE_PERMITS": "2"}
    with start_server(uvicorn_app("asgi_async_wait", port), port, env=env,
                      loaded_marker=None) as server:
        report = attach_under_load(server, out_dir)
    assert report.verdict.primary == "async_wait", report.verdict
    found = finding(report, "async_wait")
    assert found.severity == "critical"
    line = marker_line(APP, marker)
    assert (found.sites[0].file.endswith("asgi_async_wait.py"), found.sites[0].line) == (True, line)
    assert evidence(found, "primitive") == words
    # Up to 2 requests are served at once; the other ~30 wait (fewer in the batcher's and the
    # queue's futures, which hold a few beside the consumers).
    assert evidence(found, "tasks_waiting_avg") > 10
    # Little's law on the measured waits, capped by the loop's and the machine's spare cores.
    assert found.predicted_gain >= 1 and "Little's law" in found.gain_basis
    site = top_local_site(report)
    assert (site.kind, site.line) == (kind, line)
    if mode == "semaphore":
        assert evidence(found, "primitive_name") == "MODEL_SLOTS"
        assert evidence(found, "permits") == 2
        assert found.fixes[0].knob == "MODEL_SLOTS"
        assert found.fixes[0].value >= 16
    assert report.verdict.primary != "underloaded"


def test_fastapi_semaphore_on_the_stdlib_loop_is_async_wait_too(out_dir):
    port = free_port()
    with start_server(uvicorn_app("asgi_async_wait", port, loop="asyncio"), port,
                      env={"DIAGNOSE_FIXTURE_PERMITS": "2"}, loaded_marker=None) as server:
        report = attach_under_load(server, out_dir)
    assert report.verdict.primary == "async_wait", report.verdict
    assert finding(report, "async_wait").sites[0].line == marker_line(APP, "semaphore-wait")


def test_enough_permits_leave_no_async_wait(out_dir):
    port = free_port()
    with start_server(uvicorn_app("asgi_async_wait", port), port,
                      env={"DIAGNOSE_FIXTURE_PERMITS": str(2 * CONNECTIONS)},
                      loaded_marker=None) as server:
        report = attach_under_load(server, out_dir)
    found = report.finding("async_wait")
    # On failure: why the check did not run, and what the task reader recorded.
    why = (report.not_applicable, [(t.pid, t.snapshots, t.reads, t.failed_reads, t.unreadable,
                                    t.notes) for t in report.tasks])
    assert found is not None and found.severity in ("ok", "info"), (found, why)
    assert report.verdict.primary != "async_wait"


def test_aiohttp_requests_parked_on_a_semaphore_are_async_wait(out_dir):
    port = free_port()
    argv = [sys.executable, "aiohttp_semaphore.py", "--port", str(port)]
    with start_server(argv, port, env={"DIAGNOSE_FIXTURE_PERMITS": "2"}, workers=None,
                      loaded_marker=None) as server:
        report = attach_under_load(server, out_dir)
    assert report.verdict.primary == "async_wait", report.verdict
    found = finding(report, "async_wait")
    assert found.sites[0].line == marker_line(SERVERS / "aiohttp_semaphore.py", "semaphore-wait")
    assert evidence(found, "primitive_name") == "MODEL_SLOTS"
    assert evidence(found, "permits") == 2


def test_requests_awaiting_a_downstream_call_are_underloaded_named_by_the_await_site(out_dir):
    port = free_port()
    with start_server(uvicorn_app("asgi_blocking", port), port,
                      env={"DIAGNOSE_FIXTURE_OFFLOAD": "async"}) as server:
        report = attach_under_load(server, out_dir, connections=16)
    # Awaiting a call outside the process is no local limit, whatever else this load shows.
    assert report.verdict.primary != "async_wait", report.verdict
    under = finding(report, "underloaded")
    line = marker_line(SERVERS / "asgi_blocking.py", "async-call")
    assert (under.sites[0].function, under.sites[0].line) == ("fetch_features_async", line)
    assert "fetch_features_async" in evidence(under, "downstream_await")
    assert "waiting for work" not in under.summary
    assert finding(report, "async_wait").severity == "ok"
