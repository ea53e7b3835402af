"""Synthetic multi-process stacks: worker processes feeding a consumer process are one pipeline."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import pandas as pd

from diagnose.checks import stage_bound
from diagnose.checks.engine import load_check_settings
from diagnose.classify.state import classify_stack
from diagnose.model.process_pipeline import Framework, find_process_pipeline
from diagnose.samples.profile import Frame

LIB = "/usr/lib/python3.11"
TORCH = "/venv/lib/python3.11/site-packages/torch"
APP = "/srv/job.py"
SETTINGS = load_check_settings()["stage_bound"]


def py(function, file, line=1):
    return Frame(function, file, line, False)


FORKED = [py("<module>", APP, 200), py("main", APP, 150),
          py("BaseProcess._bootstrap", f"{LIB}/multiprocessing/process.py", 314),
          py("BaseProcess.run", f"{LIB}/multiprocessing/process.py", 108)]
TORCH_LOOP = FORKED + [py("_worker_loop", f"{TORCH}/utils/data/_utils/worker.py", 375),
                       py("_MapDatasetFetcher.fetch", f"{TORCH}/utils/data/_utils/fetch.py", 54),
                       py("SyntheticImages.__getitem__", APP, 83)]
POOL_LOOP = FORKED + [py("worker", f"{LIB}/multiprocessing/pool.py", 125), py("load_batch", APP, 80)]
TORCH_WAIT = [py("<module>", APP, 200), py("run_inference", APP, 110),
              py("_BaseDataLoaderIter.__next__", f"{TORCH}/utils/data/dataloader.py", 725),
              py("_MultiProcessingDataLoaderIter._try_get_data", f"{TORCH}/utils/data/dataloader.py", 1293),
              py("Queue.get", f"{LIB}/multiprocessing/queues.py", 113),
              py("_ConnectionBase.poll", f"{LIB}/multiprocessing/connection.py", 257)]
POOL_WAIT = [py("<module>", APP, 200), py("run_inference", APP, 112),
             py("ApplyResult.get", f"{LIB}/multiprocessing/pool.py", 768),
             py("ApplyResult.wait", f"{LIB}/multiprocessing/pool.py", 765),
             py("Event.wait", f"{LIB}/threading.py", 622)]
MODEL = [py("<module>", APP, 200), py("run_inference", APP, 111), py("Model.forward", APP, 99)]


def view(pid, ppid, cpu, threads, roles=None, thread_cpu=None):
    """threads: {name: [(frames, state, count), ...]}; roles: {name: thread role} (else request);
    thread_cpu: {name: /proc CPU seconds over a 10 s window}"""
    frames, stacks, rows, names = [], [], [], []
    for t, (name, samples) in enumerate(threads.items()):
        names.append(name)
        for stack, state, count in samples:
            ids = []
            for f in stack:
                frames.append(f)
                ids.append(len(frames) - 1)
            stacks.append(tuple(ids))
            rows.append({"thread": t, "stack": len(stacks) - 1, "state": state, "count": count})
    tids = [pid * 100 + t for t in range(len(names))]
    os_ = None
    if thread_cpu is not None:
        os_ = SimpleNamespace(window_s=10.0, threads={
            tid: SimpleNamespace(cpu_s=thread_cpu[n], runqueue_wait_s=0.0)
            for tid, n in zip(tids, names) if n in thread_cpu})
    analysis = SimpleNamespace(profile=SimpleNamespace(frames=frames, stacks=stacks),
                               samples=pd.DataFrame(rows), os=os_,
                               threads=pd.DataFrame({"name": names, "tid": tids, "role": [
                                   (roles or {}).get(n, "request") for n in names]}))
    return SimpleNamespace(pid=pid, ppid=ppid, role="worker", cpu_cores=cpu, analysis=analysis,
                           cmdline=["python", APP])


def service(consumer, workers, usable=2.0):
    os_ = SimpleNamespace(usable_cores=usable, cpu_s=1.5 * 5, window_s=5.0, machine_idle_cores=0.5)
    return SimpleNamespace(multi=True, processes=[consumer, *workers],
                           combined=SimpleNamespace(os=os_, profile=SimpleNamespace(frames=[])))


def dataloader_tree(worker_cpu=0.98):
    consumer = view(10, 1, 0.5, {"MainThread": [(TORCH_WAIT, "idle", 55), (MODEL, "python", 45)]})
    worker = view(11, 10, worker_cpu, {"MainThread": [
        (TORCH_LOOP + [py("decode", APP, 56)], "python", 70),
        (TORCH_LOOP + [py("augment", APP, 66)], "python", 25),
        (TORCH_LOOP[:5] + [py("Queue.get", f"{LIB}/multiprocessing/queues.py", 113)], "idle", 5)]})
    return service(consumer, [worker])


def test_a_dataloader_worker_feeding_a_starved_consumer_is_the_saturated_stage():
    pipeline = find_process_pipeline(dataloader_tree())
    assert pipeline.framework is Framework.DATALOADER
    assert (pipeline.consumer_pid, pipeline.producer_pids) == (10, (11,))
    assert pipeline.bottleneck == "producers"
    assert pipeline.entry.function == "SyntheticImages.__getitem__"
    assert pipeline.transform.function == "decode"
    assert pipeline.consumer_site.function == "run_inference"


def test_the_stage_finding_advises_more_dataloader_workers_and_names_the_transform():
    tree = dataloader_tree()
    found = stage_bound.run_processes(find_process_pipeline(tree), tree, SETTINGS)
    assert found.score >= 75
    assert found.evidence["fix"] == {"knob": "num_workers", "value": 2}
    assert "num_workers=2" in found.advice[0] and "estimate" in found.advice[0]
    assert found.sites[0].function == "decode"
    assert found.predicted_gain > 1.0


def test_a_pool_worker_feeding_a_starved_consumer_advises_pool_processes():
    consumer = view(20, 1, 0.4, {"MainThread": [(POOL_WAIT, "idle", 60), (MODEL, "python", 40)]})
    worker = view(21, 20, 0.97, {"MainThread": [(POOL_LOOP + [py("decode", APP, 56)], "python", 90),
                                                (POOL_LOOP, "python", 10)]})
    tree = service(consumer, [worker])
    pipeline = find_process_pipeline(tree)
    assert pipeline.framework is Framework.POOL
    found = stage_bound.run_processes(pipeline, tree, SETTINGS)
    assert found.evidence["fix"] == {"knob": "processes", "value": 2}
    assert "Pool(processes=2)" in found.advice[0]


def test_a_pools_own_handler_thread_waiting_on_its_pipes_is_not_the_consumer():
    handler = [py("Thread._bootstrap", f"{LIB}/threading.py", 1002),
               py("Pool._handle_workers", f"{LIB}/multiprocessing/pool.py", 522),
               py("Pool._wait_for_updates", f"{LIB}/multiprocessing/pool.py", 502),
               py("wait", f"{LIB}/multiprocessing/connection.py", 947)]
    consumer = view(20, 1, 0.4, {"Thread-1 (_handle_workers)": [(handler, "idle", 100)],
                                 "MainThread": [(POOL_WAIT, "idle", 60), (MODEL, "python", 40)]},
                    roles={"Thread-1 (_handle_workers)": "library"})
    worker = view(21, 20, 0.97, {"MainThread": [(POOL_LOOP + [py("decode", APP, 56)], "python", 100)]})
    pipeline = find_process_pipeline(service(consumer, [worker]))
    assert pipeline.consumer_thread == "MainThread"
    assert (pipeline.consumer_busy, pipeline.consumer_starved) == (0.4, 0.6)


def test_a_consumer_sampled_running_inside_its_result_wait_is_starved_by_proc_cpu():
    # A non-blocking sampler caught the consumer's poll() as running Python; /proc says the
    # thread ran 3 s of the 10 s window: it waited for its workers the rest of the time.
    consumer = view(10, 1, 0.3, {"MainThread": [(TORCH_WAIT, "python", 70), (MODEL, "python", 30)]},
                    thread_cpu={"MainThread": 3.0})
    worker = view(11, 10, 0.98, {"MainThread": [(TORCH_LOOP + [py("decode", APP, 56)], "python", 100)]})
    pipeline = find_process_pipeline(service(consumer, [worker]))
    assert (pipeline.consumer_busy, pipeline.consumer_starved) == (0.3, 0.7)
    assert pipeline.bottleneck == "producers"


def test_a_consumer_proc_saw_running_more_than_its_samples_said_is_busy_by_proc_cpu():
    # Sparse estimated states read the consumer's model (native, GIL released) as a wait: 2 of
    # 100 samples busy, while /proc says it ran 4 s of the 10 s window. The counter decides.
    consumer = view(10, 1, 0.4, {"MainThread": [(POOL_WAIT, "lock", 98), (MODEL, "python", 2)]},
                    thread_cpu={"MainThread": 4.0})
    worker = view(11, 10, 0.97, {"MainThread": [(POOL_LOOP + [py("decode", APP, 56)], "python", 100)]})
    tree = service(consumer, [worker])
    pipeline = find_process_pipeline(tree)
    assert (pipeline.consumer_busy, pipeline.consumer_starved) == (0.4, 0.6)
    # a consumer busy 40% is no supervisor: the stage finding stands
    assert stage_bound.run_processes(pipeline, tree, SETTINGS) is not None


def test_workers_waiting_for_a_busy_consumer_are_not_the_bottleneck():
    consumer = view(10, 1, 0.98, {"MainThread": [(TORCH_WAIT, "idle", 3), (MODEL, "python", 97)]})
    worker = view(11, 10, 0.3, {"MainThread": [
        (TORCH_LOOP + [py("decode", APP, 56)], "python", 30),
        (TORCH_LOOP[:5] + [py("Queue.get", f"{LIB}/multiprocessing/queues.py", 113)], "idle", 70)]})
    tree = service(consumer, [worker])
    pipeline = find_process_pipeline(tree)
    assert pipeline is not None and pipeline.bottleneck == "consumer"
    assert stage_bound.run_processes(pipeline, tree, SETTINGS) is None


def test_forked_server_workers_without_a_worker_loop_are_no_process_pipeline():
    master = view(30, 1, 0.01, {"MainThread": [([py("Arbiter.sleep", "/venv/gunicorn/arbiter.py")],
                                                 "idle", 100)]})
    handler = [py("SyncWorker.handle", "/venv/gunicorn/workers/sync.py"), py("predict", APP)]
    workers = [view(31 + i, 30, 0.9, {"MainThread": [(handler, "python", 100)]}) for i in range(2)]
    assert find_process_pipeline(service(master, workers)) is None


def test_a_resource_sharing_thread_in_socket_accept_waits_for_connections():
    frames = [py("Thread.run", f"{LIB}/threading.py", 982),
              py("_ResourceSharer._serve", f"{LIB}/multiprocessing/resource_sharer.py", 138),
              py("Listener.accept", f"{LIB}/multiprocessing/connection.py", 479),
              py("SocketListener.accept", f"{LIB}/multiprocessing/connection.py", 625),
              py("socket.accept", f"{LIB}/socket.py", 294)]
    assert classify_stack(frames).state == "idle"
    assert classify_stack(frames + [Frame("0x7f01", "/usr/lib/_socket.so", 0, True)]).state == "idle"
    assert classify_stack(frames, native_profile=False).state == "idle"


def test_a_parent_that_only_waits_for_its_pool_is_a_supervisor_not_a_consumer():
    consumer = view(40, 1, 0.01, {"MainThread": [(POOL_WAIT, "idle", 100)]})
    worker = view(41, 40, 0.97, {"MainThread": [(POOL_LOOP + [py("decode", APP, 56)], "python", 100)]})
    tree = service(consumer, [worker])
    assert stage_bound.run_processes(find_process_pipeline(tree), tree, SETTINGS) is None


def test_no_more_workers_are_advised_once_there_is_one_per_usable_core():
    consumer = view(50, 1, 0.4, {"MainThread": [(POOL_WAIT, "idle", 60), (MODEL, "python", 40)]})
    workers = [view(51 + i, 50, 0.97, {"MainThread": [(POOL_LOOP + [py("decode", APP, 56)], "python", 100)]})
               for i in range(2)]
    tree = service(consumer, workers, usable=2.0)
    assert stage_bound.run_processes(find_process_pipeline(tree), tree, SETTINGS) is None


def test_a_worker_the_sampler_held_stopped_is_busy_over_the_window_it_could_run_in():
    # dataloader_job on CPython 3.13, 1 attach in 5: native sampling of the worker's torch stacks
    # held it stopped 23% of the window; by the whole window it read 64% busy and its stage fell
    # under the consumer's preprocessing
    tree = dataloader_tree()
    worker = tree.processes[1]
    paused = SimpleNamespace(window_s=4.0, cpu_s=2.3, runqueue_wait_s=0.1, observer_stop_share=0.25,
                             threads={})
    worker.analysis.os = paused
    assert find_process_pipeline(tree).producer_busy == pytest.approx(2.4 / 3.0)
    worker.analysis.os = SimpleNamespace(**{**vars(paused), "observer_stop_share": 0.0})
    assert find_process_pipeline(tree).producer_busy == pytest.approx(2.4 / 4.0)
