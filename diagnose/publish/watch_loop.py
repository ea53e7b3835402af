"""`diagnose watch`: a gentle sampling window on a schedule; each window's report is written,
then its profile pushed. Ends after --windows, when the target exits, or on a stop signal."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

import psutil

from diagnose.run import pipeline
from diagnose.collect.capture import AttachOptions, StopSignals, capture, describe_target
from diagnose.errors import DiagnoseError, ExitCode, Interrupted, NoSamples
from diagnose.publish.push import PushFailed, PushResult, push_report
from diagnose.outputs.files import prepare_output_dir

POLL_S = 0.2  # how often the wait between windows looks for a signal or the target's exit


@dataclass(frozen=True)
class WatchSettings:
    every: float  # seconds from one window's start to the next
    duration: float  # seconds sampled per window (<= every)
    output_dir: Path
    windows: int | None = None  # None: until the target exits or a signal
    keep_reports: int = 10  # the last N pushed windows' files are kept; 0 keeps all
    push_url: str | None = None
    app_name: str = "diagnose"
    tags: dict = field(default_factory=dict)
    tenant: str | None = None  # X-Scope-OrgID of a multi-tenant Pyroscope
    push_timeout: float = 10.0
    push_retries: int = 3
    user_rules: dict | None = None


@dataclass
class Window:
    number: int
    outputs: pipeline.Outputs
    pushed: PushResult | None = None
    push_error: str | None = None


@dataclass
class WatchOutcome:
    windows: list[Window]
    ended: str  # why the watch ended, one line
    stopped: Interrupted | None = None  # a stop signal ended it

    @property
    def failed_pushes(self) -> list[Window]:
        return [w for w in self.windows if w.push_error is not None]

    @property
    def exit_code(self) -> int:
        """13 when any push failed (their reports are kept): that is the one a script must act
        on; else 128 + the stop signal's number; else 0."""
        if self.failed_pushes:
            return ExitCode.PUSH_FAILED
        if self.stopped is not None:
            return self.stopped.exit_code
        return ExitCode.OK


class _StopRequested(Exception):
    """A stop signal while a push waited to retry: give up that push, keep its report."""


def target_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # not ours to read, but there


def watch(pid: int, settings: WatchSettings, stop: StopSignals,
          log: Callable[[str], None]) -> WatchOutcome:
    """Runs the windows. Before the first one a missing or unreadable target is an error (exit
    3, 4, ...); after it, the target's exit ends the watch normally. `stop` must be installed by
    the caller; here a first signal never aborts: during a window it ends the window early (its
    partial report is written and pushed), between windows it ends the wait, and the watch
    stops. A second signal aborts at once (StopSignals)."""
    prepare_output_dir(settings.output_dir, probe=True)
    describe_target(pid)
    stop.graceful = True  # from the start: nothing of a finished window may be dropped
    done: list[Window] = []
    prunable: deque[Window] = deque()
    schedule_start = time.monotonic()
    number = 0
    while settings.windows is None or number < settings.windows:
        number += 1
        window, ended = _one_window(pid, number, settings, stop, log)
        if window is not None:
            done.append(window)
            _prune(window, prunable, settings.keep_reports)
        if ended is not None:
            return WatchOutcome(done, ended.ended, ended.stopped)
        if settings.windows is not None and number >= settings.windows:
            break
        ended_by = _wait_for(schedule_start + number * settings.every, pid, stop)
        if ended_by is not None:
            return WatchOutcome(done, *_describe_end(ended_by, pid, stop, len(done)))
    return WatchOutcome(done, f"{len(done)} window{'s' if len(done) != 1 else ''} done")


