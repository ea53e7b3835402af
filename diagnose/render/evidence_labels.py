"""Evidence as people read it: a label and a value with its unit, instead of a JSON key.

`describe_evidence(finding)` turns a finding's `evidence` into rows for the report page:

    {"key": "lock_wait_share",
     "label": "share of request-thread time waiting on locks",
     "text": "35% (31–39%), 812 samples"}

A share whose 95% Wilson interval is in the finding's `intervals` shows that interval as a range
(it is asymmetric near 0% and 100%, so never as ±) and the samples behind it. A value that
depends on inferred thread states says so when the finding's evidence is marked `estimated`
(or `calibrated`). A dict value also gets `items`, [[name, text], ...], for the page's nested
list. Every key the checks emit has an explicit label below; an unknown key is humanized and
its unit inferred from its suffix, so a new key never reaches the page raw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# Units: how a value (or, for a dict, each of its values) is written.
PERCENT = "percent"
SECONDS = "seconds"
PER_S = "per_s"
MB = "mb"
MB_PER_S = "mb_per_s"
CORES = "cores"
RATIO = "ratio"
NUMBER = "number"
TEXT = "text"
FLAG = "flag"
ID = "id"
THREADS = "threads"
SAMPLES = "samples"
PROCESSES = "processes"
LOOPS = "loops"
SITES = "sites"

# Count units: (singular, plural).
_NOUNS = {THREADS: ("thread", "threads"), SAMPLES: ("sample", "samples"),
          PROCESSES: ("process", "processes"), LOOPS: ("event loop", "event loops"),
          SITES: ("call site", "call sites"), CORES: ("core", "cores")}

DASH = "\u2014"
EN_DASH = "\u2013"
TIMES = "\u00d7"


@dataclass(frozen=True)
class Label:
    label: str
    unit: str  # of the value; for a dict, of each of its values
    # The value rests on inferred thread states: flagged when the evidence says `estimated`.
    estimable: bool = False
    # Shown with its interval when `intervals` has one (False for a value that is itself a bound).
    interval: bool = True
    none: str = DASH  # what a null value means


L = Label
_NOT_MEASURED = "not measured"

# Every evidence key the checks (diagnose/checks/*.py) emit, except `fix` (the page's knob line).
LABELS: dict[str, Label] = {
    # -- shared by several checks
    "busy_samples": L("busy samples behind the shares", SAMPLES),
    "running_samples": L("running samples (not waiting for the GIL) behind the model share", SAMPLES),
    "busy_share_of_request_time": L("share of request-thread time busy (running or runnable)", PERCENT),
    "model_share_of_busy": L("share of busy time in model compute", PERCENT),
    "request_threads": L("request threads", THREADS),
    "threads_waiting": L("threads that waited (at the busiest site)", THREADS),
    "max_concurrent_waiters": L("most threads waiting at once", THREADS),
    "holder": L("what the holder was doing", TEXT),
    # -- the OS counters against the samples (model/counters.py)
    "sampled_cores": L("cores the threads ran by their samples", CORES),
    "measured_cores": L("cores the threads ran on or waited for, by /proc (CPU + run queue)", CORES,
                        none=_NOT_MEASURED),
    "counters_note": L("samples and OS counters disagree", TEXT),
    "runnable_per_core": L("runnable threads per usable core", NUMBER, none=_NOT_MEASURED),
    "native_mutex_wait_share": L("share of request-thread time waiting on a native library's mutex",
                                 PERCENT),
    "usable_cores": L("usable cores", CORES, none=_NOT_MEASURED),
    "estimated": L("estimated (thread states inferred without native frames)", FLAG),
    "stage": L("pipeline stage", TEXT),
    # -- compute_bound
    "busy_request_threads": L("busy threads (mean)", THREADS),
    "core_utilization_from_samples": L("share of usable cores kept busy (from samples)", PERCENT),
    "os_cpu_utilization": L("CPU used, share of usable cores (OS)", PERCENT, none=_NOT_MEASURED),
    # -- cpu_bound
    "unclassified_share_of_busy": L("share of busy time in code no category names", PERCENT),
    "python_share_of_busy": L("share of busy time running Python (holding or wanting the GIL)",
                              PERCENT),
    "self_time": L("hottest functions by self time (share of busy time)", PERCENT),
    "total_time": L("hottest functions by total time (share of busy time)", PERCENT),
    # -- event_loop_blocked
    "loop_thread": L("event-loop thread", TEXT),
    "loop_flavor": L("event-loop implementation", TEXT),
    "loop_samples": L("samples of the event-loop thread", SAMPLES),
    "loop_busy_share": L("share of loop time busy", PERCENT),
    "loop_idle_share": L("share of loop time idle in its selector", PERCENT),
    "app_sync_share": L("share of loop time running the app's synchronous code", PERCENT),
    "framework_share": L("share of loop time in framework code", PERCENT),
    "loop_thread_cpu_share_os": L("loop thread's CPU time, share of the window (OS)", PERCENT,
                                  none=_NOT_MEASURED),
    "estimated_blocking_per_request_s": L("estimated blocking per request", SECONDS,
                                          none="not estimated"),
    "estimated_blocking_per_request_min_s": L("estimated blocking per request, at least", SECONDS,
                                              none="not estimated"),
    "estimated_blocking_per_request_max_s": L("estimated blocking per request, at most", SECONDS,
                                              none="not estimated"),
    "blocking_estimate_basis": L("basis of the per-request estimate", TEXT, none="none"),
    "event_loops": L("event loops seen", LOOPS),
    "coroutine": L("coroutine running on the loop", TEXT),
    "work_kind": L("kind of work on the loop", TEXT),
    "work": L("what the loop ran", TEXT),
    "call": L("the call", TEXT),
    # -- gil_contention
    "gil_wait_share": L("share of request-thread time waiting for the GIL", PERCENT, estimable=True),
    "gil_wait_thread_seconds": L("time waiting for the GIL, summed over threads", SECONDS,
                                 estimable=True),
    "gil_wait_share_per_thread": L("share of each request thread's time waiting for the GIL",
                                   PERCENT, estimable=True),
    "holder_phase_shares": L("what the running Python did, by phase (share of its samples)", PERCENT),
    "python_active_thread_seconds": L("request-thread time in Python, from the samples", SECONDS),
    "cpu_seconds": L("CPU time the request threads got (OS)", SECONDS),
    # -- lock_contention
    "lock_wait_share": L("share of request-thread time waiting on locks", PERCENT, estimable=True),
    "lock_wait_thread_seconds": L("time waiting on locks, summed over threads", SECONDS,
                                  estimable=True),
    "top_site_max_concurrent_waiters": L("most threads waiting at once at the top lock", THREADS),
    "critical_section_library": L("library the critical section runs in", TEXT),
    # -- logging_lock
    "logging_wait_share": L("share of request-thread time waiting on logging handler locks",
                            PERCENT, estimable=True),
    "logging_wait_thread_seconds": L("time waiting on logging locks, summed over threads", SECONDS,
                                     estimable=True),
    "call_sites": L("logging call sites waited at", SITES),
    "handler": L("handler doing the slow work", TEXT, none="not seen"),
    # -- pool_wait
    "pool_wait_share": L("share of request-thread time waiting for a pooled resource", PERCENT,
                         estimable=True),
    "pool_wait_thread_seconds": L("time waiting for the pool, summed over threads", SECONDS,
                                  estimable=True),
    "acquire_site": L("where the resource is acquired", TEXT),
    "kind": L("kind of pool", TEXT),
    "pool_size_estimate": L("pool size, at least (most seen held at once)", NUMBER, none="unknown"),
    # -- preprocess_bound
    "preprocess_share_of_busy": L("share of busy time in preprocessing", PERCENT),
    "postprocess_share_of_busy": L("share of busy time in postprocessing", PERCENT),
    # -- scheduler_overhead
    "runqueue_wait_per_cpu_second": L("time waiting for a core, per CPU-second run", SECONDS),
    "runqueue_wait_s": L("time waiting for a core (run queue), summed over threads", SECONDS),
    "cpu_s": L("CPU time used", SECONDS),
    "mean_runnable_threads": L("runnable threads (mean)", THREADS),
    "affinity_cores": L("cores in the CPU affinity mask", CORES, none=_NOT_MEASURED),
    "cgroup_cpu_quota_cores": L("cgroup CPU quota", CORES, none="no quota"),
    "threads": L("threads in the process (most at once)", THREADS),
    "intra_op_threads": L("intra-op pool threads (native)", THREADS),
    "intra_op_libraries": L("libraries with an intra-op pool", TEXT, none="none seen"),
    "threads_per_core": L("threads per usable core", NUMBER, none=_NOT_MEASURED),
    "involuntary_ctx_per_s": L("involuntary context switches (preempted)", PER_S, none=_NOT_MEASURED),
    "voluntary_ctx_per_s": L("voluntary context switches (blocked)", PER_S, none=_NOT_MEASURED),
    "intra_op_library": L("library whose pool synchronises", TEXT),
    "intra_op_sync_share": L("share of the pool's native samples synchronising", PERCENT),
    "intra_op_sync_share_95_low": L("share synchronising, 95% lower bound", PERCENT, interval=False),
    "cores_in_use": L("cores in use", CORES, none=_NOT_MEASURED),
    "intra_op_sync_samples": L("native samples synchronising", SAMPLES),
    "intra_op_kernel_samples": L("native samples in kernels", SAMPLES),
    "native_samples_used": L("native samples of the pool", SAMPLES),
    "intra_op_sync_functions": L("synchronisation functions", SAMPLES),
    "intra_op_kernel_functions": L("kernel functions", SAMPLES),
    "knob": L("setting to change", TEXT),
    "knob_value": L("value to set it to", NUMBER),
    # -- service (merged findings of worker processes) and worker_imbalance
    "pid": L("process the details come from (pid)", ID),
    "worker_processes": L("worker processes", PROCESSES),
    "processes_with_finding": L("worker processes where it holds", PROCESSES),
    "score_per_process": L("score per process (pid: score)", NUMBER),
    "workers": L("worker processes", PROCESSES),
    "cores_busy_per_worker": L("cores kept busy per worker (pid: cores)", CORES),
    "load_coefficient_of_variation": L("load spread across workers (coefficient of variation)",
                                       NUMBER),
    "idle_core_share": L("share of usable cores left idle", PERCENT),
    "saturated_workers": L("saturated workers", PROCESSES),
    # -- stage_bound
    "stage_threads": L("threads in the stage", THREADS),
    "stage_busy_share": L("share of the stage's thread time busy", PERCENT),
    "stage_python_share_of_busy": L("share of the stage's busy time running Python", PERCENT),
    "waiting_on_it": L("stages waiting on it (share of their time)", PERCENT),
    "busy_threads_per_stage": L("busy threads per stage", THREADS),
    "stage_threads_by_stage": L("threads per stage", THREADS),
    "proposed_threads": L("proposed threads per stage", THREADS),
    "predicted_gain": L("predicted throughput gain (estimate)", RATIO),
    "predicted_gain_inputs": L("inputs of the prediction", TEXT),
    "core_room": L("CPU headroom (cores it could use / cores it uses)", RATIO, none=_NOT_MEASURED),
    "process_cpu_utilization": L("process CPU, share of usable cores (OS)", PERCENT,
                                 none=_NOT_MEASURED),
    "framework": L("worker-process framework", TEXT),
    "worker_pids": L("worker processes (pids)", TEXT),
    "worker_busy_source": L("where the workers' busy share comes from", TEXT),
    "transform": L("hottest function in the workers", TEXT),
    "entry": L("function the worker loop calls per item", TEXT),
    "consumer_pid": L("consumer process (pid)", ID),
    "consumer_busy_share": L("consumer thread busy", PERCENT),
    "consumer_starved_share": L("consumer thread waiting for the workers", PERCENT),
    "proposed_workers": L("proposed worker processes", PROCESSES),
    "stage_fans_out_to_cores": L("stage already runs on a native pool as wide as the cores", FLAG),
    # -- unbounded_backlog
    "rss_growth_mb_per_s": L("resident memory growth", MB_PER_S),
    "rss_growth_mb": L("resident memory change over the window", MB),
    "rss_fit_r2": L("steadiness of the growth (r\u00b2 of a straight-line fit)", NUMBER,
                    none=_NOT_MEASURED),
    "rss_end_mb": L("resident memory at the end", MB),
    "worker_busy_share": L("share of worker time busy", PERCENT),
    "submit_site_seen": L("a submit / put call site was sampled", FLAG),
    # -- underloaded
    "idle_share_of_workers": L("share of worker time idle, waiting for work", PERCENT),
    "waiting_share_of_workers": L("share of worker time waiting for work or on calls outside "
                                  "the process", PERCENT),
    "waiting_outside_share_of_workers": L("share of worker time inside requests waiting on "
                                          "calls outside the process (IO, sleep)", PERCENT),
    "worker_threads": L("worker threads", THREADS),
    "idle_threads": L("threads that only waited for work", THREADS),
    "cpu_utilization": L("CPU used, share of usable cores (OS)", PERCENT, none=_NOT_MEASURED),
}

SKIPPED = ("fix",)  # shown as the knob line, not as evidence

# Words of a humanized key: abbreviations spelled out, units dropped (the value carries them).
_WORDS = {"cpu": "CPU", "gil": "GIL", "os": "(OS)", "rss": "resident memory", "ctx": "context switches",
          "io": "IO", "r2": "r\u00b2", "mb": "", "pct": "percent", "num": "number", "p99": "P99",
          "p50": "P50", "id": "id", "pid": "pid", "db": "database", "rpc": "RPC", "http": "HTTP"}


# ------------------------------------------------------------------ numbers


def fmt_number(x) -> str:
    """A plain number, rounded for reading: 3,200 / 123.4 / 1.56 / 0.0123."""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    x = float(x)
    if not math.isfinite(x):
        return DASH
    a = abs(x)
    if x.is_integer() and a < 1e15:
        return f"{int(x):,}"
    if a >= 1000:
        return f"{int(_round_half_up(x)):,}"
    if a >= 100:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}".rstrip("0").rstrip(".")
    if a < 0.001:
        return "<0.001" if x > 0 else ">-0.001"
    return f"{x:.3g}"


def _round_half_up(x: float) -> float:
    return math.floor(x + 0.5)


def fmt_percent(share) -> str:
    """A fraction as a percentage: whole percent from 10%, one decimal below; "<0.1%" for a
    trace, and never "100%" for a share short of it."""
    p = 100 * float(share)
    if p == 0:
        return "0%"
    if 0 < abs(p) < 0.1:
        return "<0.1%"
    if abs(p) < 10:
        return f"{p:.1f}%"
    if share < 1 and _round_half_up(p) >= 100:
        one = f"{p:.1f}"
        return ">99.9%" if one == "100.0" else one + "%"
    return f"{int(_round_half_up(p))}%"


def fmt_seconds(s) -> str:
    """1.25 s; under a second in ms (45 ms), under a millisecond in \u00b5s."""
    s = float(s)
    a = abs(s)
    if a == 0:
        return "0 s"
    if a >= 1:
        return f"{fmt_number(s)} s"
    if a >= 0.001:
        return f"{fmt_number(1000 * s)} ms"
    return f"{fmt_number(1e6 * s)} \u00b5s"


def _count(x, unit: str) -> str:
    one, many = _NOUNS[unit]
    return f"{fmt_number(x)} {one if x == 1 else many}"


def fmt_value(value, unit: str, none: str = DASH) -> str:
    """`value` written in `unit`. Values of an unexpected type are written as they are."""
    if value is None:
        return none
    if isinstance(value, dict):
        if not value:
            return "none"
        return "; ".join(f"{name}: {text}" for name, text in _items(value, unit, none))
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt_value(v, unit, none) for v in value) if value else "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return none
    if unit == PERCENT:
        return fmt_percent(value)
    if unit == SECONDS:
        return fmt_seconds(value)
    if unit == PER_S:
        return f"{fmt_number(value)} /s"
    if unit == MB:
        return f"{fmt_number(value)} MB"
    if unit == MB_PER_S:
        return f"{fmt_number(value)} MB/s"
    if unit == RATIO:
        return f"{float(value):.2f}{TIMES}"
    if unit == ID:
        return str(int(value)) if float(value).is_integer() else str(value)
    if unit in _NOUNS:
        return _count(value, unit)
    return fmt_number(value)


def _items(value: dict, unit: str, none: str) -> list[list[str]]:
    return [[str(name), fmt_value(v, unit, none)] for name, v in value.items()]


# ------------------------------------------------------------------ labels


def label_for(key: str) -> Label:
    """The explicit label of `key`, or one made from the key itself."""
    known = LABELS.get(key)
    return known if known is not None else fallback_label(key)


def infer_unit(key: str) -> str:
    """A unit from the key's suffix (the naming convention of the checks)."""
    k = key.lower()
    if k.endswith("_mb_per_s"):
        return MB_PER_S
    if k.endswith("_per_s"):
        return PER_S
    if k.endswith("_mb"):
        return MB
    if k.endswith(("_s", "_seconds")):
        return SECONDS
    if k.endswith("_cores") or k == "cores":
        return CORES
    if (k.endswith(("_share", "_shares")) or "_share_" in k or k.startswith("share_")
            or k == "share" or "utilization" in k):
        return PERCENT
    if k.endswith("threads"):
        return THREADS
    if k.endswith("samples"):
        return SAMPLES
    if k == "pid" or k.endswith("_pid"):
        return ID
    return NUMBER


