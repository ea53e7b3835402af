"""What every command shares: logging to stderr, errors becoming exit codes in one place
(`run`), the verdict and report lines (`finish`, `finish_load`) and the CI gate. The option
groups the commands share are in `options`."""

from __future__ import annotations

import json
import sys
import webbrowser
from typing import TYPE_CHECKING

import click

from diagnose.cli.options import OutputOptions, TicketOptions
from diagnose.errors import DiagnoseError, ExitCode, Interrupted, SignalAbort
from diagnose.vocab import severity_rank

if TYPE_CHECKING:
    from diagnose.report.model import Verdict

EPILOG = """\b
Exit codes: 0 ok, 2 bad usage or rules file (diff: reports of two different programs), 3 no
such process, 4 not a Python process, 5 not permitted to attach, 6 not a profile file (diff,
export: not a diagnose report), 7 py-spy failed, 8 the target exited during sampling (a
partial report was still written), 9 no samples, 10 (--fail-on) the verdict reached that
severity (every output was written), 11 an output file could not be written, 12 (sweep,
experiment) the URL did not answer or the load generator failed, 13 (--push, watch) the
profiling server refused or never answered (the local outputs are kept), 129 / 130 / 143
stopped by SIGHUP / SIGINT (Ctrl-C) / SIGTERM (the partial report of what was collected was
still written; a second Ctrl-C aborts at once).
"""


def log(message: str) -> None:
    click.echo(message, err=True)


def run(action) -> None:
    try:
        code = action()
    except Interrupted as exc:
        log(exc.message)
        sys.exit(exc.exit_code)
    except DiagnoseError as exc:
        log(f"error: {exc.message}")
        sys.exit(exc.exit_code)
    except SignalAbort as exc:
        log(exc.error.message)
        sys.exit(exc.error.exit_code)
    except KeyboardInterrupt:  # Ctrl-C where no handler of ours runs: no traceback either
        log("interrupted by SIGINT: no report written")
        sys.exit(ExitCode.SIGINT)
    sys.exit(code or 0)


def finish(outputs, options: OutputOptions, ticket: TicketOptions,
           stopped: Interrupted | None = None, recorder_failure: str | None = None,
           window: tuple[float, float] | None = None) -> int:
    """Prints the verdict and where the report is, then the ticket's extras (pprof, push, gate).
    `stopped`: a signal ended the window early (its message replaces the "target exited"
    warning, its code is returned); `recorder_failure`: a py-spy recorder was killed mid-window
    and the report holds the others' samples; `window`: the sampled window, wall clock (for
    --push; a recorded file's own time is unknown)."""
    report = outputs.report
    if options.as_json:
        click.echo(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
        log(f"Report: {outputs.html}")
    elif ticket.print_format == "md" and getattr(outputs, "markdown", None) is not None:
        click.echo(outputs.markdown.read_text(encoding="utf-8"), nl=False)
        log(f"Report: {outputs.html}")
    else:
        from diagnose.render.deadlock_text import dump_lines  # the report model: after the window

        click.echo(f"Verdict: {verdict_line(report.verdict)}")
        for line in dump_lines(report):  # a deadlock, thread by thread (jstack's layout)
            click.echo(line)
        click.echo(f"Report: {outputs.html}   (also .json, .md, .speedscope.json)")
    if stopped is None and recorder_failure:
        log(f"warning: {recorder_failure}; the report is marked partial")
    elif stopped is None and outputs.partial:
        log("warning: the target exited during sampling; the report is marked partial")
    if options.open_browser:
        webbrowser.open(outputs.html.resolve().as_uri())
    extras_code = _ticket_extras(outputs, ticket, window)
    if stopped is not None:
        log(stopped.message)
        return stopped.exit_code
    if recorder_failure:
        return ExitCode.PROFILER_FAILED
    if outputs.partial:
        return ExitCode.TARGET_EXITED
    if extras_code != ExitCode.OK:
        return extras_code
    return gate(ExitCode.OK, report.verdict, ticket.fail_on, "the verdict")


def _ticket_extras(outputs, ticket: TicketOptions, window: tuple[float, float] | None) -> int:
    """--pprof and --push, after the report files exist: a failure here is said in one line and
    returns its exit code (11, 13); nothing already written is removed."""
    code = ExitCode.OK
    pprof_path = None
    if ticket.write_pprof:
        from diagnose.export.pprof import write_pprof

        target = outputs.json.with_name(outputs.json.name.removesuffix(".json") + ".pb.gz")
        try:
            pprof_path = write_pprof(outputs.report, target)
            log(f"pprof: {pprof_path}")
        except DiagnoseError as exc:
            log(f"error: {exc.message}")
            code = exc.exit_code
    server = ticket.push
    if server.push_url:
        from diagnose.publish import push

        start, end = window or (None, None)  # a recorded file's own time is unknown
        kept = [p for p in (outputs.html, outputs.json, pprof_path) if p is not None]
        try:
            result = push.push_report(outputs.report, server.push_url, server.app_name,
                                      push.parse_tags(server.tags), start, end, kept=kept,
                                      tenant=server.tenant)
            log(f"pushed to {result.url} (HTTP {result.status}, {result.tries} "
                 f"tr{'y' if result.tries == 1 else 'ies'})")
        except push.PushFailed as exc:
            log(f"error: {exc.message}")
            code = code or exc.exit_code
    return code


def verdict_line(verdict: Verdict) -> str:
    """The terminal's verdict line: the finding's name and what it found, keeping whatever the
    headline says first about the verdict itself (low confidence; a profile that cannot show
    waits; no clear bottleneck), never dropping it."""
    headline = verdict.headline
    primary = verdict.primary
    if primary in ("none", "inconclusive"):
        return headline
    label = primary.replace("_", " ")
    caveat = ""
    if headline.startswith("low confidence: ") and " — " in headline:
        caveat, headline = headline.split(" — ", 1)
        caveat = f" ({caveat})"
    return f"{label}{caveat} — {headline.split(' — ', 1)[-1]}"


def finish_load(outcome, lines: list[str], options: OutputOptions, ticket: TicketOptions) -> int:
    """Prints a sweep's or an experiment's verdict (or its JSON report, or with --print md its
    Markdown ticket summary) and where the report is; the exit code: 0, or 128 + the signal that
    stopped it (the partial report was written)."""
    if options.as_json:
        click.echo(json.dumps(outcome.report.to_json(), indent=2, ensure_ascii=False))
    elif ticket.print_format == "md":
        click.echo(outcome.markdown_path.read_text(encoding="utf-8"), nl=False)
    else:
        for line in lines:
            click.echo(line)
    log(f"Report: {outcome.html_path}   (also .json, .md)")
    if options.open_browser:
        webbrowser.open(outcome.html_path.resolve().as_uri())
    if outcome.stopped is not None:
        log(outcome.stopped.message)
        return outcome.stopped.exit_code
    return ExitCode.OK


def gate(code: int, verdict: Verdict | None, fail_on: str | None, what: str) -> int:
    """--fail-on: exit 10 (after every output is written) when `verdict` reached the asked
    severity and nothing else already failed."""
    if fail_on is None or code != ExitCode.OK or not verdict:
        return code
    severity = verdict.severity
    if severity_rank(severity) >= severity_rank(fail_on):
        log(f"fail-on {fail_on}: {what} is {severity} ({verdict.primary}): exit "
             f"{ExitCode.FINDING_GATE}")
        return ExitCode.FINDING_GATE
    return code
