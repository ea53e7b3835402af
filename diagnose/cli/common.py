"""What every command shares: logging to stderr, errors becoming exit codes in one place
(`run`), the verdict and report lines (`finish`, `finish_load`), the CI gate and the option
groups several commands take."""

from __future__ import annotations

import json
import sys
import webbrowser
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from diagnose.errors import DiagnoseError, ExitCode, Interrupted, SignalAbort
from diagnose.model.vocab import GATE_SEVERITIES, severity_rank
from diagnose.render.deadlock_text import dump_lines

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


def finish(outputs, as_json: bool, open_browser: bool, stopped: Interrupted | None = None,
            recorder_failure: str | None = None, ticket: Ticket | None = None) -> int:
    """Prints the verdict and where the report is, then the ticket's extras (pprof, push, gate).
    `stopped`: a signal ended the window early (its message replaces the "target exited"
    warning, its code is returned); `recorder_failure`: a py-spy recorder was killed mid-window
    and the report holds the others' samples."""
    ticket = ticket or Ticket()
    report = outputs.report
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
        log(f"Report: {outputs.html}")
    elif ticket.print_format == "md" and getattr(outputs, "markdown", None) is not None:
        click.echo(outputs.markdown.read_text(encoding="utf-8"), nl=False)
        log(f"Report: {outputs.html}")
    else:
        click.echo(f"Verdict: {verdict_line(report.verdict)}")
        for line in dump_lines(report):  # a deadlock, thread by thread (jstack's layout)
            click.echo(line)
        click.echo(f"Report: {outputs.html}   (also .json, .md, .speedscope.json)")
    if stopped is None and recorder_failure:
        log(f"warning: {recorder_failure}; the report is marked partial")
    elif stopped is None and outputs.partial:
        log("warning: the target exited during sampling; the report is marked partial")
    if open_browser:
        webbrowser.open(outputs.html.resolve().as_uri())
    extras_code = _ticket_extras(outputs, ticket)
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


def _ticket_extras(outputs, ticket: Ticket) -> int:
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
    if ticket.push_url:
        from diagnose.publish import push

        start, end = ticket.window or (None, None)  # a recorded file's own time is unknown
        kept = [p for p in (outputs.html, outputs.json, pprof_path) if p is not None]
        try:
            result = push.push_report(outputs.report, ticket.push_url, ticket.app_name,
                                      push.parse_tags(ticket.tags), start, end, kept=kept,
                                      tenant=ticket.tenant)
            log(f"pushed to {result.url} (HTTP {result.status}, {result.tries} "
                 f"tr{'y' if result.tries == 1 else 'ies'})")
        except push.PushFailed as exc:
            log(f"error: {exc.message}")
            code = code or exc.exit_code
    return code


_common_output = [
    click.option("--output-dir", "-o", type=click.Path(file_okay=False, path_type=Path),
                 default=Path("diagnose-reports"), show_default=True,
                 help="Where the .html, .json and .speedscope.json files are written."),
    click.option("--rules", "rules_file", type=click.Path(dir_okay=False),
                 help="A TOML file of extra frame-category patterns and check settings "
                      "(checked before the built-in rules)."),
    click.option("--json", "as_json", is_flag=True,
                 help="Print the JSON report on stdout (logs go to stderr)."),
    click.option("--open", "open_browser", is_flag=True, help="Open the HTML report in a browser."),
]


def common_output(fn):
    for option in reversed(_common_output):
        fn = option(fn)
    return fn


# The output options of the commands that write one page and its JSON (diff, experiment).
_page_output = [
    click.option("--output-dir", "-o", type=click.Path(file_okay=False, path_type=Path),
                 default=Path("diagnose-reports"), show_default=True,
                 help="Where the .html and .json files are written."),
    click.option("--json", "as_json", is_flag=True,
                 help="Print the JSON on stdout (logs go to stderr)."),
    click.option("--open", "open_browser", is_flag=True, help="Open the HTML page in a browser."),
]


def page_output(fn):
    for option in reversed(_page_output):
        fn = option(fn)
    return fn


