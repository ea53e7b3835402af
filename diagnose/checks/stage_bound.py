"""stage_bound: one pipeline stage limits the service while its neighbours wait on it.

What it finds:
    The busiest pipeline stage relative to its threads (busy share), and how much its
    neighbours wait on it: upstream blocked on `put` into the full queue between them,
    downstream starved on `get`. Across processes, the same for worker processes (a
    DataLoader's, a Pool's) feeding a consumer process that starves waiting for their results.

Why it matters:
    By the utilization law a pipeline serves at the rate of its slowest stage. Every item passes
    every stage, so each stage's busy thread-seconds are proportional to its time per item. A
    stage that runs pure Python holds the GIL: more threads will not help it.

What to do instead:
    Give threads (or worker processes) to stages in proportion to their time per item: the
    finding proposes a count for the bottleneck and predicts the gain. A pure-Python stage:
    vectorise it, move it to native code that releases the GIL, or run it in processes. Keep the
    queues between stages bounded: backpressure is what tells you which stage is slow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import math

from diagnose.checks.spec import NOT_MEASURED, CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements, Omitted
from diagnose.report.model.findings import Fix
from diagnose.vocab import HANDOFF_EDGES, EdgeKind, StageRole, ThreadState
from diagnose.checks.base import (Finding, Lever, LeverKind, ScoreBasis, Site, core_room,
                                  make_finding, pct, ramp, remove_work_lever, top_sites)

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis
    from diagnose.model.process_pipeline import ProcessPipeline
    from diagnose.model.service import Service
    from diagnose.report.model.sections import Stage

ID = "stage_bound"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "One pipeline stage limits the service"
    what: str = ("The busiest pipeline stage relative to its threads (busy share), and how much its neighbours wait "
                 "on it (upstream blocked on put into the full queue, downstream starved on get).")
    advice: tuple[str, ...] = ()
    busy_low: float = 0.6
    busy_high: float = 0.9
    low: float = 0.1
    high: float = 0.4
    pure_python_share: float = 0.6
    pooled_stage_factor: float = 0.5  # a stage whose calls already run on a core-wide intra-op pool
    # the process's own CPU / usable cores: above this the cores, not the stage, limit it
    own_cpu_low: float = 0.8
    own_cpu_high: float = 0.95


@dataclass(frozen=True, kw_only=True)
class StageEvidence(Measurements):
    stage: str = shared_key()
    # A thread stage's finding:
    stage_threads: int | Omitted = key("threads in the stage", U.THREADS, optional=True)
    stage_busy_share: float | Omitted = key("share of the stage's thread time busy", U.PERCENT, optional=True)
    stage_python_share_of_busy: float | Omitted = key(
        "share of the stage's busy time running Python", U.PERCENT, optional=True)
    waiting_on_it: dict[str, float] | Omitted = key(
        "stages waiting on it (share of their time)", U.PERCENT, optional=True)
    busy_threads_per_stage: dict[str, float] | Omitted = key(
        "busy threads per stage", U.THREADS, optional=True)
    stage_threads_by_stage: dict[str, int] | Omitted = key("threads per stage", U.THREADS, optional=True)
    proposed_threads: dict[str, int] | Omitted = key("proposed threads per stage", U.THREADS, optional=True)
    # A stage of worker processes' finding:
    framework: str | Omitted = key("worker-process framework", U.TEXT, optional=True)
    worker_processes: int | Omitted = shared_key(optional=True)
    worker_pids: list[int] | Omitted = key("worker processes (pids)", U.TEXT, optional=True)
    worker_busy_share: float | Omitted = shared_key(optional=True)
    worker_busy_source: str | Omitted = key("where the workers' busy share comes from", U.TEXT, optional=True)
    transform: str | Omitted = key("hottest function in the workers", U.TEXT, optional=True)
    entry: str | Omitted = key("function the worker loop calls per item", U.TEXT, optional=True)
    consumer_pid: int | Omitted = key("consumer process (pid)", U.ID, optional=True)
    consumer_busy_share: float | Omitted = key("consumer thread busy", U.PERCENT, optional=True)
    consumer_starved_share: float | Omitted = key(
        "consumer thread waiting for the workers", U.PERCENT, optional=True)
    proposed_workers: int | Omitted = key("proposed worker processes", U.PROCESSES, optional=True)
    # Both findings' (the predicted gain and what it rests on only a thread stage's):
    predicted_gain: float | Omitted = key("predicted throughput gain (estimate)", U.RATIO, optional=True)
    predicted_gain_inputs: str = key("inputs of the prediction", U.TEXT)
    core_room: float | None = key(
        "CPU headroom (cores it could use / cores it uses)", U.RATIO, none=NOT_MEASURED)
    process_cpu_utilization: float | None | Omitted = key(
        "process CPU, share of usable cores (OS)", U.PERCENT, none=NOT_MEASURED, optional=True)
    stage_fans_out_to_cores: bool | Omitted = key(
        "stage already runs on a native pool as wide as the cores", U.FLAG, optional=True)
    fix: Fix | None = shared_key()


EVIDENCE = declarations(StageEvidence)
MIN_CONSUMER_BUSY = 0.05  # a consumer process busier than this does work of its own


def run(analysis: Analysis, settings: Settings) -> Finding:
    """The bottleneck stage, busy while its neighbours wait on its hand-offs; its threads sized by utilization."""
    structure = analysis.structure
    # needs PIPELINE: the engine runs this check only when a bottleneck stage was found
    assert structure.bottleneck is not None
    stage = structure.stage(structure.bottleneck)
    assert stage is not None  # the bottleneck is one of the stages (model/structure.py)
    waits = [e for e in structure.edges if e.holder == stage.name
             and e.kind in HANDOFF_EDGES]
    waiting = max((e.share for e in waits), default=0.0)
    score = 100 * (ramp(stage.utilization, settings.busy_low, settings.busy_high) / 100
                   * ramp(waiting, settings.low, settings.high) / 100)
    linked = [s for s in structure.stages if s.role == StageRole.STAGE]
    window = (analysis.os.window_s if analysis.os is not None else None) or _window(analysis)
    rates = {s.name: s.busy_thread_seconds / window for s in linked} if window else {}
    n = len(stage.tids)
    pure_python = stage.python_share > settings.pure_python_share
    room = core_room(analysis)
    gain, proposal, inputs = _predict(stage, linked, rates, n, room, pure_python)
    pooled = _fans_out_to_cores(analysis, stage)
    if pooled:
        # Each call of the stage already runs on an intra-op pool as wide as the cores: a second
        # stage thread would share the same cores (the pool is the parallelism).
        score *= settings.pooled_stage_factor
        # ...and buy nothing: the free cores the utilization law counted are the pool's
        # (measured on the batching fixture: a second batcher 0.93-1.09x where 1.15x was said).
        gain = 1.0
        inputs += "; each call already runs on an intra-op pool as wide as the cores, so more " \
                  "stage threads would share the same cores"
    own = analysis.os.cpu_utilization if analysis.os is not None else None
    if own is not None and not pure_python:
        # A stage limits the service only while the process leaves cores for more of its
        # threads; when the process itself fills the cores (a batcher whose BLAS pool runs on
        # all of them), the cores are the limit and compute_bound names what runs on them.
        score *= 1.0 - ramp(own, settings.own_cpu_low, settings.own_cpu_high) / 100
    evidence = StageEvidence(
        stage=stage.name, stage_threads=n, stage_busy_share=stage.utilization,
        stage_python_share_of_busy=stage.python_share, waiting_on_it={e.waiter: e.share for e in waits},
        busy_threads_per_stage={name: round(r, 3) for name, r in rates.items()},
        stage_threads_by_stage={s.name: len(s.tids) for s in linked}, proposed_threads=proposal,
        predicted_gain=gain, predicted_gain_inputs=inputs, core_room=room,
        process_cpu_utilization=analysis.os.cpu_utilization if analysis.os is not None else None,
        stage_fans_out_to_cores=pooled,
        fix=None if pure_python else Fix("stage_threads", proposal[stage.name], stage=stage.name))
    how = {EdgeKind.BACKPRESSURE: "blocked on put", EdgeKind.STARVED: "starved on get"}
    neighbours = ", ".join(f"{e.waiter} {how.get(e.kind, 'waiting for results')} {pct(e.share)}"
                           for e in waits[:3])
    summary = (f"pipeline stage {stage.name} ({n} thread{'s' if n > 1 else ''}) is busy "
               f"{pct(stage.utilization)} of the time while {neighbours}")
    sites = [Site(stage.function, stage.file, stage.line, stage.utilization)]
    levers = []
    if pure_python:
        # Its first advice makes the stage's own Python cheaper: the code it runs is named
        # beside its loop, so the GIL's holders (the same code, seen from the threads queued
        # for it) read as this cause seen again (arbiter rule 7), not a second one.
        sites += _hot_python(analysis, stage)
        levers.append(_free_python_lever(stage, linked))
    for other in linked:
        if other.name != stage.name and other.file == stage.file:
            sites.append(Site(other.function, other.file, other.line, other.utilization))
    if pure_python:
        advice = [f"{stage.name} runs pure Python {pct(stage.python_share)} of its busy time and "
                  f"holds the GIL: more threads in it will not help. Vectorise it (numpy), move it "
                  f"to native code that releases the GIL, or run the stage in processes.",
                  "Then re-balance the stages by their measured time per item."]
    else:
        advice = [f"Give {stage.name} {proposal[stage.name]} threads (today {n}): threads per stage in "
                  f"proportion to each stage's time per item ("
                  + ", ".join(f"{k}: {v:.2f} busy threads" for k, v in rates.items())
                  + f"). Predicted: {gain:.2f}x the throughput (estimate: {inputs}).",
                  "Keep the queues between stages bounded: backpressure is what tells you which "
                  "stage is slow."]
    return make_finding(ID, settings, score, summary, evidence, sites, advice=advice,
                        gain=(gain, f"estimate (utilization law): {inputs}"),
                        samples=analysis.samples[analysis.samples["thread"].isin(analysis.stage_threads(stage))]["count"].sum(),
                        levers=levers)


def _free_python_lever(stage: Stage, linked: list[Stage]) -> Lever:
    """The most the stage's Python made free buys: Amdahl on its share of the stage's busy time,
    bounded by the next stage to saturate (the utilization law: the pace moves to it). Alone,
    the capped Amdahl figure (20x for a stage all Python) read as the headline's gain where
    vectorising the pure-Python pipeline's model measured 1.5x."""
    free = remove_work_lever(stage.python_share, f"{stage.name}'s Python", f"{stage.name}'s busy time")
    # Each other stage's pace limit by its serving share: its GIL waits behind this stage's
    # Python would go with that Python.
    others = {s.name: 1.0 / s.utilization for s in linked
              if s.name != stage.name and s.utilization > 0}
    if not others:
        return free
    nearest = min(others, key=lambda name: others[name])
    if others[nearest] >= free.gain:
        return free
    gain = round(max(1.0, others[nearest]), 2)
    return Lever(LeverKind.REMOVE_WORK, gain, free.label,
                 f"{free.basis}; bounded by {nearest}, which saturates at {gain:.2f}x its "
                 f"pace (utilization law): at most {gain:.2f}x", upper_bound=True)


