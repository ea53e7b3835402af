"""A process pool whose CPU goes to moving its tasks, not running them (checks/pool_transfer.py,
model/pool_transfer.py): the requests are told to send the pool less with each task, at the line
they wait on it; pools busy in their tasks say nothing of the kind."""

from __future__ import annotations

import pytest

from diagnose.checks.pool_transfer import LARGE_READ_BYTES, Settings, pool_transfer
from diagnose.collect.procfs import ProcRecord
from diagnose.model.os_summary import summarize
from diagnose.model.pool_transfer import PoolTransfer, in_transport
from diagnose.model.process_pipeline import Framework, ProcessPipeline
from diagnose.model.event_loops import classify_loop_stack
from diagnose.samples.profile import Frame, own_frames_start
from diagnose.report.model import Report
from diagnose.vocab import INFO_SCORE
from tests.conftest import REPO, marker_line
from tests.replay import replay

SERVER = REPO / "fixtures" / "servers" / "pool_transfer.py"
ASGI_SERVER = REPO / "fixtures" / "servers" / "asgi_pool_offload.py"
LIB = "/usr/lib/python3.11"
APP = "/srv/app/service.py"


def py(function: str, file: str = APP, line: int = 1) -> Frame:
    return Frame(function, file, line, False)


# a ProcessPoolExecutor worker: its loop, then what it runs
LOOP = [py("BaseProcess._bootstrap", f"{LIB}/multiprocessing/process.py", 314),
        py("_process_worker", f"{LIB}/concurrent/futures/process.py", 249)]
RECEIVING = LOOP + [py("Queue.get", f"{LIB}/multiprocessing/queues.py", 103),
                    py("Connection._recv", f"{LIB}/multiprocessing/connection.py", 395),
                    Frame("read", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0, True)]
TASK = LOOP + [py("brightness", APP, 31), py("_mean", "/srv/venv/site-packages/numpy/_core/_methods.py", 120)]
COLLATE = LOOP[:1] + [py("_worker_loop", "/srv/venv/site-packages/torch/utils/data/_utils/worker.py", 308),
                      py("default_collate", "/srv/venv/site-packages/torch/utils/data/_utils/collate.py", 150)]


# the same worker forked from inside a coroutine: the parent's event loop and handler outer of
# the process's entry, copied at the fork
FORKED_FROM_A_COROUTINE = [
    py("run", f"{LIB}/asyncio/runners.py", 118), py("BaseEventLoop._run_once", f"{LIB}/asyncio/base_events.py", 1922),
    py("Handle._run", f"{LIB}/asyncio/events.py", 80), py("app", APP, 44),
    py("ProcessPoolExecutor.submit", f"{LIB}/concurrent/futures/process.py", 809),
    py("Popen._launch", f"{LIB}/multiprocessing/popen_fork.py", 71)] + RECEIVING


def test_a_forked_workers_own_frames_start_at_its_process_entry():
    assert own_frames_start(FORKED_FROM_A_COROUTINE) == 6
    assert own_frames_start(RECEIVING) == 0 and own_frames_start(TASK[2:]) == 0


def test_the_event_loop_a_forked_worker_keeps_from_its_parent_is_not_its_own():
    """A pool worker forked from a coroutine's run_in_executor read as an event loop blocked in
    the coroutine 100% of the time, and was advised to move the submit off the loop."""
    ids = tuple(range(len(FORKED_FROM_A_COROUTINE)))
    assert classify_loop_stack(FORKED_FROM_A_COROUTINE, ids, "python") is None
    assert classify_loop_stack(FORKED_FROM_A_COROUTINE[:5], ids[:5], "python") is not None


@pytest.mark.parametrize(("frames", "moving"), [
    (RECEIVING, True),  # reading the task from the pipe, under the worker loop
    (TASK, False),  # the task's own frame runs
    (COLLATE, False),  # a DataLoader's collate is library work, not transport
    (RECEIVING[2:], False),  # no worker loop: not a pool worker's stack
])
def test_a_workers_stack_is_transport_when_only_the_pools_own_code_runs_under_its_loop(frames, moving):
    assert in_transport(frames) is moving


