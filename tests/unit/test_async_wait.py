"""async_wait: requests parked on an in-process asyncio primitive, read from synthetic task
recordings (collect/task_recording.py) beside a loop thread idle in its selector; `underloaded` names
the downstream await site instead when requests await calls outside the process."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from diagnose.checks.engine import run_checks
from diagnose.classify.categories import Categorizer
from diagnose.model.analysis import analysis_of, classify_profile
from diagnose.collect.task_recording import (AwaitTarget, CoroFrame, TaskRecording,
                                        TaskSnapshot, TaskState)
from diagnose.vocab import AwaitKind
from diagnose.model.await_sites import primitive_name, summarize_tasks
from diagnose.samples.profile import Frame, Profile, ThreadTrack
from diagnose.collect.run_context import RunContext
from diagnose.report.model import Target
from diagnose.model.service import ProcessView, Service
from diagnose.run.build_report import build_report
from diagnose.report.model import Report
from diagnose.report.model.codec import decode, encode
from tests.conftest import report_of

LIB = "/usr/lib/python3.11"
SITE = "/srv/venv/lib/python3.11/site-packages"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"

APP_SOURCE = '''\
import asyncio

MODEL_SLOTS = asyncio.Semaphore(2)


async def predict(request):
    async with MODEL_SLOTS:
        await asyncio.sleep(0.02)
    return {"ok": True}


async def lookup(client, url):
    response = await client.get(url)
    return response


class Batcher:
    async def submit(self, item):
        fut = asyncio.get_running_loop().create_future()
        await self.queue.put((item, fut))
        return await fut
'''
SEM_LINE, BODY_LINE, GET_LINE, PUT_LINE, FUT_LINE = 7, 8, 13, 20, 21


@pytest.fixture
def app(tmp_path):
    path = tmp_path / "service.py"
    path.write_text(APP_SOURCE)
    return str(path)


def py(function, file, line=1):
    return Frame(function, file, line, False)


def native(function, lib):
    return Frame(function, lib, 0, True)


LOOP_IDLE = [py("run", f"{LIB}/asyncio/runners.py", 190),
             py("BaseEventLoop.run_forever", f"{LIB}/asyncio/base_events.py", 607),
             py("BaseEventLoop._run_once", f"{LIB}/asyncio/base_events.py", 1884),
             py("EpollSelector.select", f"{LIB}/selectors.py", 468),
             native("select_epoll_poll_impl", "selectmodule.c"), native("epoll_wait", LIBC)]
LOOP_FRAMEWORK = [py("run", f"{LIB}/asyncio/runners.py", 190),
                  py("BaseEventLoop.run_forever", f"{LIB}/asyncio/base_events.py", 607),
                  py("BaseEventLoop._run_once", f"{LIB}/asyncio/base_events.py", 1900),
                  py("Handle._run", f"{LIB}/asyncio/events.py", 84),
                  py("H11Protocol.data_received", f"{SITE}/uvicorn/protocols/http/h11_impl.py", 200)]


def loop_analysis(tasks: TaskRecording | None, idle=190, busy=10):
    """One process: its loop thread idle in the selector `idle` samples of `idle + busy`."""
    profile = Profile(native=True, interval_s=0.05)
    ids = []
    for frames, count in ((LOOP_IDLE, idle), (LOOP_FRAMEWORK, busy)):
        sid = profile.intern_stack(tuple(profile.intern_frame(f) for f in frames))
        ids += [sid] * count
    profile.threads.append(ThreadTrack(4242, "MainThread", np.array(ids, dtype=np.int32),
                                       np.full(len(ids), 0.05), pid=4242))
    stacks = classify_profile(profile, Categorizer())
    analysis = analysis_of(profile, stacks, None, RunContext(Target(pid=4242)))
    analysis.tasks = tasks
    return analysis


SERVER = (CoroFrame("RequestResponseCycle.run_asgi", f"{SITE}/uvicorn/protocols/http/h11_impl.py", 403),
          CoroFrame("FastAPI.__call__", f"{SITE}/fastapi/applications.py", 1054),
          CoroFrame("run_endpoint_function", f"{SITE}/fastapi/routing.py", 212))


def waiting_on_semaphore(app, n, identity=0xA0):
    return TaskState(0x1000 + n, f"Task-{n}",
                     SERVER + (CoroFrame("predict", app, SEM_LINE),
                               CoroFrame("Semaphore.__aenter__", f"{LIB}/asyncio/locks.py", 15),
                               CoroFrame("Semaphore.acquire", f"{LIB}/asyncio/locks.py", 387)),
                     AwaitTarget(AwaitKind.SEMAPHORE, identity, permits=0, waiters=30))


def holding_the_semaphore(app, n):
    return TaskState(0x2000 + n, f"Task-h{n}",
                     SERVER + (CoroFrame("predict", app, BODY_LINE),
                               CoroFrame("sleep", f"{LIB}/asyncio/tasks.py", 649)),
                     AwaitTarget(AwaitKind.SLEEP, 0, detail="0.02"))


def lifespan_task():
    """The server's own long-lived task: no application code."""
    return TaskState(0x3000, "Task-1",
                     (CoroFrame("LifespanOn.main", f"{SITE}/uvicorn/lifespan/on.py", 86),
                      CoroFrame("Queue.get", f"{LIB}/asyncio/queues.py", 158)),
                     AwaitTarget(AwaitKind.QUEUE_GET, 0x3100))


