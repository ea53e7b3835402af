"""What the kernel says a blocked thread waits on: the raw readings decoded into wait objects,
the samples they settle, the wait-for graph and the verdicts it changes. Synthetic /proc records
and stacks, in-process; the live tests are tests/integration/test_kernel_waits_live.py."""

from __future__ import annotations

import os
import socket
import struct

import numpy as np

from diagnose.checks.service_verdict import run_service_checks
from diagnose.classify.categories import Categorizer
from diagnose.collect.kernel_waits import (REREAD_POLLED_FDS, RUNNING, KernelRecord,
                                           KernelWaitReader, parse_locks, parse_syscall)
from diagnose.collect.sockets import _address
from diagnose.collect.procfs import ProcRecord, ThreadCounters, TreeRecord, as_seen_inside
from diagnose.model.kernel_waits import Blocking, kernel_view, lock_knot
from diagnose.model.os_summary import summarize
from diagnose.samples.profile import Frame, Profile, ThreadTrack
from diagnose.model.service import build_service
from diagnose.vocab import ResourceKind
from diagnose.model.wait_graph import build_wait_graph

FUTEX, FLOCK, READ, ACCEPT, WAIT4, SLEEP, EPOLL = 202, 73, 0, 43, 61, 230, 232
RUNTIME = (0x7F0000001000, 0x7F0000030000)
GIL_ADDRESS = 0x7F0000001200
FUTEX_WAIT_PRIVATE = 0x89  # FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG (a condvar's timed wait)
SEM_WAIT_PRIVATE = 0x189  # ... | FUTEX_CLOCK_REALTIME (sem_wait: a Python Lock)
WINDOW_S = 4.0
TICK_S = 0.1


# -- the raw readings ---------------------------------------------------------------------------

def test_a_syscall_line_gives_its_number_and_first_arguments():
    reading = parse_syscall("202 0x55b1f5f7a6f0 0x189 0x0 0x0 0x0 0x0 0x7ffc 0x7f12\n")
    assert reading is not None
    assert reading.nr == 202 and reading.args == (0x55B1F5F7A6F0, 0x189, 0)


def test_a_thread_on_a_cpu_reads_as_running_and_garbage_as_nothing():
    running = parse_syscall("running\n")
    assert running is not None and running.nr == RUNNING
    assert parse_syscall("") is None
    assert parse_syscall("-1 0x7ffd 0x0\n") is None  # a kernel thread
    assert parse_syscall("bogus\n") is None


def test_proc_locks_names_the_holder_and_each_waiter_of_a_file():
    entries = parse_locks("1: FLOCK  ADVISORY  WRITE 22570 fe:00:2146346 0 EOF\n"
                          "1: -> FLOCK  ADVISORY  WRITE 22615 fe:00:2146346 0 EOF\n"
                          "2: POSIX  ADVISORY  WRITE 900 08:01:77 0 EOF\n")
    assert [(e.kind, e.pid, e.file_id, e.waiting) for e in entries] == [
        ("FLOCK", 22570, "fe:00:2146346", False), ("FLOCK", 22615, "fe:00:2146346", True),
        ("POSIX", 900, "08:01:77", False)]


def test_a_tcp_address_from_proc_net_reads_as_host_and_port():
    assert _address("0100007F:1F90") == "127.0.0.1:8080"


# -- decoding -----------------------------------------------------------------------------------

def record_with(pid: int, observations: list[tuple], fds: dict | None = None,
                file_ids: dict | None = None, watched: dict | None = None,
                running_ticks: dict | None = None) -> ProcRecord:
    """A process whose threads the /proc sampler saw asleep in `observations` (t, tid, nr, a0,
    a1, a2, wchan) and on a CPU at `running_ticks` {tid: [t...]}."""
    rec = ProcRecord(pid=pid, cores=2, cpu_quota_cores=None, started_at=0.0)
    rec.kernel = KernelRecord(machine="x86_64", observations=list(observations), fds=fds or {},
                              file_ids=file_ids or {}, watched=watched or {}, runtime_range=RUNTIME)
    rec.state_samples = [(o[0], o[1], "S") for o in observations]
    for tid, times in (running_ticks or {}).items():
        rec.state_samples += [(t, tid, "R") for t in times]
    rec.state_samples.sort()
    return rec


