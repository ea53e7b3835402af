"""Async poll loops (model/async_polls.py, checks/poll_loop.py): a request task awaiting a sleep
inside a `while` loop of its own coroutine polls for a result another task or thread produces.
Not a poll: a periodic task's own pacing loop at its outermost coroutine, a sleep(0) yield, an
awaited sleep in a `for` loop or on its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnose.collect.task_recording import AwaitTarget, CoroFrame, TaskRecording, TaskSnapshot, TaskState
from diagnose.model.async_polls import async_polls
from diagnose.model.poll_loops import _sleeps_in_while_loops, awaited_sleeps_in_while_loops
from diagnose.samples import source
from diagnose.vocab import AwaitKind
from tests.conftest import WORKLOADS, marker_line
from tests.replay import replay

LIB = "/usr/lib/python3.11"

SERVICE = '''\
import asyncio, anyio, trio

async def wait_polling(results, key):
    while key not in results:
        await asyncio.sleep(0.02)  # polls
    return results.pop(key)

async def wait_anyio(done):
    while not done.is_set():
        await anyio.sleep(0.01)  # anyio polls
    while True:  # trio's loop
        if done.is_set():
            break
        await trio.sleep(
            0.01)  # trio polls, over two lines

async def housekeeping(stats):
    while True:
        stats.flush()
        await asyncio.sleep(1)  # a periodic task's pacing

async def handle_connection(reader, jobs, results):
    while True:
        line = await reader.readline()
        key = jobs.submit(line)
        while key not in results:  # each request's poll
            await asyncio.sleep(0.02)  # a connection's request polls

async def crunch(chunks):
    while chunks:
        chunks.pop().run()
        await asyncio.sleep(0)  # a yield to the loop

async def remote_call():
    await asyncio.sleep(0.005)  # a simulated call: no loop

async def retry(call):
    for attempt in range(3):
        await asyncio.sleep(2 ** attempt)  # backoff: a for loop

async def nested(pool):
    while not pool.ready():
        async def later():
            await asyncio.sleep(1)  # a nested def's body runs elsewhere
        pool.submit(later)
'''


@pytest.fixture
def service(tmp_path: Path) -> str:
    path = tmp_path / "service.py"
    path.write_text(SERVICE)
    source.clear()
    return str(path)


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(SERVICE.splitlines(), 1) if text in line)


def test_an_awaited_sleep_inside_a_while_loop_maps_to_its_loop(service):
    found = awaited_sleeps_in_while_loops(service)
    assert found[line_of("# polls")].loop_line == line_of("while key not in results")
    assert found[line_of("# anyio polls")].loop_line == line_of("while not done.is_set()")
    # a suspended coroutine's line may be any of its await's lines
    for text in ("await trio.sleep(", "# trio polls"):
        assert found[line_of(text)].loop_line == line_of("# trio's loop"), text
    assert not found[line_of("# polls")].nested


def test_a_poll_inside_a_connections_loop_is_nested_and_a_pacing_loop_is_not(service):
    found = awaited_sleeps_in_while_loops(service)
    assert found[line_of("# a connection's request polls")].nested
    assert found[line_of("# a connection's request polls")].loop_line == line_of("# each request's poll")
    pacing = found[line_of("# a periodic task's pacing")]
    assert not pacing.nested  # the task-level rule (async_polls) tells it from a poll


def test_a_yield_a_lone_await_a_for_loops_backoff_and_a_nested_def_are_no_async_polls(service):
    found = awaited_sleeps_in_while_loops(service)
    for text in ("# a yield to the loop", "# a simulated call", "# backoff", "# a nested def"):
        assert line_of(text) not in found, text


def test_awaited_sleeps_are_no_thread_polls(service):
    assert not set(_sleeps_in_while_loops(service)) & set(awaited_sleeps_in_while_loops(service))


# -- the tasks: which request tasks stand in a poll -------------------------------------------


def coro(function: str, file: str, line: int) -> CoroFrame:
    return CoroFrame(function, file, line)


def sleeping(task_id: int, name: str, *frames: CoroFrame) -> TaskState:
    return TaskState(task_id, name, (*frames, coro("sleep", f"{LIB}/asyncio/tasks.py", 649)),
                     AwaitTarget(AwaitKind.SLEEP, identity=task_id + 1))


def recording(service: str, reads: int = 4) -> TaskRecording:
    """Four request tasks polling in `wait_polling` under their client loop, a housekeeping
    task between rounds, the main coroutine awaiting them all (every read)."""
    poll = coro("wait_polling", service, line_of("# polls"))
    snaps = []
    for i in range(reads):
        tasks = [sleeping(100 + 10 * k, f"request-{k}", coro("client", service, 60), poll) for k in range(4)]
        tasks.append(sleeping(900, "housekeeping", coro("housekeeping", service,
                                                         line_of("# a periodic task's pacing"))))
        tasks.append(TaskState(1, "Task-1", (coro("main", service, 70),),
                               AwaitTarget(AwaitKind.UNKNOWN, identity=5, detail="_GatheringFuture")))
        snaps.append(TaskSnapshot(float(i), tuple(tasks)))
    return TaskRecording(pid=1, python="3.11", snapshots=tuple(snaps), reads=reads)


def test_request_tasks_awaiting_a_sleep_in_a_while_loop_poll_all_their_time(service):
    found = async_polls(recording(service))
    assert [(p.function, p.line, p.loop_line) for p in found.loops] == [
        ("wait_polling", line_of("# polls"), line_of("while key not in results"))]
    top = found.loops[0]
    # the housekeeping task and the main coroutine, parked all window at one line of their
    # outermost coroutine, are no requests in flight
    assert found.share == pytest.approx(1.0) and found.request_tasks_avg == pytest.approx(4.0)
    assert top.tasks == 4 and top.waiting_avg == pytest.approx(4.0) and top.waiting_max == 4


def test_a_periodic_tasks_own_pacing_loop_is_no_poll(service):
    pacing = line_of("# a periodic task's pacing")
    snaps = tuple(TaskSnapshot(float(i), (sleeping(900, "housekeeping", coro("housekeeping", service, pacing)),
                                          sleeping(100 + i, "request", coro("remote_call", service,
                                                                            line_of("# a simulated call")))))
                  for i in range(3))
    found = async_polls(TaskRecording(pid=1, python="3.11", snapshots=snaps, reads=3))
    assert not found.loops and found.share == 0.0


def test_a_connection_handler_polling_inside_its_own_loop_polls(service):
    # the connection's coroutine is the task's outermost, but the poll is inside its loop of
    # requests: each request polls for its result
    line = line_of("# a connection's request polls")
    snaps = tuple(TaskSnapshot(float(i), (sleeping(500, "conn", coro("handle_connection", service, line)),))
                  for i in range(3))
    found = async_polls(TaskRecording(pid=1, python="3.11", snapshots=snaps, reads=3))
    assert [p.line for p in found.loops] == [line] and found.share == pytest.approx(1.0)


def test_no_recording_or_no_reads_is_no_poll():
    assert async_polls(None).loops == ()
    assert async_polls(TaskRecording(pid=1, python="3.11")).share == 0.0


# -- a recorded attach --------------------------------------------------------------------------


def test_a_recorded_asyncio_poll_for_its_result_is_the_verdict_not_waiting_for_work(tmp_path):
    # fixtures/workloads/async_poll_for_result.py at its defaults: 8 request tasks awaiting
    # asyncio.sleep(0.02) between looks at the results a model thread fills, and a housekeeping
    # task pacing itself with asyncio.sleep(0.5); before the tasks' polls were read it was
    # "underloaded: requests waited 90% of their time on calls outside the process, most at
    # wait_polling `asyncio.sleep`"
    report = replay("poll", "async_poll_for_result", tmp_path)
    assert report.verdict.primary == "poll_loop", report.verdict
    found = next(f for f in report.findings if f.id == "poll_loop")
    line = marker_line(WORKLOADS / "async_poll_for_result.py", "poll-sleep")
    assert [(s.function, s.line) for s in found.sites] == [("wait_polling", line)]
    evidence = {e.key: e.value for e in found.evidence.entries}
    assert evidence["pollers"] == "request tasks" and evidence["poll_tasks_avg"] == pytest.approx(8.0)
    assert found.score >= 75 and found.predicted_gain is not None and found.predicted_gain > 2
    advice = report.verdict.first_advice[0]
    assert advice.startswith("Stop polling at wait_polling") and "asyncio.Future" in advice
    underloaded = next(f for f in report.findings if f.id == "underloaded")
    assert underloaded.score < 25, underloaded.summary
    assert "wait_polling" not in underloaded.summary