def recording(tasks_per_read, reads=20, **kw):
    snaps = tuple(TaskSnapshot(1000.0 + 0.25 * i, tuple(tasks_per_read(i))) for i in range(reads))
    return TaskRecording(4242, "3.11", snaps, reads=reads, **kw)


def semaphore_recording(app, reads=20):
    return recording(lambda i: [lifespan_task()]
                     + [holding_the_semaphore(app, k) for k in range(2)]
                     + [waiting_on_semaphore(app, k) for k in range(30 - (i % 2))], reads)


def finding(results, check_id):
    return next(f for f in results.findings if f.id == check_id)


def test_requests_parked_on_a_semaphore_are_the_verdict_with_its_name_permits_and_little_gain(app):
    analysis = loop_analysis(semaphore_recording(app))
    results = run_checks(analysis)
    assert results.verdict.primary == "async_wait", results.verdict
    found = finding(results, "async_wait")
    assert found.severity == "critical"
    assert (found.sites[0].file, found.sites[0].line, found.sites[0].function) == (app, SEM_LINE, "predict")
    ev = found.evidence
    assert ev["primitive"] == "asyncio.Semaphore" and ev["primitive_name"] == "MODEL_SLOTS"
    assert ev["permits"] == 2 and found.number("permits_free") == 0
    assert ev["tasks_waiting_avg"] == pytest.approx(29.5) and ev["tasks_waiting_max"] == 30
    assert ev["tasks_holding_avg"] == pytest.approx(2.0)
    assert ev["task_reads"] == 20 and found.samples == 630  # request tasks over the reads
    # Little's law: 29.5 of 31.5 request tasks wait there; the lifespan task is no request.
    assert found.number("request_tasks_avg") == pytest.approx(31.5)
    assert found.predicted_gain == pytest.approx(31.5 / 2, rel=0.01)
    assert "estimate" in found.gain_basis and "20 reads" in found.gain_basis
    assert ev["fix"] == {"knob": "MODEL_SLOTS", "value": 32}
    assert "MODEL_SLOTS" in found.advice[0] and "from 2 to about 32" in found.advice[0]
    assert found.score_interval is not None and found.gain_interval is not None
    # The loop idles in its selector, yet the service does not wait for work.
    under = finding(results, "underloaded")
    assert under.score < 25 and under.evidence["async_wait_share"] > 0.9


def test_without_task_reads_the_check_is_not_applicable_and_the_idle_loop_is_underloaded():
    results = run_checks(loop_analysis(None))
    skipped = {n.id: n.reason for n in results.not_applicable}
    assert "live process's memory" in skipped["async_wait"] and "`attach`" in skipped["async_wait"]
    assert results.verdict.primary == "underloaded"


def test_an_unreadable_interpreter_is_the_checks_reason_not_a_finding():
    note = "asyncio tasks not readable on CPython 3.10: no layout for this version"
    results = run_checks(loop_analysis(TaskRecording(4242, "3.10", (), unreadable=note, reads=4,
                                                     failed_reads=4)))
    assert {n.id: n.reason for n in results.not_applicable}["async_wait"] == note