def only(pid, tid, nr, a0=0, a1=0, a2=0):
    return kernel_view(record_with(pid, [(0.1, tid, nr, a0, a1, a2, "")]), tree_of()).threads[tid].top


def tree_of(*records: ProcRecord, parents: dict | None = None) -> TreeRecord:
    tree = TreeRecord(roots=[records[0].pid] if records else [1])
    for rec in records:
        tree.records[rec.pid] = rec
    tree.parents = parents or {}
    return tree


def test_a_futex_inside_the_interpreters_runtime_state_is_the_gil():
    obj = only(10, 11, FUTEX, GIL_ADDRESS, FUTEX_WAIT_PRIVATE)
    assert obj is not None and obj.resource == ResourceKind.GIL and obj.blocking == Blocking.GIL


def test_any_other_futex_is_a_lock_named_by_its_address():
    one = only(10, 11, FUTEX, 0x55AA00, SEM_WAIT_PRIVATE)
    two = only(10, 12, FUTEX, 0x55BB00, SEM_WAIT_PRIVATE)
    assert one is not None and two is not None
    assert one.resource == ResourceKind.LOCK and one.blocking == Blocking.HELD
    assert one.key != two.key


def test_a_futex_inside_an_intra_op_pools_library_is_the_pools_own_not_a_lock():
    # OpenBLAS's callers queue on a futex in OpenBLAS's own data (measured on CPython 3.13):
    # the pool's size is the knob, not a lock in the service's code
    rec = record_with(10, [(0.1, 11, FUTEX, 0x7E1000, 0x80, 0, "")])
    assert rec.kernel is not None
    rec.kernel.pool_futexes = {0x7E1000: "/venv/numpy.libs/libscipy_openblas64_-4b78.so"}
    obj = kernel_view(rec, tree_of()).threads[11].top
    assert obj is not None and obj.blocking == Blocking.POOL and obj.resource != ResourceKind.LOCK
    assert "libscipy_openblas64_-4b78.so" in obj.label


def test_pool_futex_addresses_are_found_in_the_pool_librarys_mapping(tmp_path, monkeypatch):
    from diagnose.collect import kernel_waits as collect

    maps = ("7f00000000-7f00001000 rw-p 00000000 fe:00 1 /venv/lib/libscipy_openblas64_.so\n"
            "7f00001000-7f00002000 rw-p 00000000 00:00 0 \n"
            "7f00002000-7f00003000 rw-p 00000000 fe:00 2 /usr/lib/libc.so.6\n")
    monkeypatch.setattr(collect, "_read", lambda path: maps if path.endswith("/maps") else None)
    found = collect.pool_library_addresses(10, {0x7F00000800, 0x7F00001800, 0x7F00002800})
    assert found == {0x7F00000800: "/venv/lib/libscipy_openblas64_.so"}


def test_a_shared_futex_is_one_lock_across_processes():
    shared = 0x0  # FUTEX_WAIT without the private flag: a lock in shared memory
    a = only(10, 11, FUTEX, 0x7E0000, shared)
    b = only(20, 21, FUTEX, 0x7E0000, shared)
    assert a is not None and b is not None and a.key == b.key


def test_a_flock_wait_names_the_file_and_the_process_holding_it():
    rec = record_with(10, [(0.1, 11, FLOCK, 3, 2, 0, "")], fds={3: "/run/gpu.lock"},
                      file_ids={3: "fe:00:42"})
    tree = tree_of(rec)
    tree.file_locks = [(0.1, parse_locks("1: FLOCK  ADVISORY  WRITE 30 fe:00:42 0 EOF\n"
                                         "1: -> FLOCK  ADVISORY  WRITE 10 fe:00:42 0 EOF\n"))]
    obj = kernel_view(rec, tree).threads[11].top
    assert obj is not None and obj.resource == ResourceKind.FILE_LOCK
    assert obj.label == "file lock on /run/gpu.lock" and obj.holders == (30,)


def test_a_read_on_a_pipe_names_the_process_at_its_other_end():
    rec = record_with(10, [(0.1, 11, READ, 5, 0, 0, "")], fds={5: "pipe:[777]"})
    tree = tree_of(rec)
    tree.pipes = {777: {10: "r", 44: "w"}}
    obj = kernel_view(rec, tree).threads[11].top
    assert obj is not None and obj.resource == ResourceKind.PIPE and obj.holders == (44,)
    assert obj.blocking == Blocking.OUTSIDE


