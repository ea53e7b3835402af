"""Requests queued on a framework's thread capacity (AnyIO's CapacityLimiter: FastAPI /
Starlette `def` endpoints): their tasks run no application code yet, since the endpoint runs in
the worker thread they wait for; they are request tasks parked on a capacity whose holders are
threads, and `async_wait` names the limiter, its tokens and where the worker threads block.
Synthetic task recordings and stack samples, in-process."""

from __future__ import annotations

import numpy as np
import pytest

from diagnose.checks.engine import run_checks
from diagnose.classify.categories import Categorizer
from diagnose.model.analysis import analysis_of, classify_profile
from diagnose.collect.task_recording import (AwaitTarget, CoroFrame, TaskRecording,
                                        TaskSnapshot, TaskState, framework_primitive)
from diagnose.vocab import AwaitKind
from diagnose.model.await_sites import summarize_tasks
from diagnose.samples.profile import Frame, Profile, ThreadTrack
from diagnose.collect.run_context import RunContext
from diagnose.report.model import Target

LIB = "/usr/lib/python3.11"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
LIBPY = "/usr/lib/libpython3.11.so.1.0"

# The part of AnyIO's asyncio backend the model reads: the `async with` that takes a token.
ANYIO_SOURCE = '''\
class AsyncIOBackend:
    @classmethod
    async def run_sync_in_worker_thread(cls, func, args, abandon_on_cancel=False, limiter=None):
        await cls.checkpoint()
        async with limiter or cls.current_default_thread_limiter():
            future = asyncio.Future()
            worker.queue.put_nowait((func, args, future))
            return await future
'''
ENTER_LINE, HOLD_LINE = 5, 8

APP_SOURCE = '''\
import socket


def load_user(user_id):
    with socket.create_connection(BACKEND) as sock:
        sock.sendall(b"GET user\\n")
        return sock.recv(4096)


def predict():
    return load_user(7)


def score():
    return sum(i * i for i in range(10**6))
'''
RECV_LINE, CALL_LINE, SCORE_LINE = 7, 11, 15


@pytest.fixture
def files(tmp_path):
    site = tmp_path / "venv/lib/python3.11/site-packages"
    anyio = site / "anyio/_backends/_asyncio.py"
    anyio.parent.mkdir(parents=True)
    anyio.write_text(ANYIO_SOURCE)
    app = tmp_path / "service.py"
    app.write_text(APP_SOURCE)
    return str(site), str(anyio), str(app)


def cycle(site: str) -> tuple[CoroFrame, ...]:
    """A FastAPI request's coroutine chain down to the hand-off to a worker thread."""
    return (CoroFrame("RequestResponseCycle.run_asgi", f"{site}/uvicorn/protocols/http/h11_impl.py", 407),
            CoroFrame("Starlette.__call__", f"{site}/starlette/applications.py", 96),
            CoroFrame("request_response.<locals>.app", f"{site}/fastapi/routing.py", 175),
            CoroFrame("get_request_handler.<locals>.app", f"{site}/fastapi/routing.py", 762),
            CoroFrame("run_endpoint_function", f"{site}/fastapi/routing.py", 383),
            CoroFrame("run_in_threadpool", f"{site}/starlette/concurrency.py", 34),
            CoroFrame("run_sync", f"{site}/anyio/to_thread.py", 65))


def waiter(site, anyio, n, kind=AwaitKind.EVENT) -> TaskState:
    """Parked in CapacityLimiter.acquire: as the reader recorded it before it knew the limiter
    (an Event of its own), or as it names it now (the limiter itself)."""
    target = (AwaitTarget(AwaitKind.EVENT, 0x9000 + n, waiters=1) if kind == AwaitKind.EVENT
              else AwaitTarget(AwaitKind.CAPACITY, 0xCAFE, detail="anyio CapacityLimiter"))
    return TaskState(0x1000 + n, f"Task-w{n}", cycle(site) + (
        CoroFrame("AsyncIOBackend.run_sync_in_worker_thread", anyio, ENTER_LINE),
        CoroFrame("CapacityLimiter.__aenter__", anyio, 2200),
        CoroFrame("CapacityLimiter.acquire", anyio, 2261),
        CoroFrame("CapacityLimiter.acquire_on_behalf_of", anyio, 2271),
        CoroFrame("Event.wait", f"{LIB}/asyncio/locks.py", 213)), target)


def holder(site, anyio, n) -> TaskState:
    """Holds a token: awaits the future its worker thread resolves."""
    return TaskState(0x2000 + n, f"Task-h{n}", cycle(site) + (
        CoroFrame("AsyncIOBackend.run_sync_in_worker_thread", anyio, HOLD_LINE),),
        AwaitTarget(AwaitKind.FUTURE, 0x7000 + n))