def downstream_task(app, n):
    """A request awaiting an HTTP client call: the future sits inside the client's frames."""
    return TaskState(0x4000 + n, f"Task-{n}",
                     SERVER + (CoroFrame("lookup", app, GET_LINE),
                               CoroFrame("AsyncClient.get", f"{SITE}/httpx/_client.py", 1041),
                               CoroFrame("StreamReader._wait_for_data", f"{LIB}/asyncio/streams.py", 543)),
                     AwaitTarget(AwaitKind.FUTURE, 0x5000 + n))


def test_requests_awaiting_a_downstream_call_are_underloaded_naming_its_await_site(app):
    analysis = loop_analysis(recording(lambda i: [downstream_task(app, k) for k in range(16)]))
    results = run_checks(analysis)
    assert results.verdict.primary == "underloaded", results.verdict
    under = finding(results, "underloaded")
    assert "lookup" in under.summary and "client.get" in under.summary
    assert "waiting for work" not in under.summary
    assert (under.sites[0].function, under.sites[0].line) == ("lookup", GET_LINE)
    assert under.evidence["downstream_await_share"] == pytest.approx(1.0)
    assert finding(results, "async_wait").score == 0


def test_a_batchers_future_awaited_by_the_request_is_a_local_wait_and_the_batcher_no_request(app):
    def tasks(i):
        out = [TaskState(0x6000 + k, f"Task-{k}",
                         SERVER + (CoroFrame("Batcher.submit", app, FUT_LINE),),
                         AwaitTarget(AwaitKind.FUTURE, 0x7000 + k)) for k in range(24)]
        # The batcher's own loop: the application's code, but no request.
        out.append(TaskState(0x6FFF, "batcher", (CoroFrame("Batcher.run", app, 20),
                                                 CoroFrame("sleep", f"{LIB}/asyncio/tasks.py", 649)),
                             AwaitTarget(AwaitKind.SLEEP)))
        return out
    summary = summarize_tasks(recording(tasks))
    assert summary.request_tasks_avg == 24
    top = summary.sites[0]
    assert (top.kind, top.local, top.name, top.primitives) == (AwaitKind.FUTURE, True, "fut", 24)
    assert top.share == pytest.approx(1.0) and summary.downstream_share == 0
    results = run_checks(loop_analysis(recording(tasks)))
    found = finding(results, "async_wait")
    assert found.evidence["primitive"] == "a future another task resolves"
    assert "batch" in found.advice[0]


def test_one_site_waiting_on_two_semaphores_is_two_groups(app):
    rec = recording(lambda i: [waiting_on_semaphore(app, k, identity=0xA0 + k % 2) for k in range(8)])
    summary = summarize_tasks(rec)
    assert [(s.line, s.waiting_avg) for s in summary.sites] == [(SEM_LINE, 4.0), (SEM_LINE, 4.0)]


def test_without_framework_frames_every_task_running_app_code_is_a_request(app):
    bare = TaskState(1, "conn", (CoroFrame("predict", app, SEM_LINE),
                                 CoroFrame("Semaphore.acquire", f"{LIB}/asyncio/locks.py", 387)),
                     AwaitTarget(AwaitKind.SEMAPHORE, 0xA0, permits=0))
    summary = summarize_tasks(recording(lambda i: [bare, lifespan_task()]))
    assert summary.request_tasks_avg == 1 and summary.local_share == 1.0
    assert "own code" in summary.request_rule


def test_the_json_report_summarises_tasks_by_await_site(app):
    analysis = loop_analysis(semaphore_recording(app))
    service = Service(analysis, [ProcessView(4242, 1, "single", ["python"], analysis)])
    results = run_checks(analysis)
    report = build_report(service, results, {4242: results})
    (tasks,) = report.tasks
    assert tasks.pid == 4242 and tasks.snapshots == 20
    site = tasks.sites[0]
    assert (site.kind, site.name, site.capacity, site.waiting_max) == ("semaphore", "MODEL_SLOTS", 2, 30)
    written = encode(tasks.sites)  # the sites as the report writes them
    assert "snapshots" not in written[0] and all("frames" not in s for s in written)
    assert Report.from_json(report.to_json()).tasks == report.tasks  # read back as written