def _transfer(per_read: int, transport_s: float = 4.0, pool_s: float = 4.5, starved: float = 0.9) -> PoolTransfer:
    pipeline = ProcessPipeline(
        framework=Framework.PROCESS_POOL, consumer_pid=10, consumer_thread="worker-0", consumer_site=None,
        consumer_busy=1 - starved, consumer_starved=starved, producer_pids=(11, 12), producer_busy=0.4,
        producer_busy_source="proc", entry=None, transform=None, consumer_samples=200)
    return PoolTransfer(pipeline=pipeline, parent_transport_cpu_s=2.0, worker_cpu_s=pool_s - 2.0,
                        worker_transport_cpu_s=transport_s - 2.0, worker_busy_samples=100,
                        worker_transport_samples=90, worker_read_bytes=per_read * 1000, worker_read_calls=1000,
                        window_s=10.0)


def test_tasks_that_arrive_in_large_blocks_are_told_to_carry_less_small_ones_to_be_batched():
    large = pool_transfer(_transfer(per_read=64 * 1024), Settings())
    small = pool_transfer(_transfer(per_read=LARGE_READ_BYTES // 64), Settings())
    assert large is not None and small is not None
    assert large.advice[0].startswith("Send the pool less with each task")
    assert small.advice[0].startswith("Send the pool fewer, larger tasks") and "chunksize=" in small.advice[0]


def test_a_pool_whose_cpu_goes_to_its_tasks_scores_nothing():
    busy_in_tasks = pool_transfer(_transfer(per_read=64 * 1024, transport_s=1.0, pool_s=4.5), Settings())
    assert busy_in_tasks is not None and busy_in_tasks.score == 0


def test_requests_that_hardly_wait_on_the_pool_score_nothing_whatever_it_moves():
    found = pool_transfer(_transfer(per_read=64 * 1024, starved=0.2), Settings())
    assert found is not None and found.score == 0


def test_the_workers_read_bytes_and_calls_are_the_counters_change_over_the_window():
    record = ProcRecord(pid=1, cores=2, cpu_quota_cores=None, started_at=0.0)
    record.read_syscalls, record.read_chars = [100, 1100], [5_000, 65_541_000]
    record.write_syscalls = [0, 0]
    record.ended_at = 10.0
    os_ = summarize(record)
    assert os_ is not None and os_.read_bytes == 65_536_000 and os_.read_calls == 1000
    assert os_.bytes_per_read == 65_536 and os_.read_bytes_per_s == pytest.approx(65_536_000 / os_.window_s)


@pytest.fixture(scope="module")
def whole_frame(tmp_path_factory: pytest.TempPathFactory) -> Report:
    return replay("pool_transfer", "whole_frame_gthread", tmp_path_factory.mktemp("whole_frame"))


def test_a_whole_array_sent_to_a_process_pool_per_request_is_the_verdict(whole_frame):
    """gunicorn gthread, an 8 MB frame submitted per request to a ProcessPoolExecutor(2) for a task
    of microseconds: the parent's feeder thread and the workers' reads are the pool's CPU. Before
    the check the verdict was kernel_work at multiprocessing's ForkingPickler.dumps, "reuse the
    buffers"; the pool sent a 64th of the frame served 23x the requests."""
    report = whole_frame
    assert report.verdict.primary == "pool_transfer", report.verdict.headline
    found = report.findings[0]
    assert (found.sites[0].function, found.sites[0].line) == ("score", marker_line(SERVER, "whole-frame-to-pool"))
    assert report.verdict.first_advice[0].startswith("Send the pool less with each task at score")
    assert found.evidence["transport_share"] >= 0.9 and found.evidence["worker_read_mb_per_s"] > 100
    assert found.predicted_gain is not None and found.predicted_gain >= 5



def test_a_pool_workers_busy_time_in_the_transport_is_not_code_to_vectorise(whole_frame):
    """cpu_bound in the pool's workers: their hottest function is multiprocessing's (the call
    queue's lock, the pipe's reads). It was advised to be vectorised, with more processes' gain."""
    busy = next(f for f in whole_frame.findings if f.id == "cpu_bound")
    assert "process pool's transport" in busy.advice[0] and "Vectorise" not in busy.advice[0]
    assert busy.predicted_gain == 1.0


def test_after_sending_the_pool_only_what_its_task_reads_the_transfer_still_leads_with_less_to_gain(
        whole_frame, tmp_path):
    """The same service sending the 128 KB its task reads (SEND=sample). Its pool workers ran so
    little beside the parent that they read as helpers; their worker loop still makes them the
    pool. The task in the request thread measured 1.6-1.9x more again."""
    before = whole_frame.findings[0]
    report = replay("pool_transfer", "sample_sent_gthread", tmp_path)
    assert report.verdict.primary == "pool_transfer", report.verdict.headline
    found = report.findings[0]
    assert (found.sites[0].function, found.sites[0].line) == ("score", marker_line(SERVER, "sample-to-pool"))
    assert "run the task in the request thread" in found.advice[0]
    assert found.predicted_gain is not None and before.predicted_gain is not None
    assert 1.2 < found.predicted_gain < before.predicted_gain


def test_a_task_per_small_record_is_told_to_send_fewer_larger_tasks_not_kernel_work(tmp_path):
    """`/rank`: 64 small records a request, each its own task (chunksize 1). The workers read 139
    bytes a call. kernel_work (41% of the CPU, at Connection._recv and the line that maps the
    tasks) names the same line: the pool's transfers, earlier in the causal order, are the name.
    16 records a task measured 7.7x."""
    report = replay("pool_transfer", "task_per_candidate_gthread", tmp_path)
    assert report.verdict.primary == "pool_transfer", report.verdict.headline
    found = report.findings[0]
    assert (found.sites[0].function, found.sites[0].line) == ("rank", marker_line(SERVER, "task-per-candidate"))
    assert found.advice[0].startswith("Send the pool fewer, larger tasks at rank") and "chunksize=" in found.advice[0]
    assert found.evidence["bytes_per_read"] < LARGE_READ_BYTES


def test_request_tasks_awaiting_a_process_pools_futures_are_its_consumer(tmp_path):
    """uvicorn, `await loop.run_in_executor(ProcessPoolExecutor(2), count_heavy, document)` with
    20,000 records for a task that reads 200: no thread of the parent waits on the pool (the
    tasks are suspended), the task reader says they waited there. Before, the pool's workers read
    as event loops blocked in the coroutine their stacks keep from the fork (event_loop_blocked,
    "move ProcessPoolExecutor.submit off the event loop"); 200 records sent measured 18.7x."""
    report = replay("pool_transfer", "document_to_pool_uvicorn", tmp_path)
    assert report.verdict.primary == "pool_transfer", report.verdict.headline
    found = report.findings[0]
    assert (found.sites[0].function, found.sites[0].line) == ("app", marker_line(ASGI_SERVER, "document-to-pool"))
    assert found.advice[0].startswith("Send the pool less with each task at app")
    assert "asyncio.to_thread" in found.advice[0] and "request thread" not in found.advice[0]
    assert not any(f.id == "event_loop_blocked" and f.score >= INFO_SCORE for f in report.findings)


@pytest.mark.parametrize("name", ["mp_pool_doing_its_tasks", "dataloader_doing_its_tasks"])
def test_pools_busy_in_their_tasks_stay_a_stage_to_widen_not_a_transfer(name, tmp_path):
    """fixtures/workloads/mp_pipeline.py and dataloader_job.py: the workers decode and augment;
    the transport is 11-31% of the pool's CPU."""
    report = replay("pool_transfer", name, tmp_path)
    assert report.verdict.primary == "stage_bound", report.verdict.headline
    found = next(f for f in report.findings if f.id == "pool_transfer")
    assert found.score < INFO_SCORE
