"""Synthetic stacks: native waits inside shared libraries are waits; the OS counters overrule a
CPU finding the samples alone would make; process roles come from the work each process does."""

from __future__ import annotations

import numpy as np

from diagnose.checks import cpu_bound, gil_contention
from diagnose.checks.engine import load_check_settings
from diagnose.classify.categories import Categorizer
from diagnose.classify.state import classify_stack
from diagnose.model.analysis import analysis_of, classify_profile
from diagnose.model.os_summary import ProcessOS, ProcThread
from diagnose.samples.profile import Frame, Profile, ThreadTrack
from diagnose.model.service import ProcessView, assign_roles

LIB = "/usr/lib/python3.11"
SITE = "/srv/venv/lib/python3.11/site-packages"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
LIBPYTHON = "/usr/lib/libpython3.11.so.1.0"
CYGRPC = f"{SITE}/grpc/_cython/cygrpc.cpython-311-x86_64-linux-gnu.so"
LIBUV = "/usr/lib/x86_64-linux-gnu/libuv.so.1"
BLAS = f"{SITE}/numpy.libs/libscipy_openblas64_-32a4b2a6.so"
WINDOW_S = 10.0
SETTINGS = load_check_settings()


def py(function, file, line=1):
    return Frame(function, file, line, False)


def native(function, lib):
    return Frame(function, lib, 0, True)


def addr(lib, n=0):
    return native(f"0x7f00{n:04x}", lib)


# -- stacks -------------------------------------------------------------------------------------

POOL_WORKER = [py("Thread._bootstrap", f"{LIB}/threading.py", 1002),
               py("Thread._bootstrap_inner", f"{LIB}/threading.py", 1045),
               py("Thread.run", f"{LIB}/threading.py", 982),
               py("_worker", f"{LIB}/concurrent/futures/thread.py", 83),
               py("_WorkItem.run", f"{LIB}/concurrent/futures/thread.py", 58),
               py("_unary_response_in_pool", f"{SITE}/grpc/_server.py", 788),
               py("Servicer.predict", "/srv/app/server.py", 95)]
HANDLER_ON_LOCK = POOL_WORKER + [py("Replicas.predict", "/srv/app/server.py", 83),
                                 native("lock_PyThread_acquire_lock", LIBPYTHON),
                                 native("PyThread_acquire_lock_timed", LIBPYTHON), addr(LIBC)]
HANDLER_COMPUTING = POOL_WORKER + [py("Replicas.predict", "/srv/app/server.py", 84),
                                   py("Model.forward", "/srv/app/server.py", 64)]
# A gRPC client call blocked in the C-core: an unnamed frame of the extension over a condvar.
CLIENT_CALL = [py("<module>", "/srv/app/exporter.py", 40), py("export", "/srv/app/exporter.py", 20),
               py("_UnaryUnaryMultiCallable.__call__", f"{SITE}/grpc/_channel.py", 1165),
               py("_UnaryUnaryMultiCallable._blocking", f"{SITE}/grpc/_channel.py", 1152)]
CQ_CONDVAR_WAIT = CLIENT_CALL + [addr(CYGRPC, 1), addr(CYGRPC, 2),
                                 native("pthread_cond_timedwait", LIBC), addr(LIBC, 3)]
CQ_EPOLL_WAIT = CLIENT_CALL + [addr(CYGRPC, 1), addr(CYGRPC, 2), native("epoll_wait", LIBC)]
# The same call caught in a leaf no table knows (absl's futex through `syscall`): the frames alone
# say "running native code".
CQ_OPAQUE = CLIENT_CALL + [addr(CYGRPC, 1), native("syscall", LIBC)]
MASTER_SELECT = [py("<module>", "/srv/venv/bin/gunicorn", 6),
                 py("Arbiter.run", f"{SITE}/gunicorn/arbiter.py", 257),
                 py("Arbiter.sleep", f"{SITE}/gunicorn/arbiter.py", 360),
                 native("select", LIBC)]


def test_a_condvar_wait_in_an_extensions_own_code_is_a_wait_not_the_gil():
    result = classify_stack(CQ_CONDVAR_WAIT)
    assert (result.state, result.wait_kind) == ("io", "io")


def test_a_completion_queue_epoll_wait_inside_a_call_is_a_wait():
    assert classify_stack(CQ_EPOLL_WAIT).state == "io"


def test_a_library_thread_polling_in_its_own_loop_is_idle():
    spin = [py("Thread.run", f"{LIB}/threading.py", 982),
            py("channel_spin", f"{SITE}/grpc/_channel.py", 1725),
            addr(CYGRPC, 1), native("epoll_wait", LIBC)]
    assert classify_stack(spin).state == "idle"


def test_futex_and_semaphore_waits_under_any_shared_library_are_waits():
    for leaf in ("uv__io_poll", "sem_wait", "futex_wait", "pthread_cond_wait"):
        frames = CLIENT_CALL[:2] + [native("uv_run", LIBUV), native(leaf, LIBC if leaf != "uv__io_poll" else LIBUV)]
        if leaf == "uv__io_poll":
            frames.append(native("epoll_wait", LIBC))
        assert classify_stack(frames).state == "io", leaf


