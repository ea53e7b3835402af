"""Runs an experiment end to end: the variants' services, the load, the written report."""

from __future__ import annotations

from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from diagnose.loadtest import Outcome, StopOnSignal, Stopped, stamp, write_report


def experiment(arms, settings, advice: dict | None, out_dir: Path,
               log: Callable[[str], None]) -> Outcome:
    """Runs both arms in alternated rounds (diagnose/experiment.py). A stop signal ends it: the
    service of the run in progress and its generator are stopped, the rounds measured so far
    are written as a partial report."""
    from diagnose import pipeline
    from diagnose.experiment import ExperimentResult, experiment_report, run_arm, run_experiment
    from diagnose.render.sweep_html import render_experiment_html

    pipeline.prepare_output_dir(out_dir, probe=True)
    gen = settings.generator.describe()
    result, stopped = ExperimentResult(tuple(arms)), None
    log(f"Experiment on {settings.url}: {settings.rounds} rounds of {settings.seconds} s at "
        f"concurrency {settings.concurrency}, each run on a fresh service ...")
    with StopOnSignal():
        try:
            run_experiment(tuple(arms), settings.rounds, lambda arm: run_arm(arm, settings),
                           log, result)
        except Stopped as exc:
            stopped = exc
    report = experiment_report(result, settings, gen, advice,
                               stopped.name if stopped is not None else None)
    json_path, html_path = write_report(out_dir, stamp("experiment", urlsplit(settings.url).port),
                                        report, render_experiment_html(report))
    error = None
    if stopped is not None:
        error = stopped.error(f"interrupted by {stopped.name} after {len(result.runs)} run"
                              f"{'s' if len(result.runs) != 1 else ''}: partial experiment "
                              f"report written")
    return Outcome(report, json_path, html_path, error)
