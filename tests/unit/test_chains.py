"""Chains of waits (model/chains.py, model/chain_words.py): from what threads wait on, through
who serves it, to the end of their wait, read from recorded attaches (fixtures/recorded/: a front
end whose 16 request threads wait on a saturated backend, or on one no local process serves,
threads sharing one SQLite connection, a knot, a parent and its child), and the checks that ask
the chains instead of the sockets (checks/backend_saturated.py, checks/underloaded.py,
checks/engine.describe_activity)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from diagnose.checks import backend_saturated, gil_contention, underloaded
from diagnose.checks.base import NotApplicable
from diagnose.checks.engine import describe_activity
from diagnose.model.analysis import Analysis
from diagnose.model.chain_words import chain_line
from diagnose.model.chains import AT_CAPACITY, MAX_HOPS, SERVER_RULES, ChainContext, follow, gil_holder_wait
from diagnose.model.gil_holder import HELD_ASLEEP_SHARE
from diagnose.model.kernel_waits import Blocking, WaitObject
from diagnose.model.servers import ServerProcess
from diagnose.vocab import ChainEnd, ProcessRole, ResourceKind
from tests.conftest import RECORDED
from tests.replay import replay_service


def _analyses(tmp_path_factory: pytest.TempPathFactory, case: str, name: str) -> dict[ProcessRole, Analysis]:
    service = replay_service(case, name, tmp_path_factory.mktemp(case))
    return {view.role: view.analysis for view in service.processes}


@pytest.fixture(scope="module")
def front_end(tmp_path_factory) -> Analysis:
    """16 request threads, each on its own connection to a backend on 127.0.0.1 whose one
    serving thread ran a core (fixtures/recorded/backend_saturated_tcp)."""
    return _analyses(tmp_path_factory, "backend_saturated_tcp", "front_end_16_threads")[ProcessRole.SINGLE]


@pytest.fixture(scope="module")
def backend_pid() -> int:
    procfs = json.loads((RECORDED / "backend_saturated_tcp" / "front_end_16_threads.procfs.json").read_text())
    (pid,) = {p for pids in procfs["servers"].values() for p in pids}
    return pid


def _socket_to(address: str, *holders: int) -> WaitObject:
    return WaitObject(ResourceKind.SOCKET, f"socket:{address}", f"socket to {address}", Blocking.OUTSIDE,
                      "recvfrom", holders=holders, outbound=True)


def _server(pid: int, saturated: bool, waits_on: WaitObject | None = None,
            command: tuple[str, ...] = ("python", "store.py")) -> ServerProcess:
    """A local server read beside the service: at its capacity (one thread on a core), or with
    room, its threads waiting 80% of their ticks on `waits_on`."""
    busy = 0.99 if saturated else 0.05
    return ServerProcess(pid, command, (), 4.0, busy, 2.0, 4, int(saturated), "serve", busy, busy, 0.0,
                         waits_on.label if waits_on else "", 0.8 if waits_on else 0.0,
                         top_wait_object=waits_on)


def _with_servers(analysis: Analysis, servers: dict[int, ServerProcess]) -> Analysis:
    """The same analysis with other servers read beside it (its chains not yet followed)."""
    return replace(analysis, servers=servers)


# -- the registry ---------------------------------------------------------------------------------

def test_every_resource_kind_has_a_server_rule():
    assert set(SERVER_RULES) == set(ResourceKind)


# -- sockets and the processes behind them --------------------------------------------------------

def test_a_socket_wait_ends_at_the_local_process_serving_it(front_end, backend_pid):
    chain = front_end.chains[0]
    assert len(chain.waiters) == 16
    assert chain.share > 0.9
    assert [h.resource for h in chain.hops] == [ResourceKind.SOCKET]
    assert [s.pid for s in chain.local_servers] == [backend_pid]
    assert chain.end == ChainEnd.LOCAL_SERVER
    assert chain.last.saturation > 0.9


def test_chains_are_most_thread_time_first_and_name_each_wait_once(front_end):
    seconds = [c.seconds for c in front_end.chains]
    assert seconds == sorted(seconds, reverse=True) and len(seconds) > 1
    firsts = [(c.first.resource, c.first.label) for c in front_end.chains]
    assert len(firsts) == len(set(firsts))


def test_a_socket_to_a_local_process_the_window_did_not_read_ends_at_that_peer(front_end, backend_pid):
    unread = _with_servers(front_end, {})
    chain = unread.chains[0]
    assert chain.end == ChainEnd.LOCAL_PEER and chain.first.pids == (backend_pid,)
    assert isinstance(backend_saturated.run(unread, backend_saturated.Settings()), NotApplicable)


def test_a_server_with_room_whose_threads_wait_on_another_server_is_followed_to_it(front_end, backend_pid):
    store = _socket_to("127.0.0.1:6379", 999)
    servers = {backend_pid: _server(backend_pid, saturated=False, waits_on=store),
               999: _server(999, saturated=True, command=("/usr/bin/store", "--password", "hunter2"))}
    chain = _with_servers(front_end, servers).chains[0]
    assert [h.label for h in chain.hops] == [front_end.chains[0].first.label, "socket to 127.0.0.1:6379"]
    assert chain.hops[1].share == 0.8 and [s.pid for s in chain.hops[1].processes] == [999]
    assert chain.end == ChainEnd.LOCAL_SERVER and chain.last.saturation > 0.9
    line = chain_line(chain)
    assert f"pid {backend_pid} (python store.py)" in line
    assert line.endswith("socket to 127.0.0.1:6379 (80% of the time) → pid 999 (store --password ***): "
                         "busiest thread 0.99 cores → end: the server at capacity")
    assert "hunter2" not in line


def test_a_server_with_room_and_no_wait_of_its_own_ends_the_chain_there(front_end, backend_pid):
    chain = _with_servers(front_end, {backend_pid: _server(backend_pid, saturated=False)}).chains[0]
    assert len(chain.hops) == 1 and chain.end == ChainEnd.LOCAL_SERVER
    assert chain_line(chain).endswith("end: the server, at 5% of its capacity")


def test_a_server_whose_wait_leads_back_to_the_service_ends_as_a_cycle(front_end, backend_pid):
    back = _socket_to("127.0.0.1:8080", front_end.kernel.pid)
    chain = _with_servers(front_end, {backend_pid: _server(backend_pid, False, back)}).chains[0]
    assert chain.end == ChainEnd.CYCLE and chain.last.pids == (front_end.kernel.pid,)


def test_a_chain_of_servers_stops_after_max_hops():
    servers = {pid: _server(pid, False, _socket_to(f"10.0.0.{pid}:80", pid + 1)) for pid in range(1, 20)}
    hops, end = follow(_socket_to("10.0.0.1:80", 1), ChainContext(1000, servers))
    assert len(hops) == MAX_HOPS and end == ChainEnd.UNKNOWN


def test_a_connection_no_local_process_serves_ends_at_its_remote_address():
    context = ChainContext(1000, {})
    hops, end = follow(_socket_to("203.0.113.9:5432"), context)
    assert end == ChainEnd.REMOTE and hops[0].address == "203.0.113.9:5432"
    accepted = WaitObject(ResourceKind.SOCKET, "socket:127.0.0.1:40000", "connection from 127.0.0.1:40000",
                          Blocking.OUTSIDE, "recvfrom")
    assert follow(accepted, context)[1] == ChainEnd.WAITING_FOR_WORK


def test_the_activity_line_names_the_remote_end_of_the_chain_most_waited_on(tmp_path_factory):
    """16 request threads on connections to a backend in another network namespace
    (fixtures/recorded/remote_backend_netns): their chain ends at its address, and "no clear
    bottleneck" says so from the chain (checks/engine.describe_activity)."""
    found = _analyses(tmp_path_factory, "remote_backend_netns", "front_end_16_threads")[ProcessRole.SINGLE]
    chain = found.chains[0]
    assert chain.end == ChainEnd.REMOTE and len(chain.waiters) == 16 and chain.share > 0.9
    assert [h.resource for h in chain.hops] == [ResourceKind.SOCKET] and not chain.first.pids
    assert chain_line(chain).endswith(f"socket to {chain.first.address} → end: an address no local process serves")
    assert describe_activity(found).endswith(
        f"; 16 of them waited {chain.share:.0%} of the window on connections to {chain.first.address}, "
        "which no process on this host serves: the chain ends there")
    # a chain that does not end there names no address
    knotted = replace(found)
    knotted.chains = tuple(replace(c, end=ChainEnd.KNOT) for c in found.chains)  # its cached reading
    assert "no process on this host" not in describe_activity(knotted)