def lifespan(site) -> TaskState:
    return TaskState(0x3000, "Task-1", (CoroFrame("LifespanOn.main", f"{site}/uvicorn/lifespan/on.py", 86),
                                        CoroFrame("Queue.get", f"{LIB}/asyncio/queues.py", 158)),
                     AwaitTarget(AwaitKind.QUEUE_GET, 0x3100))


def capacity_recording(files, tokens=4, waiting=36, reads=20, kind=AwaitKind.EVENT) -> TaskRecording:
    site, anyio, _ = files

    def tasks(i):
        return ([lifespan(site)] + [holder(site, anyio, k) for k in range(tokens)]
                + [waiter(site, anyio, k, kind) for k in range(waiting - (i % 2))])

    snaps = tuple(TaskSnapshot(1000.0 + 0.25 * i, tuple(tasks(i))) for i in range(reads))
    return TaskRecording(4242, "3.11", snaps, reads=reads)


# -- stack samples: the loop idle in its selector, the AnyIO worker threads in the app ---------

def py(function, file, line=1):
    return Frame(function, file, line, False)


def native(function, lib):
    return Frame(function, lib, 0, True)


LOOP_IDLE = [py("run", f"{LIB}/asyncio/runners.py", 190),
             py("BaseEventLoop.run_forever", f"{LIB}/asyncio/base_events.py", 607),
             py("BaseEventLoop._run_once", f"{LIB}/asyncio/base_events.py", 1884),
             py("EpollSelector.select", f"{LIB}/selectors.py", 468),
             native("select_epoll_poll_impl", "selectmodule.c"), native("epoll_wait", LIBC)]


def worker_base(anyio):
    return [py("Thread._bootstrap", f"{LIB}/threading.py", 995),
            py("Thread._bootstrap_inner", f"{LIB}/threading.py", 1038),
            py("WorkerThread.run", anyio, 1124)]


def worker_in_recv(anyio, app):
    return worker_base(anyio) + [py("predict", app, CALL_LINE), py("load_user", app, RECV_LINE),
                                 native("sock_recv", "socketmodule.c"), native("recv", LIBC)]


def worker_computing(anyio, app):
    return worker_base(anyio) + [py("score", app, SCORE_LINE)]


def worker_idle(anyio):
    return worker_base(anyio) + [py("Queue.get", f"{LIB}/queue.py", 171),
                                 py("Condition.wait", f"{LIB}/threading.py", 327),
                                 native("PyThread_acquire_lock_timed", LIBPY),
                                 native("futex_wait", LIBC)]


def service(files, tasks: TaskRecording, worker_stack, workers=4, samples=200):
    _, anyio, app = files
    profile = Profile(native=True, interval_s=0.05)

    def track(tid, name, frames):
        sid = profile.intern_stack(tuple(profile.intern_frame(f) for f in frames))
        ids = [sid] * samples
        profile.threads.append(ThreadTrack(tid, name, np.array(ids, dtype=np.int32),
                                           np.full(len(ids), 0.05), pid=4242))

    track(4242, "MainThread", LOOP_IDLE)
    for k in range(workers):
        track(4300 + k, "AnyIO worker thread", worker_stack(anyio, app))
    stacks = classify_profile(profile, Categorizer())
    analysis = analysis_of(profile, stacks, None, RunContext(Target(pid=4242)))
    analysis.tasks = tasks
    return analysis


def finding(results, check_id):
    return next(f for f in results.findings if f.id == check_id)


# -- the tests ---------------------------------------------------------------------------------

def test_the_framework_primitive_frames_name_a_capacity_limiter():
    path = "/v/lib/python3.12/site-packages/anyio/_backends/_asyncio.py"
    assert framework_primitive("CapacityLimiter.acquire_on_behalf_of", path) == AwaitKind.CAPACITY
    assert framework_primitive("CapacityLimiter.__aenter__", path) == AwaitKind.CAPACITY
    assert framework_primitive("Semaphore.acquire", path) == AwaitKind.SEMAPHORE
    assert framework_primitive("CapacityLimiter.acquire", "/app/limits.py") is None
    assert framework_primitive("WorkerThread.run", path) is None


@pytest.mark.parametrize("kind", [AwaitKind.EVENT, AwaitKind.CAPACITY])
def test_requests_queued_for_a_thread_are_request_tasks_on_a_capacity_with_its_tokens(files, kind):
    _, anyio, _ = files
    summary = summarize_tasks(capacity_recording(files, kind=kind))
    # 4 holders and 35.5 waiters on average; the lifespan task is no request.
    assert summary.request_tasks_avg == pytest.approx(39.5)
    (site,) = summary.sites
    assert (site.kind, site.local, site.file, site.line) == (AwaitKind.CAPACITY, True, anyio, ENTER_LINE)
    assert site.waiting_avg == pytest.approx(35.5) and site.waiting_max == 36
    assert site.holders_avg == pytest.approx(4.0) and site.capacity == 4
    assert site.detail == "anyio CapacityLimiter" and site.primitives == 1
    assert summary.local_share == pytest.approx(35.5 / 39.5)
    assert summary.downstream_share == 0  # awaiting its own thread is no call outside the process