def _hot_python(analysis: Analysis, stage: Stage) -> list[Site]:
    """The function the stage's threads most often ran Python in, other than its loop."""
    rows = analysis.samples[analysis.samples["thread"].isin(analysis.stage_threads(stage))]
    running = rows[rows["state"] == ThreadState.PYTHON]
    return [site for site in top_sites(analysis, running, float(rows["count"].sum()), limit=2)
            if site.function != stage.function][:1]


def _fans_out_to_cores(analysis: Analysis, stage: Stage) -> bool:
    """Does the stage call into a native library whose thread pool, with the stage's own
    threads, covers the usable cores? (pool threads have no Python frames: /proc counts them)"""
    os_ = analysis.os
    if os_ is None or not analysis.pool_splits:
        return False
    pool_threads = analysis.native_threads
    return pool_threads > 0 and len(stage.tids) + pool_threads >= os_.usable_cores


def _window(analysis: Analysis) -> float | None:
    ticks = analysis.threads["samples"].max() if len(analysis.threads) else 0
    return float(ticks) * (analysis.profile.interval_s or 0.01) or None


def _predict(stage: Stage, linked: list[Stage], rates: dict[str, float], n: int, room: float | None,
             pure_python: bool) -> tuple[float, dict[str, int], str]:
    """Utilization law: throughput grows with the bottleneck's threads until the next stage
    saturates or the cores run out."""
    rate = rates.get(stage.name) or n * stage.utilization or 1e-9
    others = [len(s.tids) / rates[s.name] for s in linked
              if s.name != stage.name and rates.get(s.name)]
    next_stage = min(others) if others else math.inf
    core_room = room if room is not None else math.inf
    if pure_python:
        # One GIL: the process runs at most one core of Python; threads add nothing.
        proposal = {s.name: len(s.tids) for s in linked}
        return 1.0, proposal, "pure-Python stage: threads share one GIL"
    target = min(next_stage, core_room, 4.0)
    wanted = max(n + 1, math.ceil(target * rate - 1e-6)) if target > 1 else n + 1
    gain = min(wanted / rate, next_stage, core_room)
    proposal = {s.name: len(s.tids) for s in linked}
    proposal[stage.name] = int(wanted)
    inputs = (f"{stage.name} busy {rate:.2f} threads of {n}; next stage saturates at "
              f"{next_stage:.2f}x; the free cores allow {core_room:.2f}x")
    return round(max(gain, 1.0), 2), proposal, inputs