def test_a_backends_threads_reading_their_clients_connections_wait_for_work(tmp_path_factory):
    """The backend sampled with the front end (--follow-peers): its connection threads wait for
    their clients' next request, its main thread in accept."""
    peer = _analyses(tmp_path_factory, "backend_followed_peer", "front_end_and_backend")[ProcessRole.PEER]
    sockets = [c for c in peer.chains if c.first.resource in (ResourceKind.SOCKET, ResourceKind.LISTEN)]
    assert len(sockets) > 2
    assert {c.end for c in sockets} == {ChainEnd.WAITING_FOR_WORK}


# -- the GIL, locks, knots, children ---------------------------------------------------------------

def test_threads_queued_on_the_gil_behind_a_native_lock_end_at_the_thread_running_with_it(tmp_path_factory):
    """8 threads sharing one SQLite connection: the GIL's holder waits on the connection's
    mutex, held by the thread running a query without the GIL."""
    found = _analyses(tmp_path_factory, "sqlite_shared_busy_machine", "scheduler_overhead_led")[ProcessRole.SINGLE]
    chain = next(c for c in found.chains if c.first.resource == ResourceKind.GIL)
    assert len(chain.waiters) == 8
    assert [h.resource for h in chain.hops] == [ResourceKind.GIL, ResourceKind.LOCK]
    holding = found.gil_holding
    assert holding is not None and chain.last.thread == holding.lock_runner is not None
    assert chain.end == ChainEnd.LOCK_HOLDER
    # the serving thread by the name its process gave it, as the verdict names it
    name = _thread_name(found, holding.lock_runner)
    assert name.startswith("request-")
    assert f"→ {name} (thread {holding.lock_runner}) → end: the lock's holder" in chain_line(chain)


