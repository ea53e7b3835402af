"""Runs an experiment end to end: each variant's service started and stopped (its whole process
group), the load of one run (one step, or a sweep), the verdict taken once per variant while it
is loaded, and the written report. The decisions are in diagnose/load/experiment_decision.py."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from diagnose.collect.procfs import cores_available
from diagnose.load import loadgen
from diagnose.errors import LoadFailed
from diagnose.load.experiment_decision import (Arm, ExperimentResult, RunSettings, experiment_report,
                                 failed_arms, run_experiment, throughput_at_slo)
from diagnose.load.loadtest import Generator, Outcome, StopOnSignal, Stopped
from diagnose.outputs.files import prepare_output_dir, write_report
from diagnose.report.step_diagnosis import StepDiagnosis
from diagnose.report.load_report import Advice, ExperimentReport, Run

if TYPE_CHECKING:  # types only: the sweep module is imported where a run reads the CPU
    from diagnose.load.sweep_steps import CpuReading

READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 8.0


class Service:
    """One started service: its own session (process group), output to a temporary file."""

    def __init__(self, arm: Arm):
        env = dict(os.environ)
        for name, value in arm.env:
            if value is None:
                env.pop(name, None)   # "unset": the service runs without the variable
            else:
                env[name] = value
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._log = tempfile.TemporaryFile(prefix="diagnose-experiment-")
        try:
            self.proc = subprocess.Popen(list(arm.argv), stdin=subprocess.DEVNULL,
                                         stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True,
                                         preexec_fn=loadgen.die_with_parent(os.getpid()))
        except OSError as exc:
            self._log.close()
            raise LoadFailed(f"cannot start {shlex.join(arm.argv)}: {exc}") from None

    def output(self, limit: int = 1500) -> str:
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")[-limit:]

    def exited(self) -> str | None:
        """Why the service is gone, or None while it runs."""
        if self.proc.poll() is None:
            return None
        return f"the service exited with {self.proc.returncode}"

    def wait_answering(self, url: str, timeout: float = READY_TIMEOUT_S) -> float:
        """Seconds from start until the URL answered; LoadFailed if it exits or never does."""
        from diagnose.load.loadtest import check_url

        start = time.monotonic()
        while True:
            if self.exited():
                raise LoadFailed(f"{self.exited()} before {url} answered:\n{self.output()}")
            try:
                check_url(url, timeout=2.0)
                return time.monotonic() - start
            except LoadFailed:
                if time.monotonic() - start > timeout:
                    raise LoadFailed(f"{url} did not answer within {timeout:.0f} s:\n"
                                     f"{self.output()}") from None
                time.sleep(0.1)

    def reading(self) -> CpuReading:
        """The service tree's CPU seconds and the machine's idle seconds, now."""
        from diagnose.load.sweep_steps import CpuMeter

        return CpuMeter([self.proc.pid]).read()

    def stop(self) -> None:
        """SIGTERM to the group, a grace, then SIGKILL to the group; reaps the process."""
        if self.proc.poll() is None:
            loadgen.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        loadgen.killpg(self.proc.pid, signal.SIGKILL)  # workers that outlived their master
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()


# -- one run --------------------------------------------------------------------------------------

def _generator(settings: RunSettings) -> Generator:
    """The settings' load generator: the settings of a run always carry one (cli/experiment.py)."""
    assert settings.generator is not None, "a run needs a load generator"
    return settings.generator


def measure_step(settings: RunSettings, seconds: int) -> loadgen.LoadResult:
    """One closed (--at-load N connections) or open (--at-rate R requests/s, the generator
    built with the open model) step of `seconds` on the URL."""
    level = settings.level
    assert level is not None  # --at-load or --at-rate: a sweep measures no single step
    return _generator(settings).measure(settings.url)(level, seconds)


def _step_figures(result: loadgen.LoadResult) -> Run:
    return Run(rps=round(result.requests_per_second, 2), p50_ms=result.latency_p50_ms,
               p99_ms=result.latency_p99_ms, errors=result.errors, requests=result.requests,
               generator_cores=(None if result.generator_cores is None
                                else round(result.generator_cores, 3)))


