"""Synthetic stacks: supervisors' waits are idle, event loops are recognised and measured."""

from __future__ import annotations

from diagnose.classify.state import classify_stack
from diagnose.model.event_loops import classify_loop_stack, frame_owner
from diagnose.readers.loaders import load_speedscope
from diagnose.samples.profile import Frame

LIB = "/usr/lib/python3.11"
SITE = "/srv/venv/lib/python3.11/site-packages"


def py(function, file, line=1):
    return Frame(function, file, line, False)


def native(function, lib="/usr/lib/libpython3.11.so.1.0"):
    return Frame(function, lib, 0, True)


LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
GUNICORN_MAIN = [py("<module>", "/srv/venv/bin/gunicorn", 6), py("run", f"{SITE}/gunicorn/app/wsgiapp.py", 66),
                 py("Arbiter.run", f"{SITE}/gunicorn/arbiter.py", 257)]


def test_gunicorn_arbiter_waiting_for_signals_is_idle_not_a_lock_wait():
    frames = GUNICORN_MAIN + [py("Arbiter.wait_for_signals", f"{SITE}/gunicorn/arbiter.py", 425),
                              native("_queue_SimpleQueue_get", "_queuemodule.c.h"),
                              native("PyThread_acquire_lock_timed"), native("0x7f00", LIBC)]
    assert classify_stack(frames).state == "idle"


def test_a_lock_wait_inside_a_forked_gunicorn_worker_is_still_a_lock_wait():
    # A worker's stack starts in the arbiter's frames (it was forked there).
    frames = GUNICORN_MAIN + [py("Arbiter.spawn_worker", f"{SITE}/gunicorn/arbiter.py", 752),
                              py("SyncWorker.handle_request", f"{SITE}/gunicorn/workers/sync.py", 184),
                              py("app", "/srv/app/service.py", 30),
                              py("Model.predict", "/srv/app/service.py", 12),
                              native("lock_PyThread_acquire_lock"), native("PyThread_acquire_lock_timed"),
                              native("0x7f00", LIBC)]
    result = classify_stack(frames)
    assert (result.state, result.wait_kind) == ("lock", "lock")


def test_sync_worker_waiting_in_select_through_a_c_source_frame_is_idle():
    frames = GUNICORN_MAIN + [py("SyncWorker.run_for_one", f"{SITE}/gunicorn/workers/sync.py", 68),
                              py("SyncWorker.wait", f"{SITE}/gunicorn/workers/sync.py", 36),
                              native("select_select_impl", "selectmodule.c"), native("select", LIBC)]
    assert classify_stack(frames).state == "idle"


def test_stdlib_loop_waiting_in_epoll_through_selectmodule_is_idle():
    frames = [py("run", f"{LIB}/asyncio/runners.py", 190),
              py("BaseEventLoop.run_forever", f"{LIB}/asyncio/base_events.py", 607),
              py("BaseEventLoop._run_once", f"{LIB}/asyncio/base_events.py", 1884),
              py("EpollSelector.select", f"{LIB}/selectors.py", 468),
              native("select_epoll_poll_impl", "selectmodule.c"), native("epoll_wait", LIBC)]
    assert classify_stack(frames).state == "idle"
    loop = classify_loop_stack(frames, tuple(range(len(frames))), "idle")
    assert (loop.flavor, loop.segment) == ("asyncio", "idle")


def test_uvloop_thread_idle_in_the_runner_is_an_idle_loop():
    frames = [py("<module>", "/srv/app/main.py"), py("Server.run", f"{SITE}/uvicorn/server.py", 67),
              py("run", f"{LIB}/asyncio/runners.py", 195), py("Runner.run", f"{LIB}/asyncio/runners.py", 118),
              native("0x55aa", f"{SITE}/uvloop/loop.cpython-311-x86_64-linux-gnu.so"),
              native("epoll_wait", LIBC)]
    assert classify_stack(frames).state == "idle"
    loop = classify_loop_stack(frames, tuple(range(len(frames))), "idle")
    assert (loop.flavor, loop.segment) == ("uvloop", "idle")


def test_an_async_endpoint_computing_on_a_uvloop_thread_is_app_work_named_by_its_coroutine():
    frames = [py("Server.run", f"{SITE}/uvicorn/server.py", 67),
              py("Runner.run", f"{LIB}/asyncio/runners.py", 118),
              py("RequestResponseCycle.run_asgi", f"{SITE}/uvicorn/protocols/http/httptools_impl.py", 416),
              py("run_endpoint_function", f"{SITE}/fastapi/routing.py", 212),
              py("predict", "/srv/app/api.py", 40), py("Model.forward", "/srv/app/model.py", 9),
              py("dot", f"{SITE}/numpy/core/multiarray.py", 5)]
    loop = classify_loop_stack(frames, tuple(range(len(frames))), "native")
    assert loop.segment == "app"
    assert frames[loop.coroutine].function == "predict"
    assert frames[loop.call_site].function == "Model.forward"
    assert loop.callee == "Model.forward"  # what to move off the loop


def test_framework_frames_on_the_loop_are_not_the_app_blocking_it():
    frames = [py("BaseEventLoop._run_once", f"{LIB}/asyncio/base_events.py", 1900),
              py("Handle._run", f"{LIB}/asyncio/events.py", 84),
              py("H11Protocol.data_received", f"{SITE}/uvicorn/protocols/http/h11_impl.py", 200)]
    loop = classify_loop_stack(frames, tuple(range(len(frames))), "python")
    assert loop.segment == "framework"


def test_a_thread_without_a_loop_has_no_loop_stack():
    frames = [py("Thread._bootstrap", f"{LIB}/threading.py"), py("worker", "/srv/app/w.py")]
    assert classify_loop_stack(frames, (0, 1), "python") is None


def test_frame_owner_separates_stdlib_framework_and_app():
    assert frame_owner(py("Handle._run", f"{LIB}/asyncio/events.py")) == "runtime"
    assert frame_owner(py("Starlette.__call__", f"{SITE}/starlette/applications.py")) == "framework"
    assert frame_owner(py("predict", "/srv/app/api.py")) == "app"


def test_speedscope_profiles_of_subprocesses_carry_their_pid():
    data = {"shared": {"frames": [{"name": "work", "file": "/srv/app/w.py", "line": 3}]},
            "profiles": [{"type": "sampled", "name": 'Process 4340 Thread 4341 "MainThread"',
                          "unit": "seconds", "samples": [[0], [0]], "weights": [0.1, 0.1]},
                         {"type": "sampled", "name": 'Thread 77 "plain"', "unit": "seconds",
                          "samples": [[0]], "weights": [0.1]}]}
    profile = load_speedscope(data)
    assert [(t.pid, t.tid, t.name) for t in profile.threads] == [(4340, 4341, "MainThread"),
                                                               (None, 77, "plain")]
    assert profile.pids == [4340]
    assert [t.tid for t in profile.of_process(4340).threads] == [4341]


def test_a_torn_frame_without_line_or_path_does_not_make_a_profile_native():
    from diagnose.readers.frames import is_native_frame
    assert not is_native_frame("__init__", "__init__", 0)
    assert is_native_frame("_PyEval_EvalFrameDefault", "/usr/bin/python3.11", 0)
    assert is_native_frame("select_poll_poll_impl", "Modules/selectmodule.c", 681)