def _one_window(pid: int, number: int, settings: WatchSettings, stop: StopSignals,
                log: Callable[[str], None]) -> tuple[Window | None, WatchOutcome | None]:
    """Captures, writes and pushes one window: (the window, None) to go on; (the window or
    None, an outcome) when the target exited or a signal stopped the watch."""
    options = AttachOptions(duration=settings.duration)  # no --rate: the gentle plan
    total = f"/{settings.windows}" if settings.windows else ""
    try:
        try:
            cap = capture([pid], settings.output_dir, options, None, stop=stop, warn=log)
        finally:
            stop.recorders.clear()  # reaped by capture; the next window starts a fresh list
        outputs = pipeline.from_capture(cap, settings.output_dir, settings.user_rules, False)
    except Interrupted as exc:  # the signal came before py-spy wrote anything
        return None, WatchOutcome([], f"window {number}: {exc.message}", exc)
    except DiagnoseError as exc:
        if not target_alive(pid):
            return None, WatchOutcome([], f"the target {pid} exited; window {number} had "
                                          f"nothing to report")
        if isinstance(exc, NoSamples) and stop.signum is not None:
            return None, WatchOutcome([], f"window {number}: stopped by {stop.name} before "
                                          f"any sample", stop.error("no report written"))
        raise
    window = Window(number, outputs)
    report = outputs.report
    end = cap.started_at + (cap.sampling.duration_s or settings.duration)
    if settings.push_url:
        try:
            window.pushed = push_report(
                report, settings.push_url, settings.app_name, settings.tags, cap.started_at, end,
                kept=[outputs.html, outputs.json, outputs.speedscope],
                timeout=settings.push_timeout, retries=settings.push_retries,
                sleep=lambda seconds: _sleep_unless_stopped(seconds, stop), tenant=settings.tenant)
        except PushFailed as exc:
            window.push_error = exc.message
        except _StopRequested:
            window.push_error = (f"stopped by {stop.name} before the push succeeded; the local "
                                 f"report is kept at {outputs.html}")
    verdict = report.verdict
    span = (f"{datetime.fromtimestamp(cap.started_at):%H:%M:%S}-"
            f"{datetime.fromtimestamp(end):%H:%M:%S}")
    line = (f"window {number}{total} [{span}]: {verdict.primary.replace('_', ' ')}"
            f" ({verdict.severity or 'none'})")
    if window.pushed is not None:
        tries = window.pushed.tries
        line += f"; pushed (HTTP {window.pushed.status}, {tries} tr{'y' if tries == 1 else 'ies'})"
    elif window.push_error is not None:
        line = f"warning: {line}; push failed: {window.push_error}"
    log(line + f"; report {outputs.html}")
    if cap.interrupted_by is not None:
        return window, WatchOutcome([], f"stopped by {stop.name} during window {number} (its "
                                        f"partial report was written)",
                                    stop.error(f"stopped by {stop.name}"))
    if not target_alive(pid):
        return window, WatchOutcome([], f"the target {pid} exited during window {number}")
    return window, None


def _sleep_unless_stopped(seconds: float, stop: StopSignals) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if stop.signum is not None:
            raise _StopRequested()
        time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
    if stop.signum is not None:
        raise _StopRequested()


def _wait_for(when: float, pid: int, stop: StopSignals) -> str | None:
    """Waits until `when` (time.monotonic()); "signal" or "exited" when that ends it first. A
    window that overran its period is followed at once."""
    while True:
        if stop.signum is not None:
            return "signal"
        if not target_alive(pid):
            return "exited"
        remaining = when - time.monotonic()
        if remaining <= 0:
            return None
        time.sleep(min(POLL_S, remaining))


def _describe_end(ended_by: str, pid: int, stop: StopSignals,
                  windows: int) -> tuple[str, Interrupted | None]:
    count = f"{windows} window{'s' if windows != 1 else ''} written"
    if ended_by == "exited":
        return f"the target {pid} exited; {count}", None
    return (f"stopped by {stop.name} between windows; {count}",
            stop.error(f"stopped by {stop.name}"))


def _prune(window: Window, prunable: deque[Window], keep: int) -> None:
    """Keeps the files of the last `keep` windows that reached the server. A window whose push
    failed, or that was not pushed at all, is never removed: its files are the only copy."""
    if keep <= 0 or window.pushed is None:
        return
    prunable.append(window)
    while len(prunable) > keep:
        old_json = Path(prunable.popleft().outputs.json)
        base = old_json.name.removesuffix(".json")
        for suffix in pipeline.OUTPUT_SUFFIXES:  # every file a report may write
            try:
                (old_json.parent / f"{base}{suffix}").unlink(missing_ok=True)
            except OSError:
                pass