def _sweep_figures(settings: RunSettings, service: Service, out_dir: Path,
                   log: Callable[[str], None]) -> Run:
    """A whole sweep of the service (diagnose.loadtest.sweep, its own report written beside the
    experiment's), judged at the SLO or at its knee."""
    from diagnose.load import loadtest
    from diagnose.report.load_report import SweepSettings

    outcome = loadtest.sweep(
        url=settings.url, pids=[service.proc.pid],
        settings=SweepSettings(model=_generator(settings).model, warmup_s=settings.warmup_s,
                               slo_p99_ms=settings.slo_p99_ms),
        generator=_generator(settings), out_dir=out_dir, diagnose_seconds=None,
        user_rules=settings.user_rules, log=log)
    if outcome.stopped is not None:
        raise Stopped(outcome.stopped.exit_code - 128)
    step = throughput_at_slo(outcome.report, settings.slo_p99_ms)
    if step is None:
        raise LoadFailed("no step of the sweep " + (f"kept p99 within {settings.slo_p99_ms:g} ms"
                                                    if settings.slo_p99_ms else "was measured"))
    return Run(rps=step.throughput_rps, p50_ms=step.latency_ms.p50, p99_ms=step.latency_ms.p99,
               errors=step.error_count, level=step.level,
               sweep_report=outcome.json_path.name)


def _diagnose(settings: RunSettings, service: Service, level: float, out_dir: Path,
              log: Callable[[str], None]) -> StepDiagnosis:
    """The variant's verdict: attach to its service while the generator loads it at `level`."""
    from diagnose.load.loadtest import diagnose_under_load

    return diagnose_under_load(settings.url, [service.proc.pid], level,
                               settings.diagnose_seconds, _generator(settings), out_dir,
                               settings.user_rules, log)


def run_arm(arm: Arm, settings: RunSettings, out_dir: Path, diagnose: bool = False,
            log: Callable[[str], None] = lambda _m: None) -> Run:
    """Start the arm's service, wait for the URL, warm it up, measure it (and with `diagnose`,
    take its verdict under load), stop its process group: one run's figures. LoadFailed when
    the service exits or stops answering at any point."""
    service = Service(arm)
    try:
        ready_s = service.wait_answering(settings.url)
        before = service.reading()
        try:
            if settings.mode == "sweep":
                figures = _sweep_figures(settings, service, out_dir, log)
            else:
                if settings.warmup_s:
                    measure_step(settings, settings.warmup_s)
                before = service.reading()
                figures = _step_figures(measure_step(settings, settings.seconds))
        except LoadFailed:
            _check_alive(service, None)  # the service's exit, not the generator's
            raise
        after = service.reading()
        cores_here = cores_available(service.proc.pid)
        _check_alive(service, figures)
        if diagnose and settings.diagnose_seconds:
            level = figures.level or settings.level
            assert level is not None  # a sweep's figures carry its level; a step run, settings'
            figures = replace(figures, diagnosis=_without_paths(
                _diagnose(settings, service, level, out_dir, log)))
    finally:
        service.stop()
    cores, others = _cores_used(before, after, cores_here, figures.generator_cores)
    return replace(figures, service_cores=cores, other_cores=others, ready_s=round(ready_s, 2))


def _cores_used(before: CpuReading, after: CpuReading, cores: int,
                generator_cores: float | None) -> tuple[float | None, float | None]:
    """(cores the service used, cores the rest of the machine used) between two readings: the
    machine's busy time (/proc/stat) less the service's and the generator's. Another tenant's
    load takes the cores a variant would have gained, so a round it shared is worth less."""
    wall = after.at - before.at
    if wall <= 0 or before.service_cpu_s is None or after.service_cpu_s is None:
        return None, None
    service = max(0.0, after.service_cpu_s - before.service_cpu_s) / wall
    others = None
    if (before.machine_idle_s is not None and after.machine_idle_s is not None
            and generator_cores is not None):
        idle = max(0.0, after.machine_idle_s - before.machine_idle_s) / wall
        others = round(max(0.0, min(float(cores), cores - idle) - service - generator_cores), 3)
    return round(service, 3), others