def test_threads_queued_on_a_lock_whose_holder_waits_on_a_backend_end_at_the_backend(tmp_path_factory):
    """16 request threads queued on one lock held across each call to a backend at capacity
    (fixtures/recorded/lock_across_saturated_backend): the frames name the lock behind the
    futex and its holders, the kernel what they slept on meanwhile (model/lock_holders.py), and
    the chain goes lock -> socket -> the backend's process."""
    found = _analyses(tmp_path_factory, "lock_across_saturated_backend", "front_end_16_threads")[ProcessRole.SINGLE]
    chain = found.chains[0]
    holding = found.lock_holdings[chain.first.label.replace("lock at ", f"futex:{found.kernel.pid}:")]
    assert holding.lock.name == "guard" and holding.lock.location.endswith("remote_backend.py:121")
    assert len(holding.threads) > 1 and holding.thread is None  # the request threads take turns
    assert [h.resource for h in chain.hops] == [ResourceKind.LOCK, ResourceKind.SOCKET]
    socket = chain.hops[1]
    assert holding.wait is not None and socket.label == holding.wait.label
    assert socket.share == holding.wait_share > 0.5
    (backend,) = [c for c in found.chains if c.local_servers]
    assert [s.pid for s in socket.processes] == [s.pid for s in backend.local_servers]
    assert chain.end == ChainEnd.LOCAL_SERVER and chain.last.saturation >= AT_CAPACITY
    (pid,) = socket.pids
    assert chain_line(chain) == (
        f"16 threads, {chain.share:.0%} of the time → {chain.first.label} → {socket.label} "
        f"({socket.share:.0%} of the time) → pid {pid} ({socket.processes[0].program}): busiest thread "
        f"{socket.processes[0].busiest_thread_cores:.2f} cores → end: the server at capacity")


def test_a_lock_whose_holder_computes_under_it_ends_at_its_holder(tmp_path_factory):
    """numpy work under one model lock (fixtures/recorded/lock_contention_kernel): its holders
    run while the others wait, so the lock's holder is the end."""
    found = _analyses(tmp_path_factory, "lock_contention_kernel", "numpy_read_as_lock")[ProcessRole.SINGLE]
    (holding,) = found.lock_holdings.values()
    assert holding.lock.qualified == "Model._lock" and holding.wait is None
    chain = next(c for c in found.chains if c.first.label.endswith(holding.key.rpartition(":")[2]))
    assert len(chain.hops) == 1 and chain.end == ChainEnd.LOCK_HOLDER


def test_locks_the_source_names_alike_are_not_followed_to_each_others_holders(tmp_path_factory):
    """`self.locks[i]`, one lock per model replica (fixtures/recorded/grpc_locked_busy_machine):
    two futexes, one name; a thread holding one is no holder of the other."""
    found = _analyses(tmp_path_factory, "grpc_locked_busy_machine", "compute_bound_led")[ProcessRole.WORKER]
    assert not found.lock_holdings
    assert all(len(c.hops) == 1 for c in found.chains if c.first.resource == ResourceKind.LOCK)