def test_waiting_for_a_connection_is_waiting_for_work():
    obj = only(10, 11, ACCEPT, 4)
    assert obj is not None and obj.resource == ResourceKind.LISTEN and obj.blocking == Blocking.IDLE
    rec = record_with(10, [(0.1, 11, EPOLL, 7, 0, 0, "")], fds={9: "socket:[55]"},
                      watched={"epoll:7": [9]})
    tree = tree_of(rec)
    tree.sockets = {55: "listen 0.0.0.0:8000"}
    polled = kernel_view(rec, tree).threads[11].top
    assert polled is not None and polled.resource == ResourceKind.LISTEN


def test_a_poll_on_a_connection_it_opened_waits_on_the_peer_as_a_read_of_it_does():
    """Python's socket timeouts poll before each recv: the poll is the client side's wait too,
    so model/chains.py follows it to the peer (here, an address no local process serves)."""
    rec = record_with(10, [(0.1, 11, READ, 9, 0, 0, ""), (0.2, 12, EPOLL, 7, 0, 0, "")],
                      fds={9: "socket:[55]"}, watched={"epoll:7": [9]})
    tree = tree_of(rec)
    tree.sockets = {55: "tcp 203.0.113.9:5432"}
    view = kernel_view(rec, tree)
    read, polled = view.threads[11].top, view.threads[12].top
    assert read is not None and polled is not None
    assert polled.syscall == "epoll_wait" and polled.key == read.key == "socket:203.0.113.9:5432"
    assert polled.outbound and read.outbound


def test_wait4_waits_for_the_processes_children():
    rec = record_with(10, [(0.1, 11, WAIT4, 2**64 - 1, 0, 0, "")])
    tree = tree_of(rec, parents={10: None, 40: 10, 41: 10})
    obj = kernel_view(rec, tree).threads[11].top
    assert obj is not None and obj.resource == ResourceKind.CHILD and obj.holders == (40, 41)


def test_running_ticks_count_in_a_threads_shares():
    rec = record_with(10, [(0.1, 11, SLEEP, 0, 0, 0, "")], running_ticks={11: [0.2, 0.3, 0.4]})
    view = kernel_view(rec, tree_of(rec))
    assert view is not None
    assert view.blocked_share(11, Blocking.RUNNING) == 0.75
    assert view.blocked_share(11, Blocking.OUTSIDE) == 0.25


def test_a_process_without_the_reader_has_no_kernel_view():
    assert kernel_view(ProcRecord(pid=1, cores=2, cpu_quota_cores=None, started_at=0.0)) is None


# -- a container's thread ids -------------------------------------------------------------------

def test_a_containers_threads_are_named_by_their_ids_inside_it():
    rec = record_with(5000, [(0.1, 5001, FUTEX, 0x55AA00, SEM_WAIT_PRIVATE, 0, "")])
    rec.ns_tids = {5000: 1, 5001: 7}
    rec.first = {5001: ThreadCounters(1.0, None, None, None, None)}
    inside = as_seen_inside(rec)
    assert {tid for _, tid, _ in inside.state_samples} == {7}
    assert set(inside.first) == {7}
    assert inside.kernel is not None and inside.kernel.observations[0][1] == 7
    assert rec.state_samples[0][1] == 5001  # the record itself is left as read


# -- knots --------------------------------------------------------------------------------------

def blocked_all_window(pid: int, locks: dict[int, int], cpu_s: float = 0.0) -> ProcRecord:
    """Threads `locks` {tid: futex address} asleep on their lock at every tick of the window."""
    ticks = np.arange(0.05, WINDOW_S, TICK_S)
    rec = record_with(pid, [(round(float(t), 3), tid, FUTEX, address, SEM_WAIT_PRIVATE, 0, "")
                            for t in ticks for tid, address in locks.items()])
    rec.ended_at = WINDOW_S
    for tid in locks:
        rec.first[tid] = ThreadCounters(10.0, 0.0, 0, 0, 0)
        rec.last[tid] = ThreadCounters(10.0 + cpu_s / len(locks), 0.0, 0, 0, 0)
    return rec