def _without_paths(diagnosis: StepDiagnosis) -> StepDiagnosis:
    """The diagnosis as the experiment report carries it, its reports named relative to the
    experiment report (which is written beside them), not by this machine's paths."""
    return replace(diagnosis, html=None, json=None,
                   json_name=Path(diagnosis.json).name if diagnosis.json else None,
                   html_name=diagnosis.html_name or (Path(diagnosis.html).name
                                                     if diagnosis.html else None))


def _check_alive(service: Service, figures: Run | None) -> None:
    """A service that died during the window, or answered nothing, measured no capacity
    (`figures` None: only whether it died)."""
    if service.exited():
        raise LoadFailed(f"{service.exited()} while it was loaded:\n{service.output()}") from None
    if figures is not None and (not figures.rps or (
            figures.requests is not None and figures.requests <= (figures.errors or 0))):
        raise LoadFailed("the service stopped answering under load (no request succeeded)")


# -- the experiment -------------------------------------------------------------------------------

def experiment(arms: Sequence[Arm], settings: RunSettings, advice: Advice | None, out_dir: Path,
               log: Callable[[str], None], advised: Sequence[tuple[str, str]] = ()
               ) -> Outcome[ExperimentReport]:
    """Runs the arms in alternated rounds, each diagnosed in its first run. A stop signal ends it:
    the service of the run in progress and its generator are stopped, the rounds measured so far
    are written as a partial report. Raises LoadFailed (exit 12) after writing the report when
    the baseline or every other variant failed."""
    from diagnose.render.experiment_html import render_experiment_html
    from diagnose.render.load_markdown import render_experiment_markdown

    prepare_output_dir(out_dir, probe=True)
    gen = _generator(settings).describe()
    result, stopped = ExperimentResult(tuple(arms)), None
    diagnosed: set[str] = set()

    def one_run(arm: Arm) -> Run:
        diagnose = bool(settings.diagnose_seconds) and arm.name not in diagnosed
        diagnosed.add(arm.name)
        return run_arm(arm, settings, out_dir, diagnose, log)

    log(f"Experiment on {settings.url}: {len(arms)} variants, {settings.rounds} rounds of "
        f"{settings.seconds} s {settings.load_label()}, each run on a fresh service ...")
    with StopOnSignal():
        try:
            run_experiment(tuple(arms), settings.rounds, one_run, log, result)
        except Stopped as exc:
            stopped = exc
    report = experiment_report(result, settings, gen, advice,
                               stopped.name if stopped is not None else None, advised)
    name = f"diagnose-experiment-{urlsplit(settings.url).port or 80}-{datetime.now():%Y%m%d-%H%M%S}"
    json_path, html_path = write_report(
        out_dir, name, report.to_json(), render_experiment_html(report),
        lambda html: render_experiment_markdown(report, (html,)))
    error = None
    if stopped is not None:
        error = stopped.error(f"interrupted by {stopped.name} after {len(result.runs)} run"
                              f"{'s' if len(result.runs) != 1 else ''}: partial experiment "
                              f"report written")
    else:
        _raise_unless_compared(result, html_path)
    return Outcome(report, json_path, html_path, error)


def _raise_unless_compared(result: ExperimentResult, html_path: Path) -> None:
    """Exit 12 unless the baseline and at least one other variant completed."""
    failed = failed_arms(result)
    measured = {r.arm for r in result.runs if r.measured} - set(failed)
    base = result.arms[0].name
    if base in measured and len(measured) >= 2:
        return
    reasons = "; ".join(f"{name}: {why.splitlines()[0]}" for name, why in failed.items())
    raise LoadFailed(f"{'the baseline' if base not in measured else 'every other variant'} "
                     f"failed, nothing to compare ({reasons}); report written to {html_path}")