def humanize(key: str) -> str:
    """'queue_wait_thread_seconds' -> 'queue wait thread seconds'; units the value shows
    ('_s', '_mb', '_per_s') are left out. Never contains an underscore."""
    words = [w for w in str(key).replace("-", "_").split("_") if w]
    unit = infer_unit(key)
    if unit in (PER_S, MB_PER_S) and words[-2:] == ["per", "s"]:
        words = words[:-2]
    elif unit == SECONDS and words and words[-1] == "s":
        words = words[:-1]
    out = [_WORDS.get(w.lower(), w) for w in words]
    text = " ".join(w for w in out if w).strip()
    return text or "value"


def fallback_label(key: str) -> Label:
    return Label(humanize(key), infer_unit(key))


# ------------------------------------------------------------------ rows


def _flag(evidence: dict) -> str:
    if evidence.get("estimated") is True:
        return "estimated"
    if evidence.get("calibrated") is True:
        return "calibrated"
    return ""


def _infer_for_value(label: Label, key: str, value) -> Label:
    """A fallback label whose suffix says nothing: the value's type decides."""
    if key in LABELS or label.unit != NUMBER:
        return label
    if isinstance(value, bool):
        return Label(label.label, FLAG)
    if isinstance(value, str):
        return Label(label.label, TEXT)
    return label


