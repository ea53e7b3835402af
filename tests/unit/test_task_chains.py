"""Chains that start at asyncio request tasks (model/task_chains.py): a future worker threads
resolve leads to those threads, and what they wait on to the end. Read from a recorded attach of
fixtures/workloads/async_executor.py (64 request tasks awaiting run_in_executor(None, ...) on the
default executor's 6 threads, each asleep 20 ms in the lookup; fixtures/recorded/async_executor),
and on synthetic inputs where the workers' own wait ends at a limit of its own."""

from __future__ import annotations

import pytest

from diagnose.checks import async_wait
from diagnose.model.chains import Chain, Hop, Waiter
from diagnose.model.task_chains import task_chains
from diagnose.model.worker_threads import ThreadHolders
from diagnose.report.model.sections import ProcessTasks, TaskAwaitSite
from diagnose.vocab import AwaitKind, ChainEnd, ResourceKind, ThreadState
from tests.replay import replay, replay_service

WORKERS = (11, 12, 13, 14, 15, 16)


@pytest.fixture(scope="module")
def executor(tmp_path_factory):
    service = replay_service("async_executor", "default_executor", tmp_path_factory.mktemp("executor"))
    return service.processes[0].analysis


def test_tasks_awaiting_an_executor_wait_on_its_threads_and_what_they_wait_on(executor):
    (chain,) = executor.task_chains
    assert chain.tasks == pytest.approx(64, abs=1) and chain.share > 0.9
    future, sleep = chain.hops
    assert future.resource == ResourceKind.FUTURE and "run_in_executor" in future.label
    assert future.workers == 6 and future.workers_busy > 5.5
    assert sleep.resource == ResourceKind.SLEEP and sleep.share > 0.9
    # every worker taken, each asleep in a call that is no limit of its own: more workers serve more
    assert chain.end == ChainEnd.WORKER_THREADS


def test_the_report_states_the_tasks_chain_and_not_the_workers_own_beside_it(tmp_path):
    report = replay("async_executor", "default_executor", tmp_path)
    lines = [c.line for c in report.chains]
    assert lines and lines[0].startswith("64 request tasks")
    assert "6 worker threads, 6.0 busy on average" in lines[0]
    assert lines[0].endswith("end: the worker threads, every one taken")
    assert not any(line.startswith("6 threads") for line in lines), lines
    assert report.chains[0].tasks == pytest.approx(64, abs=1) and report.chains[0].threads == 0
    found = next(f for f in report.findings if f.id == async_wait.ID)
    assert "the executor is the limit" in found.advice[0]
    assert "futures the worker threads resolve" in found.summary


def _tasks(kind: AwaitKind = AwaitKind.FUTURE) -> ProcessTasks:
    site = TaskAwaitSite("handle", "/srv/app.py", 41, kind, "loop.run_in_executor", local=True,
                         waiting_avg=30.0, waiting_max=32, share=0.95)
    return ProcessTasks(pid=1, snapshots=20, reads=20, request_tasks_avg=32.0, sites=(site,))


def _workers(busy: float) -> ThreadHolders:
    return ThreadHolders(len(WORKERS), WORKERS, busy, "lookup → sock.recv", None, 1.0, ThreadState.IO, 600)


def _their_chain(end: ChainEnd, resource: ResourceKind = ResourceKind.LOCK) -> Chain:
    return Chain(tuple(Waiter(t, 0.9) for t in WORKERS), 4.0, (Hop(resource, "lock at 0x10"),), end)


def test_a_limit_past_the_workers_is_the_end_of_the_tasks_chain():
    """Workers all taken, each waiting on a lock's holder: more workers would queue on the lock."""
    (chain,) = task_chains(_tasks(), _workers(6.0), (_their_chain(ChainEnd.LOCK_HOLDER),), 4.0)
    assert chain.end == ChainEnd.LOCK_HOLDER
    assert [h.resource for h in chain.hops] == [ResourceKind.FUTURE, ResourceKind.LOCK]
    assert chain.hops[1].share == pytest.approx(0.9)


def test_workers_not_all_taken_end_where_their_own_wait_ends():
    (chain,) = task_chains(_tasks(), _workers(2.0), (_their_chain(ChainEnd.TIMER, ResourceKind.SLEEP),), 4.0)
    assert chain.end == ChainEnd.TIMER


def test_workers_that_mostly_run_end_the_chain_themselves():
    (chain,) = task_chains(_tasks(), _workers(6.0), (), 4.0)
    assert chain.end == ChainEnd.WORKER_THREADS and len(chain.hops) == 1


def test_an_await_that_hands_nothing_to_threads_starts_no_chain():
    assert task_chains(_tasks(AwaitKind.SEMAPHORE), _workers(6.0), (), 4.0) == ()
    assert task_chains(_tasks(), None, (), 4.0) == ()


def test_the_executor_advice_names_the_limit_past_the_workers_instead_of_more_workers():
    (chain,) = task_chains(_tasks(), _workers(6.0), (_their_chain(ChainEnd.LOCK_HOLDER),), 4.0)
    site = _tasks().sites[0]
    advice, fix = async_wait.executor_advice(site, _workers(6.0), "estimated 2.0x", 30, chain)
    assert fix is None and "end: the lock's holder" in advice and "More workers would queue" in advice
    plain, plain_fix = async_wait.executor_advice(site, _workers(6.0), "estimated 2.0x", 30, None)
    assert "the executor is the limit" in plain and plain_fix is not None