def test_threads_asleep_all_window_on_two_locks_in_an_idle_process_are_a_knot():
    rec = blocked_all_window(10, {11: 0x55AA00, 12: 0x55BB00})
    knot = lock_knot(kernel_view(rec, tree_of(rec)), summarize(rec))
    assert knot is not None and knot.tids == (11, 12) and len(knot.locks) == 2


def test_no_knot_where_the_process_ran_or_all_wait_on_one_lock():
    busy = blocked_all_window(10, {11: 0x55AA00, 12: 0x55BB00}, cpu_s=2.0)
    assert lock_knot(kernel_view(busy, tree_of(busy)), summarize(busy)) is None
    one = blocked_all_window(10, {11: 0x55AA00, 12: 0x55AA00})  # a holder elsewhere may still run
    assert lock_knot(kernel_view(one, tree_of(one)), summarize(one)) is None


# -- verdicts -----------------------------------------------------------------------------------

def py(function: str, file: str, line: int) -> Frame:
    return Frame(function, file, line, False)


def python_only_profile(threads: dict[tuple[int, int], list[list[Frame]]]) -> Profile:
    """{(pid, tid): stacks, one per sample in turn} recorded without native frames."""
    profile = Profile(native=False, interval_s=TICK_S)
    for (pid, tid), stacks in threads.items():
        ids = [profile.intern_stack(tuple(profile.intern_frame(f) for f in frames)) for frames in stacks]
        profile.threads.append(ThreadTrack(tid, f"t{tid}", np.array(ids, dtype=np.int32),
                                           np.full(len(ids), TICK_S), pid=pid))
    return profile


def test_a_hung_process_whose_source_cannot_be_read_is_a_deadlock_not_gil_contention():
    # Two request threads in a container: Python frames only (native unwinding failed), their
    # source unreadable, each asleep all window on its own futex, the process at 0 cores.
    app = "/nowhere/app.py"
    samples = int(WINDOW_S / TICK_S)
    profile = python_only_profile({
        (10, 11): [[py("handle", app, 10), py("transfer", app, 20)]] * samples,
        (10, 12): [[py("handle", app, 10), py("refund", app, 30)]] * samples})
    rec = blocked_all_window(10, {11: 0x55AA00, 12: 0x55BB00})
    service = build_service(profile, Categorizer(), tree_of(rec))
    results, _ = run_service_checks(service)
    assert results.verdict.primary == "deadlock"
    # The samples alone read as two threads running Python; the kernel saw none of them run.
    assert "gil_contention" in {n.id for n in results.not_applicable} or all(
        f.score == 0 for f in results.findings if f.id == "gil_contention")
    graph = build_wait_graph(service)
    assert graph is not None and graph.knots and graph.summary.startswith("hang")


def test_workers_sleeping_on_one_file_lock_are_lock_contention_naming_the_file(tmp_path):
    # Three worker processes of one program, sampled sparsely without native frames: the
    # kernel saw each asleep in flock half the window, the lock held by a sibling.
    app = tmp_path / "server.py"
    app.write_text("def forward(f):\n    fcntl.flock(f, fcntl.LOCK_EX)\n    return compute()\n"
                   "def compute():\n    return sum(range(100000))\n")
    compute = [py("handle", str(app), 9), py("forward", str(app), 3), py("compute", str(app), 5)]
    locking = [py("handle", str(app), 9), py("forward", str(app), 2)]
    samples = int(WINDOW_S / TICK_S)
    workers = (101, 102, 103)
    profile = python_only_profile({(pid, pid): [compute if i % 2 else locking for i in range(samples)]
                                   for pid in workers})
    records = []
    for pid in workers:
        ticks = np.arange(0.05, WINDOW_S, TICK_S)
        rec = record_with(pid, [(round(float(t), 3), pid, FLOCK, 3, 2, 0, "")
                                for i, t in enumerate(ticks) if i % 2 == 0],
                          fds={3: "/run/model.lock"}, file_ids={3: "fe:00:9"},
                          running_ticks={pid: [round(float(t), 3) for i, t in enumerate(ticks) if i % 2]})
        rec.ended_at = WINDOW_S
        rec.first[pid] = ThreadCounters(1.0, 0.0, 0, 0, 0)
        rec.last[pid] = ThreadCounters(1.0 + WINDOW_S / 2, 0.0, 0, 0, 0)
        records.append(rec)
    tree = tree_of(*records, parents={100: None, **{pid: 100 for pid in workers}})
    tree.file_locks = [(0.1, parse_locks("1: FLOCK  ADVISORY  WRITE 102 fe:00:9 0 EOF\n"
                                         "1: -> FLOCK  ADVISORY  WRITE 101 fe:00:9 0 EOF\n"))]
    service = build_service(profile, Categorizer(), tree)
    results, _ = run_service_checks(service)
    assert results.verdict.primary == "lock_contention"
    lock = next(f for f in results.findings if f.id == "lock_contention")
    assert "file lock on /run/model.lock" in lock.summary
    assert lock.sites[0].function == "forward" and lock.sites[0].line == 2
    assert "cross-process guard" in lock.advice[0]
    graph = build_wait_graph(service)
    assert graph is not None and graph.bottleneck == "r:file:fe:00:9"
    held = [e for e in graph.edges if e.source == graph.bottleneck and e.kind == "held_by"]
    assert held, "the holder the kernel named is drawn"