def test_threads_queued_on_a_gil_held_asleep_end_at_its_holder_asleep_in_its_call(tmp_path_factory):
    """8 threads behind a GIL held across a sleep in a C call (gil_held_asleep_busy_machine): the
    holder was blocked most of the time it held it (by the counters' CPU: the kernel's instants
    on a busy machine see other threads runnable), asleep in a timer."""
    found = _analyses(tmp_path_factory, "gil_held_asleep_busy_machine", "front_end_8_threads")[ProcessRole.SINGLE]
    chain = found.chains[0]
    assert [h.resource for h in chain.hops] == [ResourceKind.GIL, ResourceKind.SLEEP]
    holding = found.gil_holding
    # the counters' CPU says more than the kernel's instants, and the chain reads the larger
    assert holding is not None and holding.blocked_share < found.chain_context.gil_blocked
    assert HELD_ASLEEP_SHARE <= found.chain_context.gil_blocked
    assert chain.last.share == round(found.chain_context.gil_blocked * holding.holder_wait_share, 4)
    assert chain.end == ChainEnd.GIL_HOLDER
    assert chain_line(chain).endswith(f"→ the GIL → a timer or signal ({chain.last.share:.0%} of the time) "
                                      "→ end: the GIL's holder")


def test_gil_contention_names_the_holders_wait_the_gils_server_rule_names(tmp_path_factory):
    """gil_contention's "holder blocked on ..." words, its runner and its lever come from the hop
    past the GIL (chains.gil_holder_wait), as the chains print it."""
    sqlite = _analyses(tmp_path_factory, "sqlite_shared_busy_machine", "scheduler_overhead_led")[ProcessRole.SINGLE]
    waited = gil_holder_wait(sqlite.chain_context)
    chain = next(c for c in sqlite.chains if c.first.resource == ResourceKind.GIL)
    assert waited is not None and chain.hops[1] == waited and waited.thread is not None
    found = gil_contention.run(sqlite, gil_contention.Settings())
    assert not isinstance(found, NotApplicable)
    address = waited.label.removeprefix("lock at ")
    assert f"blocked on a native lock (futex {address})" in found.summary
    assert f", a lock held by {_thread_name(sqlite, waited.thread)}" in found.summary
    assert str(found.value("gil_holder_wait").value).startswith(f"{waited.label} (")
    assert found.evidence.get("fix") == {"knob": "per_thread_instance", "value": found.sites[0].function}
    # a holding whose hop the rule does not take (its blocked share under the line) names none
    unfollowed = replace(sqlite)
    unfollowed.chain_context = replace(sqlite.chain_context, gil_blocked=0.0)  # its cached reading
    assert gil_holder_wait(unfollowed.chain_context) is None
    blind = gil_contention.run(unfollowed, gil_contention.Settings())
    assert not isinstance(blind, NotApplicable)
    assert "native lock" not in blind.summary and "a lock held by" not in blind.summary
    assert blind.value("gil_holder_wait").value == "not seen"


def _thread_name(analysis: Analysis, tid: int) -> str:
    rows = analysis.threads[analysis.threads["tid"] == tid]
    return str(rows["name"].iloc[0])


def test_a_knots_threads_and_those_waiting_into_it_end_at_the_knot(tmp_path_factory):
    found = _analyses(tmp_path_factory, "knots", "future_holding_its_jobs_lock")[ProcessRole.SINGLE]
    knotted = {c for c in found.chains if c.end == ChainEnd.KNOT}
    in_knots = {h.wait.thread.tid for k in found.knots for h in (*k.members, *k.victims)}
    assert knotted and {t for c in knotted for t in c.tids} <= in_knots
    assert found.chains[0] in knotted  # the most thread time: 8 threads behind the knot


def test_a_parent_waits_on_its_child_and_the_child_on_the_parents_pipe(tmp_path_factory):
    found = _analyses(tmp_path_factory, "knots", "parent_waiting_on_its_childs_pipe")
    parent, child = found[ProcessRole.MASTER], found[ProcessRole.WORKER]
    assert child.kernel is not None and parent.kernel is not None
    (waiting,) = parent.chains
    assert waiting.end == ChainEnd.CHILD and waiting.first.pids == (child.kernel.pid,)
    (piped,) = child.chains
    assert piped.first.resource == ResourceKind.PIPE
    assert piped.end == ChainEnd.LOCAL_PEER and piped.first.pids == (parent.kernel.pid,)