@pytest.mark.parametrize("line, kind, name", [
    ("    async with MODEL_SLOTS:", AwaitKind.SEMAPHORE, "MODEL_SLOTS"),
    ("    async with self.limiter as slot:", AwaitKind.SEMAPHORE, "self.limiter"),
    ("    await self.queue.get()", AwaitKind.QUEUE_GET, "self.queue"),
    ("        item = await JOBS.put((x, fut))", AwaitKind.QUEUE_PUT, "JOBS"),
    ("    return await fut", AwaitKind.FUTURE, "fut"),
    ("    await asyncio.wait_for(done, timeout=1)", AwaitKind.FUTURE, "done"),
    ("    await READY.wait()", AwaitKind.EVENT, "READY"),
    ("    await LOCK.acquire()", AwaitKind.LOCK, "LOCK"),
    ("", AwaitKind.LOCK, ""),
])
def test_the_primitives_name_is_read_from_the_await_line(line, kind, name):
    assert primitive_name(line, kind) == name


def test_the_markdown_summary_has_a_line_for_the_top_await_site(app):
    from diagnose.render.markdown import render_markdown

    analysis = loop_analysis(semaphore_recording(app))
    service = Service(analysis, [ProcessView(4242, 1, "single", ["python"], analysis)])
    results = run_checks(analysis)
    report = build_report(service, results, {4242: results})
    text = render_markdown(report)
    line = next(x for x in text.splitlines() if x.startswith("**Asyncio tasks by await site:**"))
    assert "asyncio.Semaphore `MODEL_SLOTS`" in line and "`predict`" in line
    assert "29.5 tasks waiting on average (30 at most), 2 permits; 20 reads" in line
    # A name from the target stays inside its code span, on one line.
    (tasks,) = report.tasks
    hostile = replace(tasks.sites[0], name="x`|\n<img src=x onerror=alert(1)>")
    report = replace(report, tasks=(replace(tasks, sites=(hostile, *tasks.sites[1:])),))
    line = next(x for x in render_markdown(report).splitlines()
                if x.startswith("**Asyncio"))
    assert "`x'\u00a6 <img src=x onerror=alert(1)>`" in line


def test_the_predicted_gain_is_capped_by_the_cores_a_busy_machine_leaves(app):
    from diagnose.model.os_summary import ProcessOS

    analysis = loop_analysis(semaphore_recording(app))
    # The process used 0.1 of a core; the machine left 0.2 idle: at most 3x more.
    analysis.os = ProcessOS(window_s=10.0, cores=2, cpu_quota_cores=None, threads_max=1, cpu_s=1.0,
                            cpu_utilization=0.05, runqueue_wait_s=None, runqueue_ratio=None,
                            mean_runnable=0.0, involuntary_ctx_per_s=None, voluntary_ctx_per_s=None,
                            observer_stop_share=0.0, rss_start=None, rss_end=None,
                            rss_slope_bytes_per_s=None, rss_fit_r2=None, machine_idle_cores=0.2)
    found = finding(run_checks(analysis), "async_wait")
    assert found.predicted_gain == pytest.approx(3.0)
    assert "the cores the process could use allow 3.00x" in found.gain_basis


def test_keep_raw_writes_every_read_of_the_tasks_beside_the_report(app, tmp_path):
    import json

    from diagnose.run.pipeline import write_outputs

    analysis = loop_analysis(semaphore_recording(app, reads=3))
    service = Service(analysis, [ProcessView(4242, 1, "single", ["python"], analysis)])
    results = run_checks(analysis)
    out = write_outputs(service, results, {4242: results}, Categorizer(),
                        [tmp_path / "none.speedscope.json"], tmp_path / "out", "diagnose-4242",
                        None, keep_raw=True, move_profile=False)
    raw = [decode(TaskRecording, r)
           for r in json.loads((tmp_path / "out" / "diagnose-4242.tasks.json").read_text())]
    assert [r.pid for r in raw] == [4242] and len(raw[0].snapshots) == 3
    waits_on = raw[0].snapshots[0].tasks[1].waits_on
    assert waits_on is not None and waits_on.kind in ("semaphore", "sleep")
    assert report_of(out.json).tasks[0].snapshots == 3
    # Without --keep-raw the summary in the report is all that is kept.
    write_outputs(service, results, {4242: results}, Categorizer(),
                  [tmp_path / "none.speedscope.json"], tmp_path / "plain", "diagnose-4242",
                  None, keep_raw=False, move_profile=False)
    assert not (tmp_path / "plain" / "diagnose-4242.tasks.json").exists()


