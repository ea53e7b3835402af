"""Threads py-spy names by pthread id (--nonblocking before CPython 3.11) are joined to their
/proc counters by kernel thread id, read from glibc's struct pthread in the process's memory.

The reads are of this test process's own memory (/proc/self/mem): its threads' pthread ids
(threading.get_ident) and kernel ids (threading.get_native_id) are both known here.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

from diagnose.collect.procfs import ProcRecord, TreeRecord
from diagnose.collect.pthread_ids import kernel_tids, name_threads, pthread_ids_in
from diagnose.readers.chrometrace import load_chrometrace, name_by_kernel_ids
from tests.replay import replay, replay_service


@pytest.fixture
def threads():
    """Three threads parked on an event: (pthread id, kernel id) each, the main thread's too."""
    stop = threading.Event()
    ids: list[tuple[int, int]] = []
    ready = threading.Barrier(4)

    def park() -> None:
        ids.append((threading.get_ident(), threading.get_native_id()))
        ready.wait()
        stop.wait()

    started = [threading.Thread(target=park) for _ in range(3)]
    for thread in started:
        thread.start()
    ready.wait()
    yield [*ids, (threading.get_ident(), threading.get_native_id())]
    stop.set()
    for thread in started:
        thread.join()


def own_tids() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


def test_each_pthread_id_names_its_own_kernel_thread(threads):
    named = kernel_tids(os.getpid(), [pthread for pthread, _ in threads], own_tids())
    assert named == dict(threads)


def test_an_id_that_names_no_thread_of_the_process_is_left_out(threads):
    """Another process's thread (a forked worker's pthread id) or one that exited: no guess."""
    pthread_ids = [pthread for pthread, _ in threads]
    others = own_tids() - {tid for _, tid in threads[:1]}
    named = kernel_tids(os.getpid(), pthread_ids, others)
    assert threads[0][0] not in named
    assert named == dict(threads[1:])


def test_an_unreadable_address_is_skipped(threads):
    named = kernel_tids(os.getpid(), [8192, *(pthread for pthread, _ in threads)], own_tids())
    assert 8192 not in named and len(named) == len(threads)


def chrometrace(pid: int, pthread_ids: list[int]) -> list[dict]:
    """py-spy's --threads recording of one process whose threads it named by pthread id: each
    thread seen at two instants in `work`."""
    events: list[dict] = []
    for ts in (1000, 11000):
        for index, pthread in enumerate(pthread_ids):
            for name, args in ((f"thread (0x{pthread:X}): worker-{index}", {}),
                               ("work", {"filename": "/srv/app.py", "line": 3 + ts // 11000})):
                events.append({"ph": "B", "ts": ts, "pid": pid, "tid": pthread, "name": name,
                               "args": args})
    for pthread in pthread_ids:
        for name in ("work", "thread"):
            events.append({"ph": "E", "ts": 21000, "pid": pid, "tid": pthread, "name": name,
                           "args": {}})
    return events


def test_a_recording_that_names_threads_by_pthread_id_reads_as_kernel_ids(threads, tmp_path):
    pid = os.getpid()
    pthread_ids = [pthread for pthread, _ in threads]
    path = tmp_path / "profile.chrometrace.json"
    path.write_text(json.dumps(chrometrace(pid, pthread_ids)))
    assert pthread_ids_in([path]) == set(pthread_ids)
    record = ProcRecord(pid=pid, cores=2, cpu_quota_cores=None, started_at=0.0)
    record.thread_names = {tid: "python" for tid in own_tids()}
    tree = TreeRecord(roots=[pid], records={pid: record})
    name_threads(tree, [path])
    assert record.pthread_tids == dict(threads)
    # kept in the recording: a replay renames the threads without the process
    replayed = TreeRecord.from_dict(json.loads(json.dumps(tree.to_dict())))
    profile = load_chrometrace(json.loads(path.read_text()), rate_hz=100)
    assert {t.tid for t in profile.threads} == set(pthread_ids)
    renamed = name_by_kernel_ids(profile, {pid: replayed.records[pid].pthread_tids})
    assert renamed == len(threads)
    assert {t.tid for t in profile.threads} == {tid for _, tid in threads}
    assert all(segment[0] == track.tid for track in profile.threads for segment in track.segments)


def test_a_recording_with_kernel_ids_reads_no_memory(tmp_path):
    path = tmp_path / "profile.chrometrace.json"
    path.write_text(json.dumps([{"ph": "B", "ts": 1, "pid": 7, "tid": 8,
                                 "name": "thread (8): MainThread", "args": {}}]))
    assert pthread_ids_in([path]) == set()


def test_a_pool_thread_kept_off_the_cores_still_competes_for_them(tmp_path):
    """blas_fanout on CPython 3.6 (8 request threads calling OpenBLAS), attached while a
    neighbour spun 4 threads at nice -20 (fixtures/recorded/blas_fanout_starved): py-spy named
    the threads by pthread id, the attach read their kernel ids, and OpenBLAS's one pool thread,
    runnable all window, is the fan-out's pool: 8 request x 1 intra-op."""
    service = replay_service("blas_fanout_starved", "py36_pthread_ids_beside_a_neighbour", tmp_path)
    analysis = service.processes[0].analysis
    assert analysis.os is not None
    assert set(analysis.threads["tid"]) <= set(analysis.os.threads)
    assert analysis.working_native_threads == 1
    (tmp_path / "report").mkdir()
    report = replay("blas_fanout_starved", "py36_pthread_ids_beside_a_neighbour", tmp_path / "report")
    assert report.verdict.primary == "scheduler_overhead", report.verdict.headline
    fan = next(f for f in report.findings if f.id == "scheduler_overhead")
    assert fan.evidence["intra_op_threads"] == 1 and fan.evidence["request_threads"] == 8


def test_threads_named_by_pthread_id_with_no_map_invent_no_native_pool(tmp_path):
    """CI's recording of the same attach made before the attach read the map: no sampled
    thread's id is a /proc tid, so every /proc thread looks native. Counted by run-queue wait,
    the starved request threads read as 'a pool of 9 threads'; by their own CPU, none works."""
    service = replay_service("blas_fanout_starved", "py36_beside_the_suite", tmp_path)
    analysis = service.processes[0].analysis
    assert analysis.os is not None and set(analysis.threads["tid"]).isdisjoint(analysis.os.threads)
    assert analysis.working_native_threads == 0
