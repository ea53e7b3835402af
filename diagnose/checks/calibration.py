"""How each check's predicted gain has fared against measurement: fixes applied to real
workloads, the check's figure beside the gain measured by paired runs (benchmarks/calibration.py
and the services in benchmarks/services/; the table is benchmarks/README.md, "Calibration").

The engine (checks/engine.py) gives each finding whose check has a record here the words
`fared_words` makes, so a report states beside the gain how such predictions have done. The
records are measured figures, copied from the benchmark's output: a new measurement is added
here and to the README's table together.

A fix measured on a workload that was used to fit the constant its figure rests on (`fitted`:
vectorise_gain.SPEEDUP, lock_contention.SHED_OF_WAIT, preprocess_bound's calibrated half, a model
chosen on that workload's miss) says how well the constant was fitted, not how it predicts:
`fared_words` and `fix_words` count only the other fixes (held out), and where a check or fix has
only fitted ones they say what it was calibrated on and that it is not yet checked elsewhere.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class MeasuredFix:
    """One fix applied: where, what, the check's ranked figure before it, and the measured gain
    (throughput after / before, median of paired runs). `fitted`: the workload was used to fit
    the constant (or choose the model) the figure rests on, so the row is no evidence that the
    figure predicts: it is never counted as such."""

    workload: str
    fix: str
    predicted: float
    measured: float
    fitted: bool = False
    # the knob of the advice it applied (evidence.fix); None: the check's only lever. A finding
    # is told how the fixes of its own knob fared, not those of another lever of its check.
    knob: str | None = None

    @property
    def ratio(self) -> float:
        return self.measured / self.predicted


# Per check, the fixes of its first advice (the lever its ranked gain predicts).
RECORD: dict[str, tuple[MeasuredFix, ...]] = {
    "preprocess_bound": (
        # fitted: the calibrated half (preprocess_bound.halved_gain) was chosen on these two
        # fixes (9d95a51, "calibrated on measured fixes")
        MeasuredFix("the preprocess_bound fixture", "a cheaper decode", 1.84, 1.45, fitted=True),
        MeasuredFix("an image service", "a draft-mode JPEG decode", 1.87, 1.76, fitted=True),
    ),
    "cpu_bound": (
        # the vectorised figure (checks/vectorise_gain.py) of the hottest function, held out:
        # fixtures/servers/wsgi_predict_route.py under gunicorn -w 2 -k sync, three alternating
        # 8 s `wrk -t2 -c4` runs each way, 5.78x, 5.73x, 5.70x (the median kept); the figure
        # counts the handler's self time alone (73%), not the request's JSON around it
        MeasuredFix("the wsgi_predict_route server (a handler named predict)", "the holder's loop vectorised",
                    3.29, 5.73),
    ),
    "gil_contention": (
        # a library's C code holding the GIL, called less: fixtures/servers/vocab_per_request.py
        # under gunicorn -k gthread --threads 4 (json.load of a 1 MB vocabulary per request), three
        # alternating 8 s `wrk -t2 -c8` runs each way: 45.8/54.1/57.7 -> 2,495/2,293/2,520 req/s
        # (54.5x, 42.4x, 43.7x; the median kept). The figure counts the calls' running time and the
        # waits behind their top holder only: a floor
        MeasuredFix("the vocab_per_request server (a vocabulary json.load-ed per request)",
                    "the vocabulary parsed once (VOCAB=once)", 4.13, 43.7, knob="call_less"),
        # the vectorised figure (checks/vectorise_gain.py); the waits' figure it replaced had
        # predicted 1.92x for the fixture's 29.23x. fitted: SPEEDUP was fitted to these four
        MeasuredFix("the gil_contention fixture", "the holder's loop vectorised", 20.00, 22.65,
                    fitted=True, knob="vectorize"),
        MeasuredFix("the gil_contention fixture", "the holder's loop vectorised", 20.00, 19.67,
                    fitted=True, knob="vectorize"),
        # medians of 3 rounds (benchmarks/services/calibrate_service.py --service text_features)
        MeasuredFix("a text service (trigram counting)", "the holder's loop vectorised", 3.15, 4.17,
                    fitted=True, knob="vectorize"),
        MeasuredFix("a text service (trigram counting)", "the holder's loop vectorised", 3.06, 3.92,
                    fitted=True, knob="vectorize"),
        # held out (issue 42): a service SPEEDUP was not fitted on, medians of 3 rounds each
        # (benchmarks/services/calibrate_service.py --service embedding_rerank --rounds 3, b6f8013).
        # Amdahl on the share the profile gives the holder (67-80%) allows at most 3-5x, whatever
        # SPEEDUP is: the figure missed by 2.3-5.2x a round
        MeasuredFix("a re-ranking service (cosine similarity)", "the holder's loop vectorised",
                    2.77, 10.76, knob="vectorize"),
        MeasuredFix("a re-ranking service (cosine similarity)", "the holder's loop vectorised",
                    3.25, 9.89, knob="vectorize"),
        # the GIL's holder asleep in a call that keeps it (benchmarks/advice_gain.py, 2 and 3
        # rounds, the earlier at the fixture's landing, the later at 281d1d4); its figure is the
        # threads' calls overlapping
        MeasuredFix("the gil_held_asleep fixture", "the call releasing the GIL", 8.00, 8.00, knob="release_gil"),
        MeasuredFix("the gil_held_asleep fixture", "the call releasing the GIL", 8.00, 8.08, knob="release_gil"),
        # the holder blocked on a native lock (a shared SQLite connection's mutex), 3 rounds at
        # 281d1d4 beside other jobs: the cores bound the figure
        MeasuredFix("the sqlite_shared_connection fixture", "a connection per thread", 1.95, 1.56,
                    knob="per_thread_instance"),
        # the fixture without a statement cache (2ae0dea), 3 rounds on a quiet machine: the
        # figure bounds the gain by the cores the lock's runner leaves, but a connection per
        # thread also sheds the shared mutex's hand-overs, so each query costs less CPU
        MeasuredFix("the sqlite_shared_connection fixture", "a connection per thread", 1.91, 3.02,
                    knob="per_thread_instance"),
    ),
    "lock_contention": (
        # the lock's own figure (no pool behind it): no fitted constant
        MeasuredFix("the lock_contention fixture", "one model instance per core", 1.88, 1.76),
        # fitted: the serializing pool's figure, half the caller's wait shed
        # (lock_contention.SHED_OF_WAIT), was fitted to the locked_blas fixture and the locked model
        MeasuredFix("the locked_blas fixture", "OPENBLAS_NUM_THREADS=1", 1.48, 1.39, fitted=True),
        MeasuredFix("the lock_across_io fixture", "the fetch moved out of the lock", 6.05, 6.03),
        # the holder waits on a backend at capacity: a second backend and the call out of the
        # lock (benchmarks/advice_backend.py --lock-around-call, 3 rounds at 281d1d4 beside other
        # jobs; the figure was capped by the 0.02 idle cores the diagnosis saw)
        MeasuredFix("the remote_backend fixture (a lock across each call)",
                    "a second backend and the call out of the lock", 1.02, 1.68, knob="backend_processes"),
        # the locked model: medians of 3-4 rounds, each one attach and one paired run
        # (benchmarks/services/calibrate_service.py)
        MeasuredFix("a locked model (CPython 3.11)", "OPENBLAS_NUM_THREADS=1", 1.48, 1.40, fitted=True),
        MeasuredFix("a locked model (CPython 3.12)", "OPENBLAS_NUM_THREADS=1", 1.43, 1.35, fitted=True),
        MeasuredFix("a locked model (CPython 3.13)", "OPENBLAS_NUM_THREADS=1", 1.36, 1.45, fitted=True),
    ),
    "logging_lock": (
        # at the Amdahl cap, a lower bound; the fix dropped 97% of the records (its sink was at
        # capacity), which is how it bought more. fitted: the figure's model (the handler's whole
        # call, not its lock's wait) was chosen on this fixture's miss (7.23x for 13.87x)
        MeasuredFix("the logging_lock fixture", "a QueueHandler", 20.00, 41.89, fitted=True),
        MeasuredFix("the logging_lock fixture", "a QueueHandler", 20.00, 44.85, fitted=True),
    ),
    "pool_wait": (
        MeasuredFix("the pool_wait fixture", "a pool of 9", 3.81, 4.01),
    ),
    "stage_bound": (
        MeasuredFix("the pipeline fixture", "two model threads", 1.62, 1.42),
        # fitted: a stage already on an intra-op pool as wide as the cores gains 1.0x, a rule
        # made on this fixture's second batcher (0.93-1.09x where 1.15x was said)
        MeasuredFix("the batching fixture", "two batchers", 1.00, 1.07, fitted=True),
    ),
    "scheduler_overhead": (
        MeasuredFix("the blas_fanout fixture", "one BLAS thread", 1.30, 1.72),
        MeasuredFix("the scheduler_overhead fixture", "two request threads", 1.01, 0.97),
        MeasuredFix("the cpu_quota fixture", "one request thread", 1.11, 1.24),
        MeasuredFix("an image service", "two request threads", 1.05, 0.87),
    ),
    "cpu_throttled": (
        MeasuredFix("the cpu_quota fixture", "a quota of 2 cores", 3.34, 4.22),
    ),
    "backend_saturated": (
        # benchmarks/advice_backend.py, 3 rounds, nothing else running
        MeasuredFix("the remote_backend fixture", "a second backend process on the port", 1.92, 1.99),
        # --transport unix: the second copy on a socket of its own, the threads spread over both
        MeasuredFix("the remote_backend fixture over a Unix socket", "a second backend process on its own socket",
                    1.82, 2.01),
    ),
    "async_wait": (
        MeasuredFix("the async_executor fixture", "64 executor workers", 10.67, 10.66,
                    knob="executor_max_workers"),
        # benchmarks/advice_gain.py "async_executor:--executor named" / "...to_thread", 3 rounds
        MeasuredFix("the async_executor fixture (a named ThreadPoolExecutor)", "64 executor workers", 10.67, 10.56,
                    knob="executor_max_workers"),
        MeasuredFix("the async_executor fixture (asyncio.to_thread)", "64 executor workers", 10.67, 10.57,
                    knob="executor_max_workers"),
    ),
    "gc_pressure": (
        # fitted: CPU_PER_WINDOW (gc_pressure.py) was fitted to these (a quiet machine, medians of
        # 3 rounds each, benchmarks/advice_gain.py --fixtures gc_heavy --rounds 3 --seconds 8
        # --duration 6). The native samples' figure before the memory reader predicted 1.33x for
        # 1.57x and 1.60x measured on a loaded machine; Amdahl on the window's share alone, 2.09x
        # for 1.42x
        MeasuredFix("the gc_heavy fixture", "gc.freeze() and gc.set_threshold(50_000, 20, 100)", 1.45, 1.42,
                    fitted=True, knob="gc_freeze"),
        MeasuredFix("the gc_heavy fixture", "gc.freeze() and gc.set_threshold(50_000, 20, 100)", 1.48, 1.58,
                    fitted=True, knob="gc_freeze"),
        # a shared machine, three alternating 8 s runs each way (wrk -t2 -c8, gunicorn -k gthread
        # --threads 4): 7.23/6.84/6.09 -> 1715/1717/1712 req/s (237x, 251x, 281x; the median kept).
        # The figure is Amdahl at the 75% cap on a collector at 99% of the CPU: a floor
        MeasuredFix("the collect_per_request server (gc.collect() after every request)",
                    "the call dropped (COLLECT=none)", 4.00, 251.0, knob="drop_gc_collect"),
    ),
    "kernel_work": (
        # a shared machine (1.1-1.2 other cores busy), medians of 3 rounds each, 4 s attaches:
        # benchmarks/advice_gain.py --fixtures syscall_heavy --rounds 3 --seconds 8 --duration 4
        # (twice) and benchmarks/calibration.py (once). The kernel's share read 57-77% across the
        # attaches; the fix also removes each call's Python overhead, which Amdahl on the
        # kernel's share leaves out
        MeasuredFix("the syscall_heavy fixture", "a buffered spool file (--buffer-bytes 65536)", 4.00, 3.24,
                    knob="batch_syscalls"),
        MeasuredFix("the syscall_heavy fixture", "a buffered spool file (--buffer-bytes 65536)", 3.18, 4.23,
                    knob="batch_syscalls"),
        MeasuredFix("the syscall_heavy fixture", "a buffered spool file (--buffer-bytes 65536)", 2.34, 3.76,
                    knob="batch_syscalls"),
        # page faults: benchmarks/advice_gain.py --fixtures fresh_buffers --rounds 3 (a quiet
        # machine; the kernel's share 80%, Amdahl capped at 75%: reuse also ends the faults'
        # contention on the process's memory map, which Amdahl leaves out), and the frame server
        # of benchmarks/services (a thread per request, two 12 MB arrays each; the kernel's share
        # 50%), three alternating 8 s wrk runs each way
        # sends: fixtures/servers/metrics_emitter.py under gunicorn -k gthread --threads 4 (a
        # statsd datagram per metric, 76% of the CPU the kernel's), three alternating 8 s
        # `wrk -t2 -c8` runs each way: 4.67x, 3.95x, 4.37x (the median kept)
        MeasuredFix("the metrics_emitter server (a datagram per metric)", "50 metrics a datagram (BATCH=1)",
                    4.00, 4.37, knob="batch_syscalls"),
        MeasuredFix("the fresh_buffers fixture", "the buffers reused (--reuse)", 4.00, 5.87, knob="reuse_memory"),
        MeasuredFix("the frame server (a thread per request)", "the arrays from a pool (REUSE=1)", 2.02, 1.42,
                    knob="reuse_memory"),
        # reads: fixtures/servers/weights_per_request.py under gunicorn -k gthread --threads 4 (a
        # 40 MB matrix np.load-ed per request), three alternating 8 s `wrk -t2 -c8` runs each way
        # (the median kept): BLAS pinned to one thread (the fixture's default), 81% of the CPU the
        # kernel's, 122.0/129.2/119.4 -> 746.3/700.9/646.7 req/s (6.12x, 5.42x, 5.42x); with
        # OpenBLAS's own pool beside (OPENBLAS_NUM_THREADS=2), 45% the kernel's, 92.0/84.4/85.1 ->
        # 147.6/153.5/170.9 req/s (1.60x, 1.82x, 2.01x)
        MeasuredFix("the weights_per_request server (a 40 MB file np.load-ed per request)",
                    "the matrix loaded once (LOAD=once)", 4.00, 5.42, knob="read_once"),
        MeasuredFix("the weights_per_request server beside OpenBLAS's pool (OPENBLAS_NUM_THREADS=2)",
                    "the matrix loaded once (LOAD=once)", 1.83, 1.80, knob="read_once"),
        # a GET per key to a key-value server on the same 2 cores, three alternating 8 s runs each
        # way (wrk -t2 -c8, gunicorn -k gthread --threads 4 -w 2): 450.6/463.2/373.8 ->
        # 4104.6/4574.5/3830.3 req/s (9.11x, 9.88x, 10.25x; the median kept). A floor: fewer
        # round trips also remove the store's work and the service's Python per key
        MeasuredFix("the features_per_key server (a key-value GET per feature)",
                    "one MGET for the 100 keys (BATCH=1)", 2.60, 9.88, knob="batch_round_trips"),
    ),
    "pool_transfer": (
        # fixtures/servers/pool_transfer.py under gunicorn -k gthread --threads 4, three
        # alternating 8 s `wrk -t2 -c8` runs each way (the median kept): the 8 MB frame per task
        # 38.9/41.5/41.6 req/s, the 128 KB the task reads (SEND=sample) 853/990/877: 21.9x, 23.9x,
        # 21.1x against a figure capped at 10x; then from the sample, the task in the request
        # thread (SEND=inline) 1,712/1,540/1,614: 2.01x, 1.55x, 1.84x
        MeasuredFix("the pool_transfer server (an 8 MB frame a task)", "the 128 KB the task reads sent (SEND=sample)",
                    10.00, 21.9, knob="pool_transfer"),
        MeasuredFix("the pool_transfer server (the 128 KB sample a task)", "the task in the request thread "
                    "(SEND=inline)", 2.19, 1.84, knob="pool_transfer"),
        # /rank, a task per candidate record (chunksize 1) against 16 a task (CHUNK=16), three
        # alternating 8 s runs each way: 120.7/120.3/129.2 -> 930/979/966 req/s: 7.70x, 8.14x, 7.48x
        MeasuredFix("the pool_transfer server's /rank (a task per record)", "16 records a task (CHUNK=16)",
                    7.02, 7.70, knob="pool_transfer"),
        # fixtures/servers/asgi_pool_offload.py under uvicorn, three alternating 8 s runs each way:
        # 154/155/161 -> 2,880/3,060/2,927 req/s: 18.70x, 19.72x, 18.16x
        MeasuredFix("the asgi_pool_offload server (20,000 records a task, uvicorn)", "the 200 records the task reads "
                    "sent (SMALL=1)", 10.00, 18.70, knob="pool_transfer"),
    ),
    "children_cpu": (
        # the same runs of benchmarks/advice_gain.py --fixtures spawn_per_request (a shared machine,
        # 1.3 other cores busy); the fix also removes the service's own cost of starting the
        # children, which Amdahl on the children's share leaves out
        MeasuredFix("the spawn_per_request fixture", "the digest in the service (--in-process)", 2.10, 3.00,
                    knob="children_in_process"),
        MeasuredFix("the spawn_per_request fixture", "the digest in the service (--in-process)", 2.14, 2.80,
                    knob="children_in_process"),
    ),
    "poll_loop": (
        # benchmarks/advice_gain.py --fixtures poll_for_result --rounds 3 --seconds 6 --duration 4,
        # a quiet machine (load 1.8): the sleep was all of the request threads' time, so the
        # figure is Amdahl's cap ("large"); the event measured more
        MeasuredFix("the poll_for_result fixture", "an Event per job (--wait event)", 20.00, 25.57,
                    knob="wait_on_result"),
        # benchmarks/advice_gain.py --fixtures async_poll_for_result --rounds 3 --seconds 6
        # --duration 4, a shared machine (up to 2.0 other cores busy): request tasks polling with
        # asyncio.sleep all their time, Amdahl's cap again; an asyncio.Future per job measured more
        MeasuredFix("the async_poll_for_result fixture", "an asyncio.Future per job (--wait future)", 20.00,
                    58.06, knob="wait_on_result"),
    ),
}


# More fixes than this are summed up by their median; the README's table lists them.
LISTED_FIXES = 2


def _plain(workload: str) -> str:
    """"a text service (trigram counting)" -> "a text service": the workload, without what tells
    its rows apart."""
    return workload.split(" (", 1)[0]


def _joined(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def fitted_on(fixes: Iterable[MeasuredFix]) -> str:
    """"the gil_contention fixture and a text service": the workloads of the fitted fixes."""
    return _joined(list(dict.fromkeys(_plain(f.workload) for f in fixes if f.fitted)))


def _not_held_out(fixes: list[MeasuredFix]) -> str:
    """What a record with no held-out fix says instead of how its predictions fared."""
    return (f"calibrated on {fitted_on(fixes)}; not yet checked on a workload it was not "
            f"fitted on")


def _also_fitted(fixes: list[MeasuredFix]) -> str:
    fitted = [f for f in fixes if f.fitted]
    if not fitted:
        return ""
    return (f"; not counted: {len(fitted)} fix{'es' if len(fitted) > 1 else ''} on "
            f"{fitted_on(fitted)}, which its calibration was fitted on")


def fared_words(check_id: str, knob: str | tuple[str, ...] | None = None) -> str | None:
    """"such predictions measured 0.79-0.94x of their figure over 2 measured fixes (...)": each
    held-out fix named when they are few, else their median; the fixes on workloads its
    calibration was fitted on are never counted (named as not counted), and a record of fitted
    fixes only says that it is not yet checked elsewhere. None when no fix of the check's advice
    was measured. `knob`: the finding's own (evidence.fix), whose fixes alone are counted where
    the check has several levers; several (a finding naming several) count the fixes of each."""
    knobs = (knob,) if isinstance(knob, str) else knob
    record = [f for f in RECORD.get(check_id, ()) if knobs is None or f.knob is None or f.knob in knobs]
    if not record:
        return None
    fixes = [f for f in record if not f.fitted]
    if not fixes:
        return _not_held_out(record)
    ratios = sorted(f.ratio for f in fixes)
    span = f"{ratios[0]:.2f}x" if len(ratios) == 1 else f"{ratios[0]:.2f}-{ratios[-1]:.2f}x"
    if len(fixes) <= LISTED_FIXES:
        which = "; ".join(f"{f.fix} on {f.workload}: {f.predicted:.2f}x predicted, {f.measured:.2f}x measured"
                          for f in fixes)
    else:
        which = (f"median {statistics.median(ratios):.2f}x; on "
                 + ", ".join(dict.fromkeys(f.workload for f in fixes))
                 + "; benchmarks/README.md, Calibration")
    count = f"{len(fixes)} measured fix" + ("es" if len(fixes) > 1 else "")
    return f"such predictions measured {span} of their figure over {count} ({which}){_also_fitted(record)}"


def fix_words(check_id: str, fix: str) -> str | None:
    """"N measured fixes on workloads it was not fitted on: A-Bx of their figure" over the
    record's held-out fixes of `check_id` that applied `fix`; where every such fix was on a
    workload the calibration was fitted on, what it was calibrated on and that it is not yet
    checked elsewhere; None when none applied it. For a gain basis that names the fix it
    calibrates."""
    record = [f for f in RECORD.get(check_id, ()) if f.fix == fix]
    if not record:
        return None
    ratios = sorted(f.ratio for f in record if not f.fitted)
    if not ratios:
        return _not_held_out(record)
    span = f"{ratios[0]:.2f}x" if len(ratios) == 1 else f"{ratios[0]:.2f}-{ratios[-1]:.2f}x"
    return (f"{len(ratios)} measured fix{'es' if len(ratios) > 1 else ''} on workloads it was not "
            f"fitted on: {span} of their figure")