def test_running_code_inside_a_library_is_still_native():
    frames = CLIENT_CALL[:2] + [native("uv_run", LIBUV), native("uv__run_timers", LIBUV)]
    assert classify_stack(frames).state == "native"


def test_the_gil_retaken_through_libpython_is_still_a_gil_wait():
    frames = CLIENT_CALL + [addr(CYGRPC, 1), native("PyEval_RestoreThread", LIBPYTHON),
                            native("take_gil", LIBPYTHON), native("pthread_cond_timedwait", LIBC)]
    assert classify_stack(frames).state == "gil"


def test_openblas_waits_stay_the_pools_own_not_io():
    mutex = [py("Model.forward", "/srv/m.py", 9), native("exec_blas", BLAS),
             native("pthread_mutex_lock", LIBC), native("__lll_lock_wait", LIBC)]
    assert (classify_stack(mutex).state, classify_stack(mutex).wait_kind) == ("native", "native_mutex")
    condvar = [py("Model.forward", "/srv/m.py", 9), native("exec_blas", BLAS),
               native("pthread_cond_wait", LIBC)]
    assert classify_stack(condvar).state != "io"


# -- processes ----------------------------------------------------------------------------------

def process_os(cpu_by_tid: dict) -> ProcessOS:
    threads = {tid: ProcThread(tid=tid, cpu_s=cpu) for tid, cpu in cpu_by_tid.items()}
    cpu = float(sum(cpu_by_tid.values()))
    return ProcessOS(window_s=WINDOW_S, cores=2, cpu_quota_cores=None, threads_max=len(threads),
                     cpu_s=cpu, cpu_utilization=cpu / (2 * WINDOW_S), runqueue_wait_s=None,
                     runqueue_ratio=None, mean_runnable=0.0, involuntary_ctx_per_s=None,
                     voluntary_ctx_per_s=None, observer_stop_share=0.0, rss_start=None,
                     rss_end=None, rss_slope_bytes_per_s=None, rss_fit_r2=None, threads=threads)


def build(processes):
    """processes: [(pid, ppid, cmdline, {tid: ([(frames, samples)...], cpu seconds)})] ->
    ProcessViews with their analyses (one profile, classified once, as build_service does)."""
    profile = Profile(native=True, interval_s=0.05)
    for pid, _, _, threads in processes:
        for tid, (stacks, _) in threads.items():
            ids = []
            for frames, count in stacks:
                sid = profile.intern_stack(tuple(profile.intern_frame(f) for f in frames))
                ids += [sid] * count
            profile.threads.append(ThreadTrack(tid, f"t{tid}", np.array(ids, dtype=np.int32),
                                               np.full(len(ids), 0.05), pid=pid))
    stacks = classify_profile(profile, Categorizer())
    views = []
    for pid, ppid, cmdline, threads in processes:
        os_ = process_os({tid: cpu for tid, (_, cpu) in threads.items()})
        analysis = analysis_of(profile.of_process(pid), stacks, None, None, os_)
        views.append(ProcessView(pid, ppid, "worker", list(cmdline), analysis))
    return views


def locked_server(pid=100, ppid=1):
    """16 handler threads: one computes, the others queue on the model lock; ~1 core."""
    threads = {1000: ([(HANDLER_COMPUTING, 180), (HANDLER_ON_LOCK, 20)], 9.0)}
    for tid in range(1001, 1016):
        threads[tid] = ([(HANDLER_ON_LOCK, 185), (HANDLER_COMPUTING, 15)], 0.1)
    return (pid, ppid, ("python", "server.py"), threads)


def exporter(pid=200, ppid=100, stack=CQ_CONDVAR_WAIT, cpu=0.04):
    return (pid, ppid, ("python", "server.py", "--exporter"), {2000: ([(stack, 200)], cpu)})


def roles(views):
    assign_roles(views)
    return {v.pid: v.role for v in views}


def test_a_parent_whose_handlers_queue_on_a_lock_is_a_worker_and_its_idle_child_a_helper():
    views = build([locked_server(), exporter()])
    assert views[0].busy_share < 0.15  # rarely busy: the old rule called it a master
    assert roles(views) == {100: "worker", 200: "helper"}


def test_a_child_the_samples_call_busy_is_a_helper_when_proc_says_it_barely_ran():
    views = build([locked_server(), exporter(stack=CQ_OPAQUE, cpu=0.3)])
    assert views[1].busy_share > 0.9
    assert roles(views) == {100: "worker", 200: "helper"}


def test_a_child_whose_busy_samples_proc_confirms_is_a_worker():
    views = build([locked_server(), exporter(stack=CQ_OPAQUE, cpu=9.5)])
    assert roles(views)[200] == "worker"


def test_a_supervisor_with_no_request_threads_and_no_cpu_is_the_master():
    master = (100, 1, ("gunicorn", "app:app"), {1000: ([(MASTER_SELECT, 200)], 0.05)})
    worker = locked_server(pid=101, ppid=100)
    idle_twin = (102, 100, worker[2], {1100: ([(MASTER_SELECT[:1] + [
        py("SyncWorker.wait", f"{SITE}/gunicorn/workers/sync.py", 36), native("select", LIBC)], 200)], 0.01)})
    assert roles(build([master, worker, idle_twin])) == {100: "master", 101: "worker", 102: "worker"}