def test_gil_contention_needs_a_thread_that_ran():
    # The samples say two threads run Python (estimated), the counters that the process got no
    # CPU: nobody held the GIL, so nobody waited for it (the state letters, read while py-spy
    # woke the threads, said R). No kernel reader in this recording.
    app = "/nowhere/app.py"
    samples = int(WINDOW_S / TICK_S)
    profile = python_only_profile({
        (10, 11): [[py("handle", app, 10), py("spin", app, 20)]] * samples,
        (10, 12): [[py("handle", app, 10), py("spin", app, 21)]] * samples})
    rec = ProcRecord(pid=10, cores=2, cpu_quota_cores=None, started_at=0.0, ended_at=WINDOW_S)
    rec.state_samples = [(round(float(t), 3), tid, "R") for t in np.arange(0.05, WINDOW_S, TICK_S)
                         for tid in (11, 12)]
    for tid in (11, 12):
        rec.first[tid] = ThreadCounters(5.0, 0.0, 0, 0, 0)
        rec.last[tid] = ThreadCounters(5.0, 0.0, 0, 0, 0)
    results, _ = run_service_checks(build_service(profile, Categorizer(), tree_of(rec)))
    gil = next(f for f in results.findings if f.id == "gil_contention")
    assert gil.score == 0 and "no thread ran" in str(gil.evidence.get("counters_note"))


def test_idle_pool_workers_asleep_on_their_work_queue_are_no_knot():
    # A pool's workers wait for work all window; each Condition waiter sleeps on a futex of its
    # own, so the kernel sees two threads on two "locks" in an idle process: not a hang.
    lib = "/usr/lib/python3.11"
    waiting = [py("Thread.run", f"{lib}/threading.py", 982),
               py("_worker", f"{lib}/concurrent/futures/thread.py", 81),
               py("Queue.get", f"{lib}/queue.py", 171),
               py("Condition.wait", f"{lib}/threading.py", 327)]
    samples = int(WINDOW_S / TICK_S)
    profile = python_only_profile({(10, 11): [waiting] * samples, (10, 12): [waiting] * samples})
    rec = blocked_all_window(10, {11: 0x55AA00, 12: 0x55BB00})
    service = build_service(profile, Categorizer(), tree_of(rec))
    results, _ = run_service_checks(service)
    assert results.verdict.primary != "deadlock"
    graph = build_wait_graph(service)
    assert graph is None or not graph.knots