def describe_item(key: str, value, evidence: dict | None = None, intervals: dict | None = None
                  ) -> dict:
    """One evidence row: {"key", "label", "text"}, "items" for a dict, "interval" when shown."""
    label = _infer_for_value(label_for(key), key, value)
    text = fmt_value(value, label.unit, label.none)
    row: dict[str, Any] = {"key": key, "label": label.label, "text": text}
    interval = (intervals or {}).get(key) if label.interval else None
    if (label.unit == PERCENT and isinstance(interval, dict) and isinstance(value, (int, float))
            and not isinstance(value, bool)):
        low, high, samples = interval.get("low"), interval.get("high"), interval.get("samples")
        if isinstance(low, (int, float)) and isinstance(high, (int, float)):
            lo, hi = fmt_percent(low), fmt_percent(high)
            bounds = lo.removesuffix("%") + EN_DASH + hi if lo.endswith("%") else lo + EN_DASH + hi
            row["text"] = f"{text} ({bounds})"
            if isinstance(samples, int) and not isinstance(samples, bool):
                row["text"] += ", " + _count(samples, SAMPLES)
            row["interval"] = {"low": low, "high": high, "samples": samples}
    if isinstance(value, dict):
        row["items"] = _items(value, label.unit, label.none)
    flag = _flag(evidence or {})
    if flag and label.estimable and value is not None:
        row["text"] += f" ({flag})"
        row["flag"] = flag
    return row


def describe_evidence(finding: dict) -> list[dict]:
    """Each evidence value of `finding` (a report finding) as a labelled row, in the evidence's
    order; `fix` is left out (the page shows it as the knob line)."""
    finding = finding if isinstance(finding, dict) else {}
    evidence = finding.get("evidence")
    if not isinstance(evidence, dict):
        return []
    intervals = finding.get("intervals") if isinstance(finding.get("intervals"), dict) else {}
    return [describe_item(str(key), value, evidence, intervals)
            for key, value in evidence.items() if key not in SKIPPED]