def test_a_read_that_raced_its_tasks_does_not_inflate_the_semaphores_capacity():
    """A read walks the tasks one by one: a task leaving the `async with` block and the one
    entering after it can both be seen inside. The capacity is the median read, not the most."""
    from diagnose.collect.task_recording import (AwaitTarget, CoroFrame, TaskRecording,
                                            TaskSnapshot, TaskState)
    from diagnose.vocab import AwaitKind
    from diagnose.model.await_sites import summarize_tasks
    from tests.conftest import REPO, marker_line
    path = REPO / "fixtures" / "workloads" / "async_semaphore.py"
    acquire, inside = marker_line(path, "slots-acquire"), marker_line(path, "model-call")
    file = str(path)

    def waiter(i: int) -> TaskState:
        return TaskState(i, f"request-{i}", (CoroFrame("client", file, 50), CoroFrame("handle", file, acquire),
                                             CoroFrame("Semaphore.acquire", "/usr/lib/python3/asyncio/locks.py", 387)),
                         AwaitTarget(AwaitKind.SEMAPHORE, identity=0xABC, permits=0, waiters=30))

    def holder(i: int) -> TaskState:
        return TaskState(i, f"request-{i}", (CoroFrame("client", file, 50), CoroFrame("handle", file, inside),
                                             CoroFrame("sleep", "/usr/lib/python3/asyncio/tasks.py", 649)),
                         AwaitTarget(AwaitKind.SLEEP))

    def read(at: float, holders: int) -> TaskSnapshot:
        return TaskSnapshot(at, tuple(holder(100 + h) for h in range(holders))
                            + tuple(waiter(i) for i in range(30)))

    reads = [read(0.25 * k, 4 if k == 3 else 2) for k in range(8)]  # one raced read
    site = summarize_tasks(TaskRecording(pid=1, python="3.12", snapshots=tuple(reads))).sites[0]
    assert site.kind == AwaitKind.SEMAPHORE and site.name == "slots"
    assert site.capacity == 2


def test_a_loop_thread_of_a_recording_without_pids_is_measured_not_an_error():
    """py-spy's speedscope of one process names no pid: the threads table's pid is missing
    (pandas NA), and the event-loop view still measures the loop, with no pid."""
    profile = Profile(native=True, interval_s=0.05)
    ids = []
    for frames, count in ((LOOP_IDLE, 150), (LOOP_FRAMEWORK, 50)):
        sid = profile.intern_stack(tuple(profile.intern_frame(f) for f in frames))
        ids += [sid] * count
    profile.threads.append(ThreadTrack(4242, "MainThread", np.array(ids, dtype=np.int32),
                                       np.full(len(ids), 0.05)))
    analysis = analysis_of(profile, classify_profile(profile, Categorizer()), None, RunContext(Target()))
    [loop] = analysis.event_loops
    assert loop.pid is None and (loop.tid, loop.thread) == (4242, "MainThread")
    assert loop.idle_share == pytest.approx(0.75, abs=0.01)


def test_a_request_awaiting_asyncio_to_thread_waits_on_the_executor_in_the_process(app):
    """asyncio.to_thread is run_in_executor on the default executor: its future is resolved by the
    process's own threads, a local wait, never a call outside the process (a live attach of
    fixtures/workloads/async_executor.py --executor to_thread read underloaded before)."""
    def to_thread(n):
        return TaskState(0x4000 + n, f"request-{n}",
                         (CoroFrame("lookup", app, GET_LINE),
                          CoroFrame("to_thread", f"{LIB}/asyncio/threads.py", 25),
                          CoroFrame("Future.__await__", f"{LIB}/asyncio/futures.py", 287)),
                         AwaitTarget(AwaitKind.FUTURE, 0x4100 + n))

    summary = summarize_tasks(recording(lambda i: [to_thread(k) for k in range(8)]))
    top = summary.sites[0]
    assert top.kind == AwaitKind.FUTURE and top.local
    assert summary.local_share == 1.0 and summary.downstream_share == 0.0
