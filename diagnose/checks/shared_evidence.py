"""Evidence that several checks measure the same way, declared once: the OS counters against the
samples (model/counters.py), the waits' holders and waiters (model/waits.py), the fix a finding
proposes, and the fields the service adds when it merges its workers' findings
(checks/service_verdict.py). A check's evidence dataclass declares a field of one of these names
with `shared_key()` (checks/declare.py), which reads its label here."""

from __future__ import annotations

from diagnose.checks.spec import NOT_MEASURED, Evidence
from diagnose.checks.spec import Evidence as E
from diagnose.checks.spec import Unit as U

SHARED: dict[str, Evidence] = {
    # The first advice as a knob and its value, for scripts that apply it: the page shows it as the
    # knob line, not as a row of evidence.
    "fix": E("setting to change and its value", U.TEXT, row=False),
    "busy_samples": E("busy samples behind the shares", U.SAMPLES),
    "busy_share_of_request_time": E("share of request-thread time busy (running or runnable)",
                                    U.PERCENT),
    "model_share_of_busy": E("share of busy time in model compute", U.PERCENT),
    "request_threads": E("request threads", U.THREADS),
    "threads_waiting": E("threads that waited (at the busiest site)", U.THREADS),
    "max_concurrent_waiters": E("most threads waiting at once", U.THREADS),
    "holder": E("what the holder was doing", U.TEXT),
    "sampled_cores": E("cores the threads ran by their samples", U.CORES),
    "measured_cores": E("cores the threads ran on or waited for, by /proc (CPU + run queue)",
                        U.CORES, none=NOT_MEASURED),
    "counters_note": E("samples and OS counters disagree", U.TEXT),
    "runnable_per_core": E("runnable threads per usable core", U.NUMBER, none=NOT_MEASURED),
    "native_mutex_wait_share": E("share of request-thread time waiting on a native library's mutex",
                                 U.PERCENT),
    "usable_cores": E("usable cores", U.CORES, none=NOT_MEASURED),
    "estimated": E("estimated (thread states inferred without native frames)", U.FLAG),
    "stage": E("pipeline stage", U.TEXT),
    "pid": E("process the details come from (pid)", U.ID),
    "worker_processes": E("worker processes", U.PROCESSES),
    "processes_with_finding": E("worker processes where it holds", U.PROCESSES),
    "score_per_process": E("score per process (pid: score)", U.NUMBER),
    "worker_busy_share": E("share of worker time busy", U.PERCENT),
    "async_wait_share": E("share of request-task time waiting on in-process asyncio primitives",
                          U.PERCENT),
}

# Written by checks/service_verdict.py on a finding merged from several worker processes.
MERGED = ("pid", "worker_processes", "processes_with_finding", "score_per_process")

