"""What `diagnose sweep` and `diagnose experiment` do between parsing options and printing: check
the URL answers, run the load under signal handling that stops every generator it started, write
the JSON and HTML reports, and (sweep) diagnose the service at its knee while it is loaded."""

from __future__ import annotations

import http.client
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Generic, TypeVar
from urllib.parse import urlsplit

import psutil

from diagnose.load import loadgen
from diagnose.report.step_diagnosis import StepDiagnosis
from diagnose.collect.capture import StopSignals
from diagnose.errors import Interrupted, LoadFailed, NoSuchProcess
from diagnose.outputs.files import prepare_output_dir, write_report
from diagnose.report.load_report import (ExperimentReport, GeneratorInfo, SweepReport, SweepSettings,
                                         SweepTarget)
from diagnose.load.sweep_steps import CpuMeter, Step, SweepResult, run_sweep, sweep_report

R = TypeVar("R", SweepReport, ExperimentReport)


class Stopped(BaseException):
    """A stop signal arrived: raised in the main thread so every `with load(...)` aborts its
    generator on the way out (BaseException: no `except Exception` swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name

    def error(self, message: str) -> Interrupted:
        return Interrupted(message, 128 + self.signum)


class StopOnSignal(StopSignals):
    """SIGINT / SIGTERM / SIGHUP raise Stopped in the main thread while installed (attach's
    installation rules: main thread only, a signal ignored when we started stays ignored)."""

    def _handle(self, signum: int, _frame) -> None:
        raise Stopped(signum)


def check_url(url: str, timeout: float = 5.0) -> str:
    """The loopback form of `url` once one GET on it answers (any HTTP status); LoadFailed
    (exit 12) when nothing answers, ValueError for a URL that may not be loaded."""
    target = loadgen.loopback_url(url)
    parts = urlsplit(target)
    assert parts.hostname is not None  # loopback_url writes the host
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""))
        conn.getresponse().read()
    except (OSError, http.client.HTTPException) as exc:
        raise LoadFailed(f"{target} does not answer: {exc}") from None
    finally:
        conn.close()
    return target


def check_pids(pids: list[int]) -> None:
    for pid in pids:
        if not psutil.pid_exists(pid):
            raise NoSuchProcess(f"no process with pid {pid}")


def stamp(prefix: str, port: int | None) -> str:
    return f"{prefix}-{port or 80}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


# Open model: the most requests in flight at once (beyond it the generator queues them, their
# latency still counting from the intended send time).
OPEN_MODEL_CONNECTIONS = 64


@dataclass
class Generator:
    """How load is generated: the tool, and what every request looks like."""

    tool: str = "auto"
    threads: int = 2
    request_timeout_s: int = 10
    model: str = "closed"          # "closed": levels are connections; "open": requests/s
    arrivals: str = "constant"     # open model's inter-arrival times: "constant" / "poisson"
    method: str = "GET"
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()

    def describe(self) -> GeneratorInfo:
        if self.model == "open":
            if self.tool == "wrk":
                raise LoadFailed("wrk cannot drive an open model (a constant request rate); "
                                 "use --tool python or auto")
            wrk = None
        else:
            try:
                wrk = loadgen.resolve_tool(self.tool)
            except loadgen.LoadError as exc:
                raise LoadFailed(str(exc)) from None
        return GeneratorInfo(
            tool="wrk" if wrk else "python", path=os.path.basename(wrk) if wrk else None,
            threads=self.threads if wrk else None, model=self.model,
            closed_loop=self.model == "closed",
            arrivals=self.arrivals if self.model == "open" else None,
            # Open model: each latency counts from the request's intended send time.
            coordinated_omission_corrected=self.model == "open",
            method=self.method, body_bytes=len(self.body) if self.body else 0,
            headers=tuple(name for name, _ in self.headers))

    def load_kwargs(self, level: float) -> dict:
        """loadgen.load()'s arguments for one run at `level` (connections or requests/s)."""
        kwargs = dict(threads=self.threads, tool=self.tool,
                      request_timeout_s=self.request_timeout_s, method=self.method,
                      body=self.body, headers=self.headers)
        if self.model == "open":
            kwargs.update(rate=float(level), arrivals=self.arrivals, tool="python")
            return {"connections": OPEN_MODEL_CONNECTIONS, **kwargs}
        return {"connections": int(level), **kwargs}

    def measure(self, url: str) -> Callable[[float, int], loadgen.LoadResult]:
        def run(level: float, seconds: int) -> loadgen.LoadResult:
            kwargs = self.load_kwargs(level)
            try:
                return loadgen.measure(url, seconds, kwargs.pop("connections"), **kwargs)
            except loadgen.LoadError as exc:
                raise LoadFailed(f"the load generator failed: {exc}") from None
        return run


@dataclass(frozen=True)
class Outcome(Generic[R]):
    """A written sweep or experiment report; `stopped`: the signal that ended it early."""

    report: R
    json_path: Path
    html_path: Path
    stopped: Interrupted | None

    @property
    def markdown_path(self) -> Path:
        """The ticket summary written beside the report."""
        return self.json_path.with_suffix(".md")