# -- the checks that ask the chains ---------------------------------------------------------------

def test_backend_saturated_names_the_chain_whose_first_hop_a_local_process_serves(front_end, backend_pid):
    chain = front_end.chains[0]
    found = backend_saturated.run(front_end, backend_saturated.Settings())
    assert not isinstance(found, NotApplicable) and found.score == 100
    assert found.value("backend").value.startswith(f"{chain.first.address}: pid {backend_pid} ")
    assert found.value("backend_clients").value == len(chain.tids) == 16
    assert found.value("backend_wait_share").value == chain.share
    assert found.value("backend_in_flight").value == round(chain.occupancy, 2)


def test_underloaded_takes_off_the_time_waiting_on_a_backend_at_capacity_and_only_that(tmp_path_factory):
    """16 request threads queued on a lock whose holder waits on the saturated backend
    (fixtures/recorded/lock_across_saturated_backend): the holder's share of time on the backend
    is the workers' time spent there, not waiting for work."""
    found = _analyses(tmp_path_factory, "lock_across_saturated_backend", "front_end_16_threads")[ProcessRole.SINGLE]
    assert found.chains[0].first.resource == ResourceKind.LOCK and len(found.chains[0].waiters) == 16
    # the holders' own waits on the backend: the chain whose first hop is the socket
    (backend,) = [c for c in found.chains if c.local_servers]
    assert backend.end == ChainEnd.LOCAL_SERVER
    workers = [int(t) for t in found.request_threads["tid"]]
    share = underloaded.run(found, underloaded.Settings()).value("saturated_backend_share").value
    assert share == pytest.approx(backend.among(workers).occupancy / len(workers), abs=1e-4)
    assert share > 0.02
    (pid,) = [s.pid for s in backend.local_servers]
    roomy = _with_servers(found, {pid: _server(pid, saturated=False)})
    assert underloaded.run(roomy, underloaded.Settings()).value("saturated_backend_share").value == 0.0


def test_a_chain_among_some_threads_counts_only_theirs(front_end):
    chain = front_end.chains[0]
    some = chain.tids[:4]
    part = chain.among(some)
    assert part.tids == some and part.first == chain.first and part.end == chain.end
    assert part.seconds < chain.seconds
    assert chain.among([]).waiters == ()


# -- the printed form -----------------------------------------------------------------------------

def test_a_chain_prints_every_hop_on_one_line(front_end, backend_pid):
    chain = front_end.chains[0]
    line = chain_line(chain)
    assert "\n" not in line
    assert line == (f"16 threads, {chain.share:.0%} of the time → {chain.first.label} → pid {backend_pid} "
                    f"(python feature_backend.py --seconds 120 --port {chain.first.address.rsplit(':', 1)[1]}): "
                    f"busiest thread {chain.local_servers[0].busiest_thread_cores:.2f} cores "
                    f"→ end: the server at capacity")


def test_a_gil_chain_names_the_code_holding_the_gil_most(tmp_path_factory):
    """The GIL's waiters end at its holder: the chain names the code the wait-site table found
    holding it (a gc.collect() per request at its line; json's C decoder, named by the
    interpreter's state), so the chain says where the time goes, not only that a holder has it."""
    collect = _analyses(tmp_path_factory, "gc_collect_called", "collect_per_request_gthread")
    vocab = _analyses(tmp_path_factory, "gil_c_holder", "vocab_parsed_per_request_gthread")
    for found, holder in ((collect, "app (collect_per_request.py:"), (vocab, "JSONDecoder.raw_decode (decoder.py:")):
        worker = next(a for a in found.values() if any(c.first.resource == ResourceKind.GIL for c in a.chains))
        chain = next(c for c in worker.chains if c.first.resource == ResourceKind.GIL)
        assert chain.first.held_by.startswith(holder), chain_line(chain)
        assert f"→ the GIL → held most by {holder}" in chain_line(chain)


def test_an_incidental_holder_is_not_named_on_the_chain(tmp_path_factory):
    # the GIL held asleep in a C call: the wait-site table's top Python holder ran 2% of the
    # waits; the chain goes on to what the holder slept on instead
    found = _analyses(tmp_path_factory, "gil_held_asleep_busy_machine", "front_end_8_threads")[ProcessRole.SINGLE]
    chain = found.chains[0]
    assert chain.first.resource == ResourceKind.GIL and chain.first.held_by == ""
    assert "held most by" not in chain_line(chain)
