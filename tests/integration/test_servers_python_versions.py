"""Real servers on every CPython version py-spy supports that this machine has.

For each interpreter, a cached venv with numpy, gunicorn, uvicorn and FastAPI
(`pythons.venv_with_servers`; pip picks the newest releases that support that CPython) runs the
server fixtures; the CLI runs on the default interpreter and attaches the real py-spy at the pid
a user sees first. The oldest and the newest interpreter run both servers (a gunicorn tree and a
uvicorn event loop); every version between runs one of them, in turn (`on_versions`). A version
is skipped with the reason when py-spy does not support it or no release of the server packages
installs on it. The running interpreter's own version is covered by test_real_servers.py.
"""

from __future__ import annotations

import sys

import pytest

from diagnose.report.model import Report
from tests.conftest import REPO, marker_line
from tests.integration import pythons
from tests.integration.conftest import requires_ptrace
from tests.integration.servers import free_port, gunicorn_sync, load_during, start_server, uvicorn_app
from tests.integration.test_python_versions import INTERPRETERS, summary
from tests.integration.typed import evidence, run_report

pytestmark = [pytest.mark.integration, requires_ptrace]

DURATION = "4"
SERVERS = REPO / "fixtures" / "servers"


def server_python(interp: pythons.Interpreter) -> str:
    supported, why = pythons.py_spy_supports(interp.version)
    if not supported:
        pytest.skip(f"CPython {interp.version}: py-spy does not support it ({why})")
    if interp.version_info[:2] == sys.version_info[:2]:
        pytest.skip(f"CPython {interp.version} is the running interpreter: test_real_servers.py")
    python, reason = pythons.venv_with_servers(interp.minor_version)
    if python is None:
        pytest.skip(f"CPython {interp.version}: {reason}")
    return python


def on_versions(server: int) -> list:
    """The interpreters server `server` (0: gunicorn, 1: uvicorn) runs on: the oldest and the
    newest, and every other version between, alternating with the other server. The running
    interpreter is test_real_servers.py's."""
    others = [i for i in INTERPRETERS if i.version_info[:2] != sys.version_info[:2]]
    last = len(others) - 1
    return [pytest.param(interp, id=interp.version) for i, interp in enumerate(others)
            if i in (0, last) or i % 2 == server]


def diagnose_server(argv, port, out_dir) -> Report:
    with start_server(argv, port) as server:
        with load_during(server.url("/predict"), seconds=12, connections=8):
            proc, report = run_report("attach", server.pid, "--duration", DURATION, "--json",
                                   "--output-dir", out_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return report


@pytest.mark.parametrize("interp", on_versions(0))
def test_gunicorn_master_gives_preprocess_bound_on_every_python(interp, out_dir):
    python = server_python(interp)
    port = free_port()
    report = diagnose_server(gunicorn_sync("wsgi_preprocess", port, workers=3, python=python),
                             port, out_dir)
    assert report.verdict.primary == "preprocess_bound", summary(report)
    top = next(f for f in report.findings if f.id == "preprocess_bound").sites[0]
    assert top.file.endswith("wsgi_preprocess.py"), summary(report)


@pytest.mark.parametrize("interp", on_versions(1))
def test_uvicorn_inline_endpoint_is_event_loop_blocked_on_every_python(interp, out_dir):
    python = server_python(interp)
    port = free_port()
    report = diagnose_server(uvicorn_app("asgi_inline", port, python=python), port, out_dir)
    assert report.verdict.primary == "event_loop_blocked", summary(report)
    blocked = next(f for f in report.findings if f.id == "event_loop_blocked")
    assert blocked.sites[0].function.endswith("predict"), summary(report)


# Requests parked on an asyncio semaphore inside real uvicorn/FastAPI and aiohttp servers (the
# running interpreter: test_async_wait.py): the task reader's layouts differ in each version.
SEMAPHORE_APPS = {"fastapi": "asgi_async_wait.py", "aiohttp": "aiohttp_semaphore.py"}


def semaphore_cases() -> list:
    """Both frameworks on the newest current interpreter, one of them in turn on the others
    (the running one is test_async_wait.py's; the task reader on each version also reads the
    hidden-wait matrix's asyncio workloads)."""
    current = [i for i in INTERPRETERS
               if i.version_info[:2] >= (3, 11) and i.version_info[:2] != sys.version_info[:2]]
    frameworks = sorted(SEMAPHORE_APPS)
    return [pytest.param(interp, framework, id=f"{interp.version}-{framework}")
            for k, interp in enumerate(current)
            for framework in (frameworks if k == len(current) - 1
                              else [frameworks[k % len(frameworks)]])]


@pytest.mark.parametrize("interp, framework", semaphore_cases())
def test_requests_parked_on_a_semaphore_are_async_wait_on_every_current_python(interp, framework,
                                                                               out_dir):
    python = server_python(interp)
    if framework == "aiohttp":
        python, reason = pythons.venv_with_aiohttp(interp.minor_version)
        if python is None:
            pytest.skip(f"CPython {interp.version}: {reason}")
    port = free_port()
    app = SEMAPHORE_APPS[framework]
    argv = (uvicorn_app("asgi_async_wait", port, python=python) if framework == "fastapi"
            else [python, app, "--port", str(port)])
    env = {"DIAGNOSE_FIXTURE_WAIT": "semaphore", "DIAGNOSE_FIXTURE_PERMITS": "2"}
    with start_server(argv, port, env=env, workers=None, loaded_marker=None) as server:
        with load_during(server.url("/predict"), seconds=16, connections=32):
            proc, report = run_report("attach", server.pid, "--duration", DURATION, "--json",
                                   "--output-dir", out_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report.verdict.primary == "async_wait", summary(report)
    found = next(f for f in report.findings if f.id == "async_wait")
    assert found.sites[0].line == marker_line(SERVERS / app, "semaphore-wait"), summary(report)
    assert (evidence(found, "primitive_name"), evidence(found, "permits")) == ("MODEL_SLOTS", 2)