def test_without_the_frameworks_source_the_holders_are_the_tasks_past_the_acquire(tmp_path):
    site = str(tmp_path / "gone/lib/python3.11/site-packages")
    anyio = f"{site}/anyio/_backends/_asyncio.py"  # never written: unreadable
    summary = summarize_tasks(capacity_recording((site, anyio, ""), tokens=6, waiting=20))
    (found,) = summary.sites
    assert (found.kind, found.holders_avg, found.capacity) == (AwaitKind.CAPACITY, 6.0, 6)


def test_a_request_cycle_task_not_waiting_for_a_thread_is_no_request(files):
    site, anyio, _ = files
    reading_body = TaskState(0x4000, "Task-r", cycle(site)[:3] + (
        CoroFrame("RequestResponseCycle.receive", f"{site}/uvicorn/protocols/http/h11_impl.py", 530),
        CoroFrame("Event.wait", f"{LIB}/asyncio/locks.py", 213)), AwaitTarget(AwaitKind.EVENT, 0x41))
    snaps = (TaskSnapshot(1.0, (lifespan(site), reading_body, waiter(site, anyio, 0))),)
    summary = summarize_tasks(TaskRecording(1, "3.11", snaps, reads=1))
    assert summary.request_tasks_avg == 1  # the capacity's waiter only


def test_a_capacity_whose_threads_wait_outside_the_process_is_the_verdict_naming_them(files):
    _, anyio, app = files
    results = run_checks(service(files, capacity_recording(files), worker_in_recv))
    assert results.verdict.primary == "async_wait", results.verdict
    found = finding(results, "async_wait")
    assert found.severity == "critical"
    assert found.summary.startswith("on average 36 requests wait for one of 4 worker threads")
    assert "all 4 are in load_user → sock.recv (a call outside the process)" in found.summary
    assert (found.sites[0].file, found.sites[0].line) == (anyio, ENTER_LINE)
    assert (found.sites[1].function, found.sites[1].file, found.sites[1].line) == ("load_user", app, RECV_LINE)
    ev = found.evidence
    assert ev["primitive"] == "a capacity limiter" and ev["permits"] == 4
    assert ev["holder_threads"] == 4 and ev["holders_in"] == "load_user → sock.recv"
    assert ev["holders_state"] == "a call outside the process"
    # Little's law: the requests that reach the limiter (waiting + holding) are the tokens needed.
    assert ev["fix"] == {"knob": "anyio.to_thread.current_default_thread_limiter().total_tokens",
                         "value": 40}
    advice = found.advice[0]
    assert "from 4 to about 40" in advice and "async def" in advice and "Little's law" in advice
    assert found.predicted_gain > 1 and "Little's law" in found.gain_basis
    assert finding(results, "underloaded").score < 25


def test_threads_that_compute_are_not_told_to_take_more_tokens(files):
    results = run_checks(service(files, capacity_recording(files), worker_computing))
    found = finding(results, "async_wait")
    assert found.evidence["holders_in"].startswith("score")
    assert found.evidence["holders_state"] != "a call outside the process"
    assert "fix" not in found.evidence or found.evidence["fix"] is None
    assert "more tokens add threads to the same work" in found.advice[0]


def test_without_worker_thread_samples_the_advice_still_names_the_limiter(files):
    results = run_checks(service(files, capacity_recording(files), lambda anyio, app: worker_idle(anyio),
                                 workers=0))
    found = finding(results, "async_wait")
    assert "total_tokens" in found.advice[0] and found.fixes[0].value == 40


def test_a_woken_waiter_and_a_holder_whose_thread_is_done_still_hold_their_tokens(files):
    site, anyio, _ = files

    def ready(task: TaskState) -> TaskState:
        return TaskState(task.task_id, task.name, task.frames, None)

    # 4 tokens: 2 holders awaiting their threads, 1 whose thread is done, 1 waiter just woken.
    tasks = ([holder(site, anyio, k) for k in range(2)] + [ready(holder(site, anyio, 2))]
             + [ready(waiter(site, anyio, 99))] + [waiter(site, anyio, k) for k in range(10)])
    snaps = tuple(TaskSnapshot(1.0 + i, tuple(tasks)) for i in range(3))
    summary = summarize_tasks(TaskRecording(1, "3.11", snaps, reads=3))
    (found,) = summary.sites
    assert summary.request_tasks_avg == 14
    assert (found.waiting_avg, found.holders_avg, found.capacity) == (10, 4, 4)
