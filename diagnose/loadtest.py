"""What `diagnose sweep` and `diagnose experiment` do between parsing options and printing: check
the URL answers, run the load under signal handling that stops every generator it started, write
the JSON and HTML reports, and (sweep) diagnose the service at its knee while it is loaded."""

from __future__ import annotations

import http.client
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import psutil

from diagnose import loadgen
from diagnose.collect.attach import StopSignals
from diagnose.errors import Interrupted, LoadFailed, NoSuchProcess, OutputFailed
from diagnose.sweep import CpuMeter, SweepResult, SweepSettings, run_sweep, summarize, sweep_report


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


def write_report(out_dir: Path, base: str, report: dict, html: str) -> tuple[Path, Path]:
    """`base.json` and `base.html` under `out_dir`, each whole or not at all; a name already taken
    gets a suffix (the same rules as the diagnosis reports)."""
    from diagnose import pipeline

    pipeline.prepare_output_dir(out_dir)
    base = pipeline._claim_name(out_dir, base)
    json_path, html_path = out_dir / f"{base}.json", out_dir / f"{base}.html"
    text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    try:
        pipeline._write_file(json_path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        pipeline._write_file(html_path, lambda tmp: tmp.write_text(html, encoding="utf-8"))
    except pipeline._WriteFailed as exc:
        raise OutputFailed(f"could not write {exc.path}: {exc.reason}") from None
    return json_path, html_path


def stamp(prefix: str, port: int | None) -> str:
    return f"{prefix}-{port or 80}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


@dataclass
class Generator:
    tool: str = "auto"
    threads: int = 2
    request_timeout_s: int = 10

    def describe(self) -> dict:
        try:
            wrk = loadgen.resolve_tool(self.tool)
        except loadgen.LoadError as exc:
            raise LoadFailed(str(exc)) from None
        return {"tool": "wrk" if wrk else "python",
                "path": os.path.basename(wrk) if wrk else None,
                "threads": self.threads if wrk else None, "closed_loop": True,
                "coordinated_omission_corrected": False}

    def measure(self, url: str) -> Callable[[int, int], loadgen.LoadResult]:
        def run(connections: int, seconds: int) -> loadgen.LoadResult:
            try:
                return loadgen.measure(url, seconds, connections, threads=self.threads,
                                       tool=self.tool, request_timeout_s=self.request_timeout_s)
            except loadgen.LoadError as exc:
                raise LoadFailed(f"the load generator failed: {exc}") from None
        return run


@dataclass
class Outcome:
    """A written sweep or experiment report; `stopped`: the signal that ended it early."""

    report: dict
    json_path: Path
    html_path: Path
    stopped: Interrupted | None


def sweep(url: str, pids: list[int], settings: SweepSettings, generator: Generator,
          out_dir: Path, diagnose_seconds: float | None, user_rules: dict | None,
          log: Callable[[str], None], diagnose_at: int | None = None) -> Outcome:
    """Runs the sweep; with `pids` and `diagnose_seconds`, diagnoses the service at the knee
    (or `diagnose_at`) under that load. A stop signal ends it early: the steps measured so far
    are written as a partial report and `stopped` carries the exit code."""
    from diagnose.render.sweep_html import render_sweep_html

    check_pids(pids)
    target_url = check_url(url)
    port = urlsplit(target_url).port
    from diagnose import pipeline

    pipeline.prepare_output_dir(out_dir, probe=True)  # a read-only directory is said first
    steps, stopped, diagnosis = [], None, None
    gen = generator.describe()
    meter = CpuMeter(pids)
    log(f"Sweeping {target_url} at concurrency {', '.join(map(str, settings.levels))} "
        f"with {gen['tool']} ...")
    result: SweepResult
    started = time.time()
    with StopOnSignal():
        try:
            result = run_sweep(settings, generator.measure(target_url), meter, log, steps)
            summary = summarize(result)
            level = diagnose_at or (summary.get("knee") or {}).get("concurrency")
            if pids and diagnose_seconds and level:
                diagnosis = diagnose_under_load(target_url, pids, level, diagnose_seconds,
                                                generator, out_dir, user_rules, log)
        except Stopped as exc:
            stopped = exc
            result = SweepResult(settings, steps, f"interrupted by {exc.name}", meter.cores,
                                 started, time.time(), interrupted=exc.name)
    target = {"url": target_url, "pids": pids}
    report = sweep_report(result, target, gen, diagnosis)
    json_path, html_path = write_report(out_dir, stamp("sweep", port), report,
                                        render_sweep_html(report))
    error = None
    if stopped is not None:
        error = stopped.error(f"interrupted by {stopped.name} after {len(steps)} step"
                              f"{'s' if len(steps) != 1 else ''}: partial sweep report written")
    return Outcome(report, json_path, html_path, error)


def diagnose_under_load(url: str, pids: list[int], concurrency: int, seconds: float,
                        generator: Generator, out_dir: Path, user_rules: dict | None,
                        log: Callable[[str], None]) -> dict:
    """`attach` on `pids` for `seconds` while the generator holds `concurrency` connections."""
    from diagnose import pipeline
    from diagnose.collect.attach import AttachOptions, SignalAbort, StopSignals, capture
    from diagnose.errors import DiagnoseError

    log(f"Diagnosing pid {', '.join(map(str, pids))} for {seconds:g} s at concurrency "
        f"{concurrency} ...")
    info: dict = {"concurrency": concurrency, "seconds": seconds}
    ramp_s = 1.0
    try:
        with loadgen.load(url, seconds + ramp_s + 4, concurrency, threads=generator.threads,
                          tool=generator.tool,
                          request_timeout_s=generator.request_timeout_s) as run:
            time.sleep(ramp_s)
            stop = StopSignals()  # attach's own handling inside its window
            cap = capture(pids, out_dir, AttachOptions(duration=seconds, rate=None,
                                                       native="auto", children=True),
                          stop=stop, warn=log)
            if stop.signum is not None:
                raise Stopped(stop.signum)
            outputs = pipeline.from_capture(cap, out_dir, user_rules, False)
    except SignalAbort as exc:
        raise Stopped(exc.error.exit_code - 128) from None
    except loadgen.LoadError as exc:
        info["error"] = f"the load generator failed: {exc}"
        return info
    except DiagnoseError as exc:
        info["error"] = exc.message
        return info
    verdict = outputs.report["verdict"]
    info.update(primary=verdict.get("primary"), headline=verdict.get("headline"),
                severity=verdict.get("severity"), html=str(outputs.html),
                html_name=outputs.html.name, json=str(outputs.json),
                rps_while_sampled=round(run.result.requests_per_second, 2) if run.result else None,
                partial=outputs.partial)
    return info
