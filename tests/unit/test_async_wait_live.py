"""Await sites of real asyncio tasks: a live event loop in this process whose tasks wait on a
semaphore, a lock, a full queue, a future and a socket read; their states are written into the
reader's types (collect/task_recording.py) from inside the process, as the reader will from outside
(the task's coroutine chain, its `_fut_waiter`, the primitive the innermost frame belongs to).
What is tested is the grouping of real asyncio frame chains, not the reading of memory."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

import pytest

from diagnose.collect.task_recording import (AwaitTarget, CoroFrame, TaskRecording,
                                        TaskSnapshot, TaskState)
from diagnose.vocab import AwaitKind
from diagnose.model.await_sites import summarize_tasks

_KINDS = {"Semaphore.acquire": AwaitKind.SEMAPHORE, "BoundedSemaphore.acquire": AwaitKind.SEMAPHORE,
          "Lock.acquire": AwaitKind.LOCK, "Condition.wait": AwaitKind.CONDITION,
          "Event.wait": AwaitKind.EVENT, "Queue.get": AwaitKind.QUEUE_GET,
          "Queue.put": AwaitKind.QUEUE_PUT, "sleep": AwaitKind.SLEEP}


def task_state(task: asyncio.Task) -> TaskState:
    frames, coro, innermost = [], task.get_coro(), None
    for _ in range(64):  # bounded, as every walk over the target's objects is
        frame = getattr(coro, "cr_frame", None)
        if frame is None:
            break
        innermost = frame
        frames.append(CoroFrame(frame.f_code.co_qualname, frame.f_code.co_filename, frame.f_lineno))
        coro = coro.cr_await
    waiter = task._fut_waiter  # type: ignore[attr-defined]
    target = None
    if waiter is not None and frames:
        kind = _KINDS.get(frames[-1].function)
        owner = innermost.f_locals.get("self") if innermost is not None else None
        if kind is None:
            kind = AwaitKind.TASK if isinstance(waiter, asyncio.Task) else AwaitKind.FUTURE
            owner = waiter
        target = AwaitTarget(kind, id(owner),
                             permits=getattr(owner, "_value", None) if kind == AwaitKind.SEMAPHORE else None,
                             waiters=len(getattr(owner, "_waiters", None) or ()) if kind != AwaitKind.FUTURE else None)
    return TaskState(id(task), task.get_name(), tuple(frames), target, task.done())


SLOTS = asyncio.Semaphore(2)
GUARD = asyncio.Lock()


async def backend():
    await asyncio.sleep(0.5)


async def with_slots():
    async with SLOTS:  # live: semaphore
        await backend()


async def with_guard():
    async with GUARD:  # live: lock
        await backend()


async def submit(jobs: asyncio.Queue):
    fut = asyncio.get_running_loop().create_future()
    await jobs.put(fut)  # live: queue-put
    return await fut  # live: future


async def fetch(reader: asyncio.StreamReader):
    return await reader.read(10)  # live: socket read


def line_of(tag: str) -> int:
    text = open(__file__, encoding="utf-8").read().splitlines()
    return next(i for i, line in enumerate(text, 1) if line.rstrip().endswith(f"# live: {tag}"))


async def scenario(reads: int) -> TaskRecording:
    jobs: asyncio.Queue = asyncio.Queue(maxsize=1)
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
    tasks = ([asyncio.create_task(with_slots()) for _ in range(6)]
             + [asyncio.create_task(with_guard()) for _ in range(4)]
             + [asyncio.create_task(submit(jobs)) for _ in range(3)]
             + [asyncio.create_task(fetch(reader)) for reader, _ in conns])
    snaps = []
    try:
        await asyncio.sleep(0.05)
        me = asyncio.current_task()
        for _ in range(reads):
            states = tuple(task_state(t) for t in asyncio.all_tasks() if t is not me)
            snaps.append(TaskSnapshot(time.time(), states))
            await asyncio.sleep(0.01)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for _, writer in conns:
            writer.close()
        server.close()
    return TaskRecording(1, "3.x", tuple(snaps), reads=reads)


@pytest.fixture(scope="module")
def summary():
    # On a thread of its own: a test run earlier in this process (a browser test's sync API) may
    # have left an event loop running on the main thread, where asyncio.run() refuses to start.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        recording = pool.submit(asyncio.run, scenario(reads=5)).result(timeout=60)
    return summarize_tasks(recording)


def sites_by_line(summary):
    return {s.line: s for s in summary.sites}


def test_real_semaphore_waiters_are_grouped_at_their_async_with_with_holders_and_permits(summary):
    site = sites_by_line(summary)[line_of("semaphore")]
    assert (site.kind, site.local, site.name, site.function) == (AwaitKind.SEMAPHORE, True, "SLOTS", "with_slots")
    assert site.waiting_avg == 4 and site.waiting_max == 4
    assert site.holders_avg == 2 and site.permits_free == 0 and site.capacity == 2
    assert site.primitives == 1 and site.waiters_max == 4


def test_real_lock_and_queue_waits_are_local_and_named(summary):
    sites = sites_by_line(summary)
    lock = sites[line_of("lock")]
    assert (lock.kind, lock.name, lock.waiting_avg, lock.holders_avg) == (AwaitKind.LOCK, "GUARD", 3, 1)
    put = sites[line_of("queue-put")]
    # maxsize 1: one future went in, the other two submitters wait to put.
    assert (put.kind, put.name, put.waiting_avg) == (AwaitKind.QUEUE_PUT, "jobs", 2)
    fut = sites[line_of("future")]
    assert (fut.kind, fut.local, fut.name, fut.waiting_avg) == (AwaitKind.FUTURE, True, "fut", 1)


def test_a_real_socket_read_is_a_downstream_wait_not_a_local_one(summary):
    site = sites_by_line(summary)[line_of("socket read")]
    assert site.local is False and site.waiting_avg == 3 and site.function == "fetch"


def test_sleeping_holders_are_downstream_waits_inside_the_guarded_block(summary):
    sleeps = [s for s in summary.sites if s.kind == AwaitKind.SLEEP]
    assert {s.function for s in sleeps} == {"backend"}
    assert sum(s.waiting_avg for s in sleeps) == 3  # 2 semaphore holders and 1 lock holder
    # 16 tasks in flight: 4 + 3 + 2 + 1 local, 3 reading sockets and 3 sleeping downstream.
    assert summary.request_tasks_avg == 16
    assert summary.local_share == pytest.approx(10 / 16)
    assert summary.downstream_share == pytest.approx(6 / 16)
