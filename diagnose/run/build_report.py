"""The report built from the checks' results: the frozen model (report/model/) every output
reads; its JSON (`Report.to_json()`) is the contract other tools read."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pandas as pd

from diagnose.checks.engine import CheckResults
from diagnose.checks.registry import evidence_labels
from diagnose.model.analysis import Analysis
from diagnose.model.stack_rows import stack_rows
from diagnose.model.cpu_account import cpu_account
from diagnose.model.wait_graph import build_wait_graph
from diagnose.model.reported_chains import reported_chains
from diagnose.model.service import Service
from diagnose.vocab import ProcessRole
from diagnose.collect.run_context import LiveSampling, RunContext, WindowCpu
from diagnose.report.redact import redact_cmdline
from diagnose.report.model import (SCHEMA_VERSION, Evidence, Finding, Process,
                                   ProcessTasks, Report, Sampling, Thread,
                                   TopFinding)
from diagnose.report.model.run import Observer, StateSources



def _num(value: Any) -> Any:
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    return round(value, 4) if isinstance(value, float) else value


def state_sources(samples: pd.DataFrame) -> dict:
    """Samples by where their state came from, and the native samples behind the calibrated ones:
    {measured, calibrated, estimated, calibration_min_support, calibration_median_support}."""
    counts = samples.groupby("state_source", observed=False)["count"].sum()
    out: dict[str, int | float | None] = {str(k): int(v) for k, v in counts.items()}
    calibrated = samples[samples["state_source"] == "calibrated"]
    support = calibrated["calibration_support"]
    out["calibration_min_support"] = int(support.min()) if len(support) else None
    out["calibration_median_support"] = float(support.median()) if len(support) else None
    return out


def state_sources_by_thread(samples: pd.DataFrame) -> dict[int, dict]:
    """`state_sources` of each thread's samples, by two group operations over the whole table
    (not a filter per thread)."""
    counts = (samples.groupby(["thread", "state_source"], observed=False)["count"].sum()
              .unstack(fill_value=0))
    calibrated = samples[samples["state_source"] == "calibrated"]
    support = calibrated.groupby("thread")["calibration_support"].agg(["min", "median"])
    low = dict(zip(support.index.tolist(), support["min"].tolist()))
    middle = dict(zip(support.index.tolist(), support["median"].tolist()))
    present = set(pd.unique(samples["thread"]).tolist())
    names = [str(k) for k in counts.columns]
    out = {}
    for thread, row in zip(counts.index.tolist(), counts.to_numpy().tolist()):
        if thread not in present:
            continue
        entry: dict[str, int | float | None] = {k: int(v) for k, v in zip(names, row)}
        entry["calibration_min_support"] = int(low[thread]) if thread in low else None
        entry["calibration_median_support"] = float(middle[thread]) if thread in middle else None
        out[int(thread)] = entry
    return out


def thread_lifetimes(analysis: Analysis) -> dict[int, tuple[float, float]]:
    """Per thread index: (first, last) instant it was seen, in seconds from the window's start,
    when the recording has timestamps (a thread started or ended mid-window is placed where it
    ran; `last` is the window's end for a thread alive to the end; a row shared by threads that
    reused one pthread id spans them all). Empty when the instants are reconstructed: the JSON
    then says null."""
    profile = analysis.profile
    if profile.instants != "measured":
        return {}
    out = {}
    for index, track in enumerate(profile.threads):
        if track.started_s is not None and track.ended_s is not None:
            out[index] = (round(track.started_s - profile.origin_s, 4),
                          round(track.ended_s - profile.origin_s, 4))
    return out


def thread_rows(analysis: Analysis) -> tuple[Thread, ...]:
    rows = []
    sources = state_sources_by_thread(analysis.samples)
    os_threads = analysis.os.threads if analysis.os else {}
    state_cols = [c for c in analysis.threads.columns if c not in ("tid", "pid", "name", "role", "samples")]
    lifetimes = thread_lifetimes(analysis)
    for index, row in analysis.threads.iterrows():
        tos = os_threads.get(int(row["tid"]))
        first, last = lifetimes.get(int(index), (None, None))
        rows.append(Thread(
            tid=int(row["tid"]), pid=None if pd.isna(row["pid"]) else int(row["pid"]),
            name=str(row["name"]), role=str(row["role"]), samples=int(row["samples"]),
            first_s=first, last_s=last,
            states={c: int(row[c]) for c in state_cols if int(row[c])},
            state_sources=sources_of(sources.get(int(index), {})),
            os=None if tos is None else tos.rounded()))
    return tuple(rows)


def sources_of(counts: dict) -> StateSources:
    """`state_sources`' counts as the report's StateSources."""
    low, middle = counts.get("calibration_min_support"), counts.get("calibration_median_support")
    return StateSources(measured=int(counts.get("measured", 0)),
                        calibrated=int(counts.get("calibrated", 0)),
                        estimated=int(counts.get("estimated", 0)),
                        calibration_min_support=None if low is None else int(low),
                        calibration_median_support=None if middle is None else float(middle))


# Above these, what the sampler did to the target may have changed what it measured.
PAUSE_WARNING_SHARE = 0.05
PYSPY_CPU_WARNING_SHARE = 0.10
ERROR_WARNING_SHARE = 0.05
RATE_SHORTFALL_WARNING = 0.5


def observer_cost(sampling: Sampling, cpu: WindowCpu | None = None) -> Observer:
    """What observing cost the target, and whether it is large enough to distort the verdict.
    `cpu`: what diagnose and its recorders used of the CPU over the window, beside the target
    (`attach` measures it; None offline)."""
    paused = sampling.paused_share
    cpu_share = sampling.pyspy_cpu_share_of_cores
    requested, achieved = sampling.rate_hz, sampling.achieved_rate_hz
    samples, errors = sampling.samples or 0, sampling.errors or 0
    error_rate = errors / (samples + errors) if (samples + errors) else None
    warnings = []
    if paused is not None and paused > PAUSE_WARNING_SHARE:
        warnings.append(f"py-spy kept the target's threads stopped {100 * paused:.0f}% of the time")
    if cpu_share is not None and cpu_share > PYSPY_CPU_WARNING_SHARE:
        warnings.append(f"py-spy used {100 * cpu_share:.0f}% of the cores the target runs on")
    if error_rate is not None and error_rate > ERROR_WARNING_SHARE:
        warnings.append(f"{100 * error_rate:.0f}% of samples failed")
    if requested and achieved is not None and achieved < RATE_SHORTFALL_WARNING * requested:
        warnings.append(f"sampling achieved {achieved:g} Hz of the {requested} Hz asked for")
    observer = Observer(
        paused_share=paused,
        pyspy_cpu_s=sampling.pyspy_cpu_s,
        pyspy_cpu_share_of_cores=cpu_share,
        requested_rate_hz=requested,
        achieved_rate_hz=achieved,
        errors=errors,
        error_rate=round(error_rate, 4) if error_rate is not None else None,
        torn_stacks_possible="nonblocking" in sampling.mode,
        plan=sampling.plan,
        warning=("; ".join(warnings) + ": the verdict may be distorted") if warnings else None,
    )
    return observer if cpu is None else with_cpu(observer, cpu)


def with_cpu(observer: Observer, cpu: WindowCpu) -> Observer:
    """`observer` with what diagnose and its recorders used of the CPU over the window, beside
    the target: seconds as measured, cores over the span each was measured over."""
    target = cpu.target_cpu_s
    return replace(
        observer,
        observer_cpu_s=round(cpu.cpu_s, 3), observer_own_cpu_s=round(cpu.own_cpu_s, 3),
        observer_children_cpu_s=round(cpu.children_cpu_s, 3), cpu_window_s=round(cpu.window_s, 3),
        observer_cores=round(cpu.cpu_s / cpu.window_s, 3) if cpu.window_s > 0 else None,
        target_cpu_s=round(target, 3) if target is not None else None,
        target_cores=(round(target / cpu.target_window_s, 3)
                      if target is not None and cpu.target_window_s else None))


def process_rows(service: Service, per_process: dict) -> tuple[Process, ...]:
    rows = []
    for view in service.processes:
        own = per_process.get(view.pid)
        top = own.findings[0] if own is not None and own.findings else None
        samples = int(view.analysis.samples["count"].sum())
        rows.append(Process(
            pid=view.pid, ppid=view.ppid, role=view.role,
            cmdline=redact_cmdline([str(c) for c in view.cmdline]),
            threads=int(len(view.analysis.threads)),
            cpu_s=_num(view.cpu_s), cpu_cores=_num(view.cpu_cores),
            busy_share=round(view.busy_share, 4), samples=samples,
            started_s=_num_plain(view.appeared_s), exited_s=_num_plain(view.exited_s),
            top_finding=None if top is None else TopFinding(top.id, top.score, top.severity,
                                                            top.summary)))
    return tuple(rows)


def _num_plain(value: Any) -> Any:
    """A number as Python's (numpy's scalars read as theirs), not rounded."""
    return value.item() if hasattr(value, "item") else value


def task_rows(service: Service) -> tuple[ProcessTasks, ...]:
    """Each process's asyncio tasks by await site (model/await_sites.py), or why none could be
    read; the raw reads stay out of the report (`attach --keep-raw` writes them beside it)."""
    rows = []
    for view in service.processes:
        recording = view.analysis.tasks
        if recording is None:
            continue
        summary = view.analysis.await_sites
        if summary is None:
            summary = ProcessTasks(
                pid=recording.pid, python=recording.python, reads=recording.reads,
                failed_reads=recording.failed_reads, read_seconds=recording.read_seconds,
                unreadable=recording.unreadable or "no read of the tasks succeeded",
                notes=tuple(recording.notes))
        rows.append(summary.rounded())
    return tuple(rows)


def build_report(service: Service, results: CheckResults, per_process: dict | None = None,
                 run: RunContext | None = None) -> Report:
    """`run`: the run as the report states it, finished; by default the one the analysis was
    made with (`service.combined.run`)."""
    analysis = service.combined
    per_process = per_process or {}
    run = run if run is not None else analysis.run
    stacks, folding = stack_rows(analysis)
    sampling = run_sampling(analysis, run)
    if folding is not None:
        sampling = replace(sampling, notes=(*sampling.notes, folding.note()))  # the page shows the notes
    pids = [view.pid for view in service.processes]
    return Report(
        schema_version=SCHEMA_VERSION,
        target=run.target,
        sampling=sampling,
        verdict=results.verdict,
        findings=results.findings,
        cpu_account=cpu_account(service),
        waits=tuple(replace(w, pid=view.pid)
                    for view in service.processes if view.role != ProcessRole.MASTER
                    for w in view.analysis.waits),
        processes=process_rows(service, per_process),
        structure=tuple(replace(view.analysis.structure, pid=pid)
                        for view, pid in zip(service.processes, pids)
                        if view.analysis.structure.stages),
        event_loops=tuple(loop for view in service.processes for loop in view.analysis.event_loops),
        tasks=task_rows(service),
        not_applicable=results.not_applicable,
        threads=thread_rows(analysis),
        stacks=stacks,
        load=run.load,
        wait_graph=build_wait_graph(service),
        chains=reported_chains(service),
        evidence_labels=labels_used(results.findings),
    )


def labels_used(findings: tuple[Finding, ...]) -> dict[str, Evidence]:
    """The declared label of each evidence key the findings use (checks' EVIDENCE), in the order
    they first appear: the report carries them, so it renders without the checks."""
    declared = evidence_labels()
    return {key: declared[key] for f in findings for key in f.evidence.keys() if key in declared}


def run_sampling(analysis: Analysis, run: RunContext) -> Sampling:
    """The report's sampling: what the run knew of its window, and what the analysis measured
    (instants, achieved rate, state sources, the observer's cost)."""
    thread_samples = int(analysis.samples["count"].sum())
    ticks = int(analysis.threads["samples"].max()) if len(analysis.threads) else 0
    recorded = run.sampling
    cpu = None
    if isinstance(recorded, LiveSampling):
        capture = recorded.capture
        sampling = Sampling(
            duration_s=capture.duration_s, rate_hz=capture.rate_hz, samples=capture.samples,
            errors=capture.errors, mode=capture.mode, native=capture.native,
            requested_duration_s=capture.requested_duration_s, plan=capture.plan,
            proc_interval_s=capture.proc_interval_s, samples_taken=capture.samples_taken,
            native_rate_hz=capture.native_rate_hz, native_samples=capture.native_samples,
            native_errors=capture.native_errors,
            processes_planned=capture.processes_planned,
            processes_sampled=capture.processes_sampled, pyspy_version=capture.pyspy_version,
            pyspy_cpu_s=capture.pyspy_cpu_s,
            pyspy_cpu_share_of_cores=capture.pyspy_cpu_share_of_cores,
            started_at=recorded.started_at)
        cpu = capture.cpu
    else:
        sampling = Sampling(duration_s=recorded.duration_s, rate_hz=recorded.rate_hz,
                            mode=recorded.mode, duration_at_least_s=recorded.duration_at_least_s,
                            native=analysis.profile.native)
    duration = sampling.duration_s
    achieved = round(ticks / duration, 2) if duration else None
    counted = recorded.samples  # py-spy's own count of the samples it took, when it said
    if analysis.profile.instants == "measured" and counted:
        # The samples are read off the recorded stack changes on a grid at the asked rate, so
        # the grid's count says nothing of the rate py-spy kept up: its own sample count over
        # the thread-seconds it watched does.
        watched = thread_samples * analysis.profile.interval_s
        achieved = round(counted / watched, 2) if watched else None
    sampling = replace(
        sampling,
        samples=counted if counted is not None else thread_samples,
        thread_samples=thread_samples,
        # "measured": sample instants from the recording's timestamps; "reconstructed": each
        # thread's samples laid end to end from the window's start (no timestamps in the
        # input); "none": no sample order at all (collapsed stacks).
        instants=analysis.profile.instants,
        achieved_rate_hz=achieved,
        states_calibrated=analysis.profile.calibrated,
        state_estimated=bool(analysis.samples["estimated"].any()),
        state_sources=sources_of(state_sources(analysis.samples)),
        # Share of /proc observations that found a thread stopped by py-spy: the observer's pause.
        paused_share=round(analysis.os.observer_stop_share, 4) if analysis.os is not None else None,
        partial=run.partial,
        notes=run.notes)
    return replace(sampling, observer=observer_cost(sampling, cpu))
