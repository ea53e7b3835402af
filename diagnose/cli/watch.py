"""`diagnose watch`: sample a live pid on a schedule, write each window, push it to Pyroscope."""

from __future__ import annotations

from dataclasses import dataclass

import click

from diagnose.cli.common import EPILOG, log, run
from diagnose.cli.options import (OutputOptions, PushOptions, duration_option, option_group,
                                  output_options, watch_push_options)

WATCH_EPILOG = EPILOG + """
\b
watch: 0 when it ends after --windows or because the target exited; 13 when any window's
push failed (every window's report is kept; 13 wins over a signal's code); 129 / 130 / 143
when a signal stopped it (the window under way is still written and pushed).
"""


@dataclass(frozen=True)
class Schedule:
    """When `watch` samples: a window of `duration` seconds every `every` seconds, `windows`
    times (None: until the target exits or a signal)."""

    every: float = 60.0
    duration: float = 10.0
    windows: int | None = None


schedule_options = option_group("schedule", Schedule, [
    click.option("--every", type=click.FloatRange(min=1), default=60.0, show_default=True,
                 help="Seconds from one window's start to the next."),
    duration_option("Seconds sampled per window (at most --every), with the gentle sampling "
                    "plan."),
    click.option("--windows", type=click.IntRange(min=1), default=None,
                 help="Stop after this many windows. Default: until the target exits or a "
                      "signal."),
])


@click.command(name="watch", epilog=WATCH_EPILOG)
@click.argument("pid", type=click.IntRange(min=1))
@schedule_options
@watch_push_options
@click.option("--keep-reports", type=click.IntRange(min=0), default=10, show_default=True,
              help="Keep the files of the last N windows that were pushed (0: all). A window "
                   "not pushed, or whose push failed, is always kept.")
@output_options("Where each window's .html, .json and .speedscope.json files are written.",
                rules_help="A TOML file of extra frame-category patterns and check settings.")
def watch(pid: int, schedule: Schedule, push: PushOptions, keep_reports: int,
          outputs: OutputOptions) -> None:
    """Sample the running Python service PID for --duration seconds every --every seconds,
    write each window's report, and (with --push) send its profile to Grafana Pyroscope."""
    from diagnose.run import pipeline
    from diagnose.collect.capture import StopSignals
    from diagnose.publish.push import check_push_options, parse_push_url
    from diagnose.publish.watch_loop import WatchSettings, watch as run_watch

    every, duration, windows = schedule.every, schedule.duration, schedule.windows
    push_url, app_name, tenant = push.push_url, push.app_name, push.tenant

    def action() -> int:
        if duration > every:
            raise click.UsageError(f"--duration {duration:g} is longer than --every {every:g}: "
                                   f"a window must end before the next one starts")
        if tenant is not None and not push_url:
            raise click.UsageError("--tenant names the tenant of a --push: give --push URL too")
        try:
            tags = check_push_options(push_url, app_name, push.tags)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        settings = WatchSettings(every=every, duration=duration, output_dir=outputs.output_dir,
                                 windows=windows, keep_reports=keep_reports, push_url=push_url,
                                 app_name=app_name, tags=tags, tenant=tenant,
                                 push_timeout=push.push_timeout,
                                 push_retries=push.push_retries,
                                 user_rules=pipeline.load_user_rules(outputs.rules_file))
        where = (f", pushing to {parse_push_url(push_url).shown} as {app_name}"
                 if push_url else ", not pushed (no --push)")
        log(f"Watching pid {pid}: a {duration:g} s window every {every:g} s"
             + (f", {windows} window{'s' if windows > 1 else ''}" if windows else "")
             + where + "; Ctrl-C stops after the current window is written")
        with StopSignals() as stop:
            outcome = run_watch(pid, settings, stop, log)
        failed = outcome.failed_pushes
        if failed:
            log(f"error: {len(failed)} of {len(outcome.windows)} pushes failed; their reports "
                 f"are kept: " + ", ".join(str(w.outputs.html) for w in failed))
        log(f"Watch ended: {outcome.ended}")
        return outcome.exit_code

    run(action)