def run_processes(pipeline: ProcessPipeline | None, service: Service, settings: Settings) -> Finding | None:
    """The same law across processes: worker processes (a DataLoader's, a Pool's) feeding a
    consumer process that starves waiting for their results (model/process_pipeline.py)."""
    if pipeline is None or pipeline.bottleneck != "producers":
        return None
    n = pipeline.workers
    os_ = service.combined.os
    cores = os_.usable_cores if os_ is not None else None
    if pipeline.consumer_busy < MIN_CONSUMER_BUSY or (cores and n >= cores):
        # A parent that only waits supervises (the workers' own findings are the verdict);
        # with a worker per usable core already, more workers only share the cores.
        return None
    busy, starved = pipeline.producer_busy, pipeline.consumer_starved

    def score_of(starved_share: float) -> float:
        return 100 * (ramp(busy, settings.busy_low, settings.busy_high) / 100
                      * ramp(starved_share, settings.low, settings.high) / 100)

    score = score_of(starved)
    # Workers to keep the consumer busy: today n workers at `busy` feed a consumer busy
    # `consumer_busy` of its time; it could take 1/consumer_busy times as much.
    consumer = max(pipeline.consumer_busy, 0.05)
    wanted = max(n + 1, math.ceil(n * busy / consumer - 1e-6))
    if cores:
        wanted = max(n + 1, min(wanted, int(cores)))
    room = core_room(service.combined)
    bounds = {"workers": wanted / (n * max(busy, 1e-3)) if busy < 1 else wanted / n,
              "consumer": 1.0 / consumer}
    if room is not None:
        bounds["cores"] = room
    gain = max(1.0, min(bounds.values()))
    inputs = (f"{n} worker process{'es' if n > 1 else ''} busy {pct(busy)} "
              f"({'from /proc' if pipeline.producer_busy_source == 'proc' else 'from samples'}); "
              f"the consumer busy {pct(pipeline.consumer_busy)}, starved {pct(starved)}; "
              f"{wanted} workers allow {bounds['workers']:.2f}x, the consumer {bounds['consumer']:.2f}x"
              + (f", the free cores {room:.2f}x" if room is not None else ""))
    knob, call = pipeline.knob()
    transform = pipeline.transform or pipeline.entry
    what = transform.function if transform else "the worker's task"
    entry = pipeline.entry.function if pipeline.entry else "the task"
    summary = (f"{pipeline.framework.value} worker processes ({n}) are busy {pct(busy)} running "
               f"{entry}" + (f" (most in {what}, {pct(transform.share)})"
                             if transform and transform is not pipeline.entry else "")
               + f" while the consumer (pid {pipeline.consumer_pid}, {pipeline.consumer_thread}) "
               f"starves {pct(starved)} of the time waiting for their results")
    sites = [h for h in (pipeline.transform, pipeline.entry, pipeline.consumer_site) if h is not None]
    advice = [f"Run {wanted} worker processes: `{call.format(n=wanted)}` (today {n}). The workers "
              f"are the slow stage and the consumer waits for them. Predicted: {gain:.2f}x the "
              f"throughput (estimate, utilization law: {inputs}).",
              f"{what} runs in the workers on every item: making it cheaper (vectorised, native "
              f"code, precomputed) raises what each worker serves.",
              "Beyond the usable cores more workers only share them: re-measure after each change."]
    evidence = StageEvidence(
        stage=f"{pipeline.framework.value} workers", framework=pipeline.framework.value, worker_processes=n,
        worker_pids=list(pipeline.producer_pids), worker_busy_share=busy,
        worker_busy_source=pipeline.producer_busy_source, transform=what, entry=entry,
        consumer_pid=pipeline.consumer_pid, consumer_busy_share=pipeline.consumer_busy,
        consumer_starved_share=starved, proposed_workers=wanted, predicted_gain_inputs=inputs,
        core_room=room, fix=Fix(knob, wanted))
    # The score rests on the consumer's starved share, a proportion of its samples: its interval
    # says whether the stage could show a problem on another attach (service._stage_first).
    return make_finding(ID, settings, score, summary, evidence, sites, advice=advice,
                        gain=(gain, f"estimate (utilization law): {inputs}"),
                        share_samples=({"consumer_starved_share": pipeline.consumer_samples}
                                       if pipeline.consumer_samples else None),
                        basis=(ScoreBasis("consumer_starved_share", score_of, lambda _s: gain)
                               if pipeline.consumer_samples else None))


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 needs=(Input.PIPELINE,), uses=(Input.OS_COUNTERS, Input.PROCESS_TREE))