def test_threads_taking_turns_on_one_sidecar_pipe_name_the_sidecar_as_the_bottleneck():
    # Four request threads share one sidecar behind a lock: at any tick one reads the pipe
    # (the sidecar, the service's child, holds its write end), the other three wait on the lock.
    lib_app = "/srv/app.py"
    samples = int(WINDOW_S / TICK_S)
    tids = (11, 12, 13, 14)
    waiting = [py("handle", lib_app, 10), py("Sidecar.call", lib_app, 30)]
    reading = [py("handle", lib_app, 10), py("Sidecar.call", lib_app, 32)]
    profile = python_only_profile({(10, tid): [reading if (i + k) % 4 == 0 else waiting
                                               for i in range(samples)]
                                   for k, tid in enumerate(tids)})
    ticks = np.arange(0.05, WINDOW_S, TICK_S)
    observations = [(round(float(t), 3), tid, READ, 5, 0, 0, "") if (i + k) % 4 == 0 else
                    (round(float(t), 3), tid, FUTEX, 0x55AA00, SEM_WAIT_PRIVATE, 0, "")
                    for i, t in enumerate(ticks) for k, tid in enumerate(tids)]
    rec = record_with(10, observations, fds={5: "pipe:[777]"})
    rec.ended_at = WINDOW_S
    for tid in tids:
        rec.first[tid] = ThreadCounters(1.0, 0.0, 0, 0, 0)
        rec.last[tid] = ThreadCounters(1.02, 0.0, 0, 0, 0)
    tree = tree_of(rec, parents={10: None})
    tree.pipes = {777: {10: "r", 50: "w", 51: "w"}}
    tree.peers = {50: (10, "sh"), 51: (50, "sleep")}  # the sidecar, and its own child
    service = build_service(profile, Categorizer(), tree)
    results, _ = run_service_checks(service)
    lock = next(f for f in results.findings if f.id == "lock_contention")
    assert "pipe 777 (other end: sh 50)" in lock.summary
    assert lock.advice[0].startswith("The lock admits one request at a time to another process")
    graph = build_wait_graph(service)
    assert graph is not None and graph.bottleneck == "r:pipe:777"
    assert any(e.source == "r:pipe:777" and e.kind == "served_by" and e.target == "p:50"
               for e in graph.edges)
    assert "serves them one request at a time" in graph.summary


def native_profile(threads: dict[tuple[int, int], list[list[Frame]]]) -> Profile:
    profile = python_only_profile(threads)
    profile.native = True
    return profile


def mutex_service(library: str) -> tuple:
    """Four request threads whose stacks sit in pthread_mutex_lock under `library`, which the
    kernel saw asleep on one futex 80% of the window."""
    app = "/srv/app.py"
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    stack = [py("handle", app, 10), py("infer", app, 20), Frame("call", library, 0, True),
             Frame("pthread_mutex_lock", libc, 0, True), Frame("__lll_lock_wait", libc, 0, True)]
    samples = int(WINDOW_S / TICK_S)
    tids = (11, 12, 13, 14)
    profile = native_profile({(10, tid): [stack] * samples for tid in tids})
    ticks = np.arange(0.05, WINDOW_S, TICK_S)
    rec = record_with(10, [(round(float(t), 3), tid, FUTEX, 0x7F55AA00, SEM_WAIT_PRIVATE, 0, "")
                           for i, t in enumerate(ticks) if i % 5 for tid in tids],
                      running_ticks={tid: [round(float(t), 3) for i, t in enumerate(ticks) if not i % 5]
                                     for tid in tids})
    rec.ended_at = WINDOW_S
    for tid in tids:
        rec.first[tid] = ThreadCounters(1.0, 0.0, 0, 0, 0)
        rec.last[tid] = ThreadCounters(1.2, 0.0, 0, 0, 0)
    results, _ = run_service_checks(build_service(profile, Categorizer(), tree_of(rec)))
    return results


def test_threads_asleep_on_a_mutex_in_the_services_own_native_code_are_lock_contention():
    results = mutex_service("/srv/venv/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so")
    assert results.verdict.primary == "lock_contention"
    lock = next(f for f in results.findings if f.id == "lock_contention")
    assert lock.sites[0].function == "infer"


def test_a_mutex_inside_an_intra_op_pools_library_stays_the_pools_own():
    results = mutex_service("/srv/venv/lib/python3.11/site-packages/numpy.libs/libscipy_openblas64_-ff651d7f.so")
    lock = next((f for f in results.findings if f.id == "lock_contention"), None)
    assert lock is None or lock.score == 0


