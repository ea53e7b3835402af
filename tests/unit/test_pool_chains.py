"""Threads queueing on one pool are one chain of waits (model/condition_waits.py), though the
kernel sees each asleep on a lock of its own (threading.Condition parks every waiter on a fresh
one); the chain goes on to what the pool's holders sleep on, and ends at the pool's items when
that is no limit of its own. Read from a recorded attach of fixtures/workloads/pool_wait.py (8
request threads sharing a pool of 2 connections, each held for a 5 ms call;
fixtures/recorded/pool_wait), and on the pool rule with synthetic holders."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from diagnose.checks import pool_wait
from diagnose.model.chains import ChainContext, follow
from diagnose.model.condition_waits import PoolHolding
from diagnose.model.kernel_waits import Blocking, WaitObject
from diagnose.model.servers import ServerProcess
from diagnose.vocab import ChainEnd, ResourceKind
from tests.replay import replay, replay_service

POOL = WaitObject(ResourceKind.POOL, "condition:/srv/app.py:52", "pool: queue.Queue at acquire (app.py:52)",
                  Blocking.HELD)


@pytest.fixture(scope="module")
def pooled(tmp_path_factory):
    service = replay_service("pool_wait", "eight_threads_two_connections", tmp_path_factory.mktemp("pool"))
    return service.processes[0].analysis


def test_the_threads_queueing_on_a_pool_are_one_chain_to_what_its_holders_sleep_on(pooled):
    chain = next(c for c in pooled.chains if c.first.resource == ResourceKind.POOL)
    assert len(chain.waiters) == 8 and chain.share > 0.5
    assert "ConnectionPool.acquire (pool_wait.py:52)" in chain.first.label
    assert [h.resource for h in chain.hops] == [ResourceKind.POOL, ResourceKind.SLEEP]
    assert chain.end == ChainEnd.POOL_ITEMS
    # no thread's own waiter lock is left as a chain of its own
    request = set(pooled.request_threads["tid"])
    assert not any(c.first.resource == ResourceKind.LOCK and {w.tid for w in c.waiters} <= request
                   for c in pooled.chains)


def test_the_report_states_one_pool_chain_instead_of_a_lock_per_thread(tmp_path):
    report = replay("pool_wait", "eight_threads_two_connections", tmp_path)
    lines = [c.line for c in report.chains]
    assert lines[0].startswith("8 threads") and "pool: queue.Queue at ConnectionPool.acquire" in lines[0]
    assert lines[0].endswith("end: the pool's items, every one held")
    assert not any("lock at 0x" in line for line in lines), lines
    assert report.verdict.primary == pool_wait.ID


def _context(holding: PoolHolding, servers: dict[int, ServerProcess] | None = None) -> ChainContext:
    return ChainContext(100, servers or {}, pools={POOL.key: holding})


def _socket(*holders: int) -> WaitObject:
    return WaitObject(ResourceKind.SOCKET, "socket:127.0.0.1:5432", "socket to 127.0.0.1:5432", Blocking.OUTSIDE,
                      "recvfrom", holders=holders, outbound=True)


def test_a_pool_whose_holders_call_an_address_outside_ends_at_its_items():
    hops, end = follow(POOL, _context(PoolHolding(POOL.key, (1, 2), _socket(), 0.9)))
    assert end == ChainEnd.POOL_ITEMS and [h.resource for h in hops] == [ResourceKind.POOL, ResourceKind.SOCKET]


def test_a_pool_whose_holders_wait_on_a_local_server_at_capacity_ends_at_that_server():
    backend = ServerProcess(4242, ("python", "store.py"), (), 4.0, 0.99, 2.0, 4, 1, "serve", 0.99, 0.99, 0.0, "", 0.0)
    hops, end = follow(POOL, _context(PoolHolding(POOL.key, (1, 2), _socket(4242), 0.9), {4242: backend}))
    assert end == ChainEnd.LOCAL_SERVER and hops[1].processes == (backend,)


def test_a_pool_whose_holders_mostly_run_ends_at_its_items():
    hops, end = follow(POOL, _context(PoolHolding(POOL.key, (1, 2), None, 0.0)))
    assert end == ChainEnd.POOL_ITEMS and len(hops) == 1


def test_pool_wait_advises_the_end_past_the_pool_instead_of_a_bigger_pool(pooled):
    """Where the holders' wait ends at a limit of its own (here: the chain re-ended at a lock's
    holder), a bigger pool would queue there: the first advice names the chain, not the pool."""
    settings = pool_wait.Settings()
    plain = pool_wait.run(pooled, settings)
    assert plain.advice[0] == settings.advice[0]
    elsewhere = copy.copy(pooled)
    elsewhere.__dict__["chains"] = tuple(replace(c, end=ChainEnd.LOCK_HOLDER)
                                         if c.first.resource == ResourceKind.POOL else c for c in pooled.chains)
    found = pool_wait.run(elsewhere, settings)
    assert "end: the lock's holder" in found.advice[0] and "A bigger pool would queue" in found.advice[0]