def sweep(url: str, pids: list[int], settings: SweepSettings, generator: Generator,
          out_dir: Path, diagnose_seconds: float | None, user_rules: dict | None,
          log: Callable[[str], None]) -> Outcome[SweepReport]:
    """Runs the sweep; with `pids` and `diagnose_seconds`, diagnoses the service under every
    step's load (its verdict and full report per step). A stop signal ends it early: the steps
    measured so far are written as a partial report and `stopped` carries the exit code."""
    from diagnose.render.load_markdown import render_sweep_markdown
    from diagnose.render.sweep_html import render_sweep_html

    check_pids(pids)
    gen = generator.describe()  # a generator that cannot drive this load: said before the URL
    target_url = check_url(url)
    port = urlsplit(target_url).port
    prepare_output_dir(out_dir, probe=True)  # a read-only directory is said first
    steps: list[Step] = []
    stopped: Stopped | None = None
    meter = CpuMeter(pids)
    unit = "concurrency" if settings.model == "closed" else "req/s"
    log(f"Sweeping {target_url} at {unit} {', '.join(f'{x:g}' for x in settings.levels)} "
        f"({settings.model} model) with {gen.tool} ...")

    def diagnose_step(step) -> None:
        if pids and diagnose_seconds:
            step.diagnosis = diagnose_under_load(target_url, pids, step.level, diagnose_seconds,
                                                 generator, out_dir, user_rules, log,
                                                 throughput_rps=step.rps)

    result: SweepResult
    started = time.time()
    with StopOnSignal():
        try:
            result = run_sweep(settings, generator.measure(target_url), meter, log, steps,
                               after_step=diagnose_step)
        except Stopped as exc:
            stopped = exc
            result = SweepResult(settings, steps, f"interrupted by {exc.name}", meter.cores,
                                 started, time.time(), interrupted=exc.name)
    report = sweep_report(result, SweepTarget(url=target_url, pids=tuple(pids)), gen)
    name = f"diagnose-sweep-{pids[0] if pids else f'127.0.0.1-{port or 80}'}"
    json_path, html_path = write_report(out_dir, f"{name}-{datetime.now():%Y%m%d-%H%M%S}",
                                        report.to_json(), render_sweep_html(report),
                                        lambda html: render_sweep_markdown(report, (html,)))
    error = None
    if stopped is not None:
        error = stopped.error(f"interrupted by {stopped.name} after {len(steps)} step"
                              f"{'s' if len(steps) != 1 else ''}: partial sweep report written")
    return Outcome(report, json_path, html_path, error)


def diagnose_under_load(url: str, pids: list[int], level: float, seconds: float,
                        generator: Generator, out_dir: Path, user_rules: dict | None,
                        log: Callable[[str], None], throughput_rps: float | None = None
                        ) -> StepDiagnosis:
    """`attach` on `pids` for `seconds` while the generator holds `level` (connections, or
    requests/s in the open model): the verdict under that load and its written report.
    `throughput_rps`: what that level served when measured (the sweep step's), written into
    the report's `load` so reports of two runs compare per request."""
    from diagnose.run import pipeline
    from diagnose.collect.capture import (AttachOptions, SignalAbort, StopSignals, capture,
                                         window_close_s)
    from diagnose.errors import DiagnoseError
    from diagnose.report.model import Load

    what = (f"concurrency {int(level)}" if generator.model == "closed" else f"{level:g} req/s")
    log(f"  diagnosing pid {', '.join(map(str, pids))} for {seconds:g} s at {what} ...")
    closed = generator.model == "closed"
    info = StepDiagnosis(seconds=seconds, concurrency=int(level) if closed else None,
                         rate=None if closed else level)
    ramp_s = 1.0
    kwargs = generator.load_kwargs(level)
    # The load outlasts the window by what closes it (py-spy's start-up, a late recorder: see
    # window_close_s) and no more: leaving the block waits for the generator to end.
    load_s = ramp_s + window_close_s(seconds) + 0.5
    try:
        with loadgen.load(url, load_s, kwargs.pop("connections"), **kwargs) as run:
            time.sleep(ramp_s)
            stop = StopSignals()  # attach's own handling inside its window
            cap = capture(pids, out_dir, AttachOptions(duration=seconds, rate=None,
                                                       native="auto", children=True),
                          stop=stop, warn=log)
            if stop.signum is not None:
                raise Stopped(stop.signum)
            load = None
            if throughput_rps is not None:
                load = (Load(round(throughput_rps, 2), concurrency=int(level)) if closed
                        else Load(round(throughput_rps, 2), rate=level))
            outputs = pipeline.from_capture(cap, out_dir, user_rules, False, load=load)
    except SignalAbort as exc:
        raise Stopped(exc.error.exit_code - 128) from None
    except loadgen.LoadError as exc:
        return replace(info, error=f"the load generator failed: {exc}")
    except DiagnoseError as exc:
        return replace(info, error=exc.message)
    verdict = outputs.report.verdict
    log(f"    verdict: {verdict.primary}")
    return replace(info, primary=verdict.primary, headline=verdict.headline,
                   severity=str(verdict.severity), html=str(outputs.html),
                   html_name=outputs.html.name, json=str(outputs.json),
                   rps_while_sampled=(round(run.result.requests_per_second, 2) if run.result
                                      else None),
                   partial=outputs.partial)