def test_a_wait_resumed_after_a_stop_is_read_from_the_kernel_function_it_sleeps_in():
    restart = 219
    rec = record_with(10, [(0.1, 11, restart, 0, 0, 0, "poll_schedule_timeout"),
                           (0.1, 12, restart, 0, 0, 0, "hrtimer_nanosleep")])
    view = kernel_view(rec, tree_of(rec))
    assert view is not None
    polled, slept = view.threads[11].top, view.threads[12].top
    assert polled is not None and polled.resource == ResourceKind.POLL
    assert slept is not None and slept.resource == ResourceKind.SLEEP


def test_a_reused_socket_descriptor_is_named_by_a_connection_that_was_looked_up():
    # A client's per-request connections reuse descriptor 5; the newest closed before its peer
    # was read, an earlier one's was: the wait is on a socket to that peer.
    rec = record_with(10, [(0.1, 11, READ, 5, 0, 0, "")], fds={5: "socket:[2]"})
    assert rec.kernel is not None
    rec.kernel.fd_sockets = {5: [1, 2]}
    tree = tree_of(rec)
    tree.sockets = {1: "tcp 127.0.0.1:9000"}
    obj = kernel_view(rec, tree).threads[11].top
    assert obj is not None and obj.label == "socket to 127.0.0.1:9000"


def test_a_locks_votes_at_a_line_that_takes_no_lock_go_to_the_line_that_does(tmp_path):
    # On a busy machine /proc ticks at the edge of a stretch of work beside `with lock:` vote
    # for the work's stack too: the lock is waited for where it is taken, the rest stays work.
    from diagnose.model.os_state import _at_the_acquire
    from diagnose.model.kernel_waits import WaitObject

    app = tmp_path / "svc.py"
    app.write_text("def handle(x):\n    with MODEL_LOCK:\n        y = forward(x)\n    return top(y)\n")
    frames = [Frame("handle", str(app), 2, False), Frame("handle", str(app), 4, False),
              Frame("worker", str(app), 1, False)]
    lock = WaitObject(ResourceKind.LOCK, "futex:1:0x10", "lock at 0x10", Blocking.HELD, "futex")
    other = WaitObject(ResourceKind.LOCK, "futex:1:0x20", "lock at 0x20", Blocking.HELD, "futex")
    stacks, sites = np.array([0, 1, 2]), np.array([0, 1, 2])
    kept = _at_the_acquire({0: 0, 1: 0, 2: 1}, [lock, other], stacks, sites, frames)
    assert kept == {0: 0, 2: 1}  # line 4 loses the model lock; a lock voted alone is kept


class _PollSlot:
    """The target's memory as the reader sees it: one pollfd struct naming `fd`."""

    def __init__(self, fd: int):
        self.fd = fd

    def read(self, _address: int, size: int) -> bytes:
        return struct.pack("<ihh", self.fd, 1, 0).ljust(size, b"\0")


def test_a_poll_slot_naming_a_new_connection_is_read_again_at_each_observation():
    """A blocking client with a timeout polls its socket from one stack slot request after
    request: each observation of that slot reads the connection it names now (real descriptors
    of this process, reused under one number), so a first connection that closed before its peer
    was looked up does not stand for every later one."""
    reader = KernelWaitReader(os.getpid(), KernelRecord())
    number = 900  # one descriptor number, as a client's reused one
    inodes = []
    for _ in range(2):
        ends = socket.socketpair()
        try:
            os.dup2(ends[0].fileno(), number)
            inodes.append(os.fstat(number).st_ino)
            reader._memory = _PollSlot(number)
            reader._resolve_poll(tid=1, fds_ptr=0x7FFC0000, nfds=1)
        finally:
            for end in ends:
                end.close()
    os.close(number)
    assert inodes[0] != inodes[1]
    assert reader.record.fd_sockets[number] == inodes
    assert reader.new_sockets == set(inodes)
    assert reader.record.fds[number] == f"socket:[{inodes[1]}]"


def test_an_event_loops_large_poll_set_is_read_once():
    reader = KernelWaitReader(os.getpid(), KernelRecord())
    reads = []

    class Memory:
        def read(self, address: int, size: int) -> bytes:
            reads.append(size)
            return b"\xff" * size  # every descriptor -1: none to resolve

    reader._memory = Memory()
    for _ in range(3):
        reader._resolve_poll(tid=1, fds_ptr=0x1000, nfds=REREAD_POLLED_FDS + 1)
    assert len(reads) == 1
