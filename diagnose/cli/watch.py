"""`diagnose watch`: sample a live pid on a schedule, write each window, push it to Pyroscope."""

from __future__ import annotations

from pathlib import Path

import click

from diagnose.cli.common import EPILOG, log, run

WATCH_EPILOG = EPILOG + """
\b
watch: 0 when it ends after --windows or because the target exited; 13 when any window's
push failed (every window's report is kept; 13 wins over a signal's code); 129 / 130 / 143
when a signal stopped it (the window under way is still written and pushed).
"""


@click.command(name="watch", epilog=WATCH_EPILOG)
@click.argument("pid", type=click.IntRange(min=1))
@click.option("--every", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds from one window's start to the next.")
@click.option("--duration", "-d", type=click.FloatRange(min=1), default=10.0, show_default=True,
              help="Seconds sampled per window (at most --every), with the gentle sampling plan.")
@click.option("--windows", type=click.IntRange(min=1), default=None,
              help="Stop after this many windows. Default: until the target exits or a signal.")
@click.option("--push", "push_url", metavar="URL",
              help="A Grafana Pyroscope server (http:// or https://, e.g. http://localhost:4040): "
                   "each window's pprof profile is POSTed to its /ingest API. Without it the "
                   "windows are only written locally.")
@click.option("--app-name", default="diagnose", show_default=True,
              help="The application name in Pyroscope (letters, digits, _ . - /).")
@click.option("--tag", "tag_pairs", multiple=True, metavar="NAME=VALUE",
              help="A label on every pushed profile (repeatable); beside verdict, service and "
                   "host, which are added by default (pid and tid ride on the samples as "
                   "numbers: no series per process).")
@click.option("--tenant", metavar="ID",
              help="The tenant of a multi-tenant Pyroscope (sent as X-Scope-OrgID).")
@click.option("--push-timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds to wait for the server on each try.")
@click.option("--push-retries", type=click.IntRange(0, 10), default=3, show_default=True,
              help="Further tries after a connection error, a timeout, HTTP 429 or 5xx "
                   "(waiting 0.5 s, 1 s, 2 s, ... between them).")
@click.option("--keep-reports", type=click.IntRange(min=0), default=10, show_default=True,
              help="Keep the files of the last N windows that were pushed (0: all). A window "
                   "not pushed, or whose push failed, is always kept.")
@click.option("--output-dir", "-o", type=click.Path(file_okay=False, path_type=Path),
              default=Path("diagnose-reports"), show_default=True,
              help="Where each window's .html, .json and .speedscope.json files are written.")
@click.option("--rules", "rules_file", type=click.Path(dir_okay=False),
              help="A TOML file of extra frame-category patterns and check settings.")
def watch(pid, every, duration, windows, push_url, app_name, tag_pairs, tenant, push_timeout,
          push_retries, keep_reports, output_dir, rules_file):
    """Sample the running Python service PID for --duration seconds every --every seconds,
    write each window's report, and (with --push) send its profile to Grafana Pyroscope."""
    from diagnose.report import pipeline
    from diagnose.collect.attach import StopSignals
    from diagnose.publish.push import check_push_options, parse_push_url
    from diagnose.publish.watch import WatchSettings, watch as run_watch

    def action():
        if duration > every:
            raise click.UsageError(f"--duration {duration:g} is longer than --every {every:g}: "
                                   f"a window must end before the next one starts")
        if tenant is not None and not push_url:
            raise click.UsageError("--tenant names the tenant of a --push: give --push URL too")
        try:
            tags = check_push_options(push_url, app_name, tag_pairs)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        settings = WatchSettings(every=every, duration=duration, output_dir=output_dir,
                                 windows=windows, keep_reports=keep_reports, push_url=push_url,
                                 app_name=app_name, tags=tags, tenant=tenant,
                                 push_timeout=push_timeout,
                                 push_retries=push_retries,
                                 user_rules=pipeline.load_user_rules(rules_file))
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