def test_a_parent_whose_one_thread_waits_on_a_lock_at_no_cpu_is_the_master():
    # A pool's parent: its main thread waits for its children (read as a lock wait), no other
    # thread of it handles requests, /proc saw it idle: nobody in it to contend with.
    waiting = [py("<module>", "/srv/app/pool.py", 90), py("run_processes", "/srv/app/pool.py", 213),
               native("lock_PyThread_acquire_lock", LIBPYTHON),
               native("PyThread_acquire_lock_timed", LIBPYTHON), addr(LIBC)]
    parent = (100, 1, ("python", "pool.py"), {1000: ([(waiting, 200)], 0.01)})
    child = locked_server(pid=101, ppid=100)
    assert roles(build([parent, child])) == {100: "master", 101: "worker"}


def test_a_parent_whose_two_threads_contend_on_a_lock_at_no_cpu_is_a_worker():
    # A lock held across I/O: each thread in turn holds it asleep in a read while the other
    # waits for it; neither uses a core.
    holding = POOL_WORKER + [py("Replicas.predict", "/srv/app/server.py", 85), native("recv", LIBC)]
    parent = (100, 1, ("python", "server.py"),
              {tid: ([(HANDLER_ON_LOCK, 100), (holding, 100)], 0.01) for tid in (1000, 1001)})
    child = exporter(pid=200, ppid=100)
    assert roles(build([parent, child]))[100] == "worker"


# -- counters against samples -------------------------------------------------------------------

def test_counters_overrule_a_cpu_bound_finding_at_near_zero_cores():
    (view,) = build([(200, None, ("python", "client.py"),
                      {tid: ([(CQ_OPAQUE, 200)], 0.2) for tid in (2000, 2001, 2002)})])
    found = cpu_bound.run(view.analysis, SETTINGS["cpu_bound"])
    assert found.score < 10, found.summary
    assert found.evidence["measured_cores"] == 0.06
    assert found.evidence["sampled_cores"] == 3.0
    assert "overrule" in found.summary and "0.06" in found.summary and "3.00" in found.summary


def test_cpu_bound_stands_where_the_counters_agree():
    (view,) = build([(200, None, ("python", "client.py"),
                      {tid: ([(CQ_OPAQUE, 200)], 9.0) for tid in (2000, 2001)})])
    found = cpu_bound.run(view.analysis, SETTINGS["cpu_bound"])
    assert found.score >= 75
    assert "counters_note" not in found.evidence


def test_gil_contention_needs_a_holder_running_on_a_core():
    gil_wait = POOL_WORKER + [py("Replicas.predict", "/srv/app/server.py", 84),
                              native("PyEval_RestoreThread", LIBPYTHON), native("take_gil", LIBPYTHON),
                              native("pthread_cond_timedwait", LIBC)]
    threads = {tid: ([(gil_wait, 150), (HANDLER_COMPUTING, 50)], cpu)
               for tid, cpu in ((3000, 0.1), (3001, 0.1), (3002, 0.1))}
    (quiet,) = build([(300, None, ("python", "s.py"), threads)])
    found = gil_contention.run(quiet.analysis, SETTINGS["gil_contention"])
    assert "overrule" in found.summary and found.score < 20
    busy = {tid: (stacks, 6.0) for tid, (stacks, _) in threads.items()}
    (loaded,) = build([(300, None, ("python", "s.py"), busy)])
    assert gil_contention.run(loaded.analysis, SETTINGS["gil_contention"]).score >= 75


def test_an_unnamed_native_leaf_of_a_thread_proc_saw_asleep_is_a_wait():
    from diagnose.model.os_state import settle_with_os_state

    (view,) = build([(200, None, ("python", "client.py"), {2000: ([(CQ_OPAQUE, 200)], 0.05)})])
    assert set(view.analysis.samples.loc[:, "state"]) == {"native"}  # the frames alone: running native
    asleep = view.analysis.os.threads[2000]
    os_ = process_os({2000: 0.05})
    os_.threads[2000] = ProcThread(tid=2000, cpu_s=asleep.cpu_s, state_counts={"S": 95, "R": 5})
    settled = settle_with_os_state(view.analysis.samples, os_)
    assert set(settled.loc[:, "state"]) == {"io"}
    running = process_os({2000: 9.0})
    running.threads[2000] = ProcThread(tid=2000, cpu_s=9.0, state_counts={"R": 90, "S": 10})
    assert set(settle_with_os_state(view.analysis.samples, running).loc[:, "state"]) == {"native"}


def test_a_child_at_a_few_hundredths_of_a_core_beside_a_busy_server_is_a_helper():
    # 0.6 s over 10 s = 0.06 cores, beside a server at ~1 core
    views = build([locked_server(), exporter(stack=CQ_OPAQUE, cpu=0.6)])
    assert roles(views) == {100: "worker", 200: "helper"}