_ticket_options = [
    click.option("--fail-on", type=click.Choice(GATE_SEVERITIES), default=None,
                 help="CI gate: exit 10 when the verdict's severity reaches this level, after "
                      "writing every output."),
    click.option("--print", "print_format", type=click.Choice(["md"]), default=None,
                 help="Print the Markdown ticket summary (also written as .md) on stdout instead "
                      "of the verdict lines."),
    click.option("--pprof", "write_pprof", is_flag=True,
                 help="Also write the samples as a gzipped pprof profile (.pb.gz) with thread, "
                      "role, state, category, pid and tid labels."),
    click.option("--push", "push_url", metavar="URL",
                 help="Send the pprof profile to a Grafana Pyroscope server's ingest API "
                      "(e.g. http://pyroscope:4040); the local outputs are written first and "
                      "kept whatever happens (exit 13 when the push fails)."),
    click.option("--app-name", default="diagnose", show_default=True,
                 help="--push: the application name the profile is filed under."),
    click.option("--tag", "tags", multiple=True, metavar="NAME=VALUE",
                 help="--push: an extra label (repeatable); verdict, service and host are "
                      "added (pid and tid ride on the samples as numbers: no series per process)."),
    click.option("--tenant", metavar="ID",
                 help="--push: the tenant of a multi-tenant Pyroscope (sent as X-Scope-OrgID)."),
]


def print_option(fn):
    """--print md for the commands that take no other ticket option (sweep, experiment)."""
    return _ticket_options[1](fn)


def check_print(print_format: str | None, as_json: bool) -> None:
    if print_format and as_json:
        raise click.UsageError("--print md and --json both print on stdout: choose one")


def ticket_options(fn):
    for option in reversed(_ticket_options):
        fn = option(fn)
    return fn


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


@dataclass
class Ticket:
    """What a run does with its outputs besides printing the verdict: the CI gate, the Markdown
    summary on stdout, the pprof file and the push to a profiling server."""

    fail_on: str | None = None
    print_format: str | None = None
    write_pprof: bool = False
    push_url: str | None = None
    app_name: str = "diagnose"
    tags: tuple[str, ...] = ()
    tenant: str | None = None
    window: tuple[float, float] | None = None  # the sampled window, wall clock (for --push)

    def check(self, as_json: bool) -> None:
        """Usage errors said before any sampling."""
        check_print(self.print_format, as_json)
        if self.tags and not self.push_url:
            raise click.UsageError("--tag labels a --push: give --push URL too")
        if self.tenant is not None and not self.push_url:
            raise click.UsageError("--tenant names the tenant of a --push: give --push URL too")
        if self.push_url:
            from diagnose.publish import push

            try:
                push.check_push_options(self.push_url, self.app_name, self.tags)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None


def finish_load(outcome, lines: list[str], as_json: bool, open_browser: bool,
                print_format: str | None = None) -> int:
    """Prints a sweep's or an experiment's verdict (or its JSON report, or with `print_format`
    "md" its Markdown ticket summary) and where the report is; the exit code: 0, or 128 + the
    signal that stopped it (the partial report was written)."""
    if as_json:
        click.echo(json.dumps(outcome.report.to_json(), indent=2, ensure_ascii=False))
    elif print_format == "md":
        click.echo(outcome.markdown_path.read_text(encoding="utf-8"), nl=False)
    else:
        for line in lines:
            click.echo(line)
    log(f"Report: {outcome.html_path}   (also .json, .md)")
    if open_browser:
        webbrowser.open(outcome.html_path.resolve().as_uri())
    if outcome.stopped is not None:
        log(outcome.stopped.message)
        return outcome.stopped.exit_code
    return ExitCode.OK


_load_options = [
    click.option("--tool", type=click.Choice(["auto", "wrk", "python"]), default="auto",
                 show_default=True,
                 help="The load generator: wrk, or the built-in closed-loop Python client "
                      "(auto: wrk when it is on PATH)."),
    click.option("--threads", "gen_threads", type=click.IntRange(1, 64), default=2,
                 show_default=True, help="wrk threads (each can use one core)."),
    click.option("--request-timeout", type=click.IntRange(1, 600), default=10,
                 show_default=True, help="Seconds before a request counts as a timeout error."),
]


def load_options(fn):
    for option in reversed(_load_options):
        fn = option(fn)
    return fn


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
