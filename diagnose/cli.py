"""Command line: thin click commands; errors become exit codes in one place (`_run`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import webbrowser
from dataclasses import dataclass
from pathlib import Path

import click

from diagnose import __version__
from diagnose.errors import DiagnoseError, ExitCode, Interrupted, NoSamples
from diagnose.outputs.files import prepare_output_dir

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


def _log(message: str) -> None:
    click.echo(message, err=True)


def _run(action) -> None:
    from diagnose.collect.attach import SignalAbort

    try:
        code = action()
    except Interrupted as exc:
        _log(exc.message)
        sys.exit(exc.exit_code)
    except DiagnoseError as exc:
        _log(f"error: {exc.message}")
        sys.exit(exc.exit_code)
    except SignalAbort as exc:
        _log(exc.error.message)
        sys.exit(exc.error.exit_code)
    except KeyboardInterrupt:  # Ctrl-C where no handler of ours runs: no traceback either
        _log("interrupted by SIGINT: no report written")
        sys.exit(ExitCode.SIGINT)
    sys.exit(code or 0)


def _finish(outputs, as_json: bool, open_browser: bool, stopped: Interrupted | None = None,
            recorder_failure: str | None = None, ticket: Ticket | None = None) -> int:
    """Prints the verdict and where the report is, then the ticket's extras (pprof, push, gate).
    `stopped`: a signal ended the window early (its message replaces the "target exited"
    warning, its code is returned); `recorder_failure`: a py-spy recorder was killed mid-window
    and the report holds the others' samples."""
    ticket = ticket or Ticket()
    report = outputs.report
    label = report["verdict"]["primary"].replace("_", " ")
    if as_json:
        click.echo(json.dumps(report, indent=2, ensure_ascii=False))
        _log(f"Report: {outputs.html}")
    elif ticket.print_format == "md" and getattr(outputs, "markdown", None) is not None:
        click.echo(outputs.markdown.read_text(encoding="utf-8"), nl=False)
        _log(f"Report: {outputs.html}")
    else:
        headline = report["verdict"]["headline"]
        click.echo(f"Verdict: {headline}" if label == "none" else
                   f"Verdict: {label} — {headline.split(' — ', 1)[-1]}")
        click.echo(f"Report: {outputs.html}   (also .json, .md, .speedscope.json)")
    if stopped is None and recorder_failure:
        _log(f"warning: {recorder_failure}; the report is marked partial")
    elif stopped is None and outputs.partial:
        _log("warning: the target exited during sampling; the report is marked partial")
    if open_browser:
        webbrowser.open(outputs.html.resolve().as_uri())
    extras_code = _ticket_extras(outputs, ticket)
    if stopped is not None:
        _log(stopped.message)
        return stopped.exit_code
    if recorder_failure:
        return ExitCode.PROFILER_FAILED
    if outputs.partial:
        return ExitCode.TARGET_EXITED
    if extras_code != ExitCode.OK:
        return extras_code
    return _gate(ExitCode.OK, report["verdict"], ticket.fail_on, "the verdict")


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
            _log(f"pprof: {pprof_path}")
        except DiagnoseError as exc:
            _log(f"error: {exc.message}")
            code = exc.exit_code
    if ticket.push_url:
        from diagnose.publish import push

        start, end = ticket.window or (None, None)  # a recorded file's own time is unknown
        kept = [p for p in (outputs.html, outputs.json, pprof_path) if p is not None]
        try:
            result = push.push_report(outputs.report, ticket.push_url, ticket.app_name,
                                      push.parse_tags(ticket.tags), start, end, kept=kept)
            _log(f"pushed to {result.url} (HTTP {result.status}, {result.tries} "
                 f"tr{'y' if result.tries == 1 else 'ies'})")
        except push.PushFailed as exc:
            _log(f"error: {exc.message}")
            code = code or exc.exit_code
    return code


@click.group(epilog=EPILOG)
@click.version_option(__version__, prog_name="diagnose")
def main() -> None:
    """Tells you why a multi-threaded Python inference service is slow, and what to change.

    `diagnose attach PID` samples a live process with py-spy and /proc, classifies the
    bottleneck (preprocessing, lock contention, scheduler overhead, compute, underload) and
    writes a self-contained HTML report, a JSON report and a speedscope profile.
    """


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
    click.option("--fail-on", type=click.Choice(["warning", "critical"]), default=None,
                 help="CI gate: exit 10 when the verdict's severity reaches this level, after "
                      "writing every output."),
    click.option("--print", "print_format", type=click.Choice(["md"]), default=None,
                 help="Print the Markdown ticket summary (also written as .md) on stdout instead "
                      "of the verdict lines."),
    click.option("--pprof", "write_pprof", is_flag=True,
                 help="Also write the samples as a gzipped pprof profile (.pb.gz) with thread, "
                      "role, state, category and pid labels."),
    click.option("--push", "push_url", metavar="URL",
                 help="Send the pprof profile to a Grafana Pyroscope server's ingest API "
                      "(e.g. http://pyroscope:4040); the local outputs are written first and "
                      "kept whatever happens (exit 13 when the push fails)."),
    click.option("--app-name", default="diagnose", show_default=True,
                 help="--push: the application name the profile is filed under."),
    click.option("--tag", "tags", multiple=True, metavar="NAME=VALUE",
                 help="--push: an extra label (repeatable); verdict, host and pid are added."),
]


def ticket_options(fn):
    for option in reversed(_ticket_options):
        fn = option(fn)
    return fn


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
    window: tuple[float, float] | None = None  # the sampled window, wall clock (for --push)

    def check(self, as_json: bool) -> None:
        """Usage errors said before any sampling."""
        if self.print_format and as_json:
            raise click.UsageError("--print md and --json both print on stdout: choose one")
        if self.tags and not self.push_url:
            raise click.UsageError("--tag labels a --push: give --push URL too")
        if self.push_url:
            from diagnose.publish import push

            try:
                push.check_push_options(self.push_url, self.app_name, self.tags)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None


def _attach(pids: list[int], duration: float, rate: int | None, native: str, output_dir: Path,
            rules_file: str | None, as_json: bool, open_browser: bool, keep_raw: bool,
            quiet: bool, children: bool = True, ticket: Ticket | None = None) -> int:
    """SIGINT, SIGTERM and SIGHUP are handled over the whole command (see StopSignals): before
    sampling starts one aborts; during the window one ends it early and the partial report is
    written, exiting 128 + the signal's number; a second one aborts at once."""
    from diagnose.collect.attach import StopSignals

    with StopSignals() as stop:
        return _attach_stoppable(stop, pids, duration, rate, native, output_dir, rules_file,
                                 as_json, open_browser, keep_raw, quiet, children,
                                 ticket or Ticket())


def _attach_stoppable(stop, pids: list[int], duration: float, rate: int | None, native: str,
                      output_dir: Path, rules_file: str | None, as_json: bool,
                      open_browser: bool, keep_raw: bool, quiet: bool, children: bool,
                      ticket: Ticket) -> int:
    from diagnose.report import pipeline
    from diagnose.collect.attach import AttachOptions, capture, describe_target
    from diagnose.collect.tree import python_descendants

    user_rules = pipeline.load_user_rules(rules_file)
    # Before the window, not after it: a read-only or full directory is said before sampling.
    prepare_output_dir(output_dir, probe=True)
    labels = []
    for pid in pids:
        proc = describe_target(pid)
        try:
            label = f"{pid} ({proc.name()}, {proc.num_threads()} threads"
            workers = len(python_descendants(pid))
            if workers:
                label += (f", {workers} Python child process{'es' if workers > 1 else ''}"
                          + ("" if children else " not sampled: --no-children"))
            labels.append(label + ")")
        except Exception:
            labels.append(f"{pid} (?)")
    _log(f"Sampling pid {', '.join(labels)} for {duration:g} s"
         + (f" at {rate} Hz ..." if rate else " ..."))
    show_bar = not quiet and sys.stderr.isatty()
    bar_ctx = click.progressbar(length=1000, file=sys.stderr, show_eta=True, width=30) if show_bar else None
    state = {"done": 0}

    def progress(fraction: float, threads: int) -> None:
        step = int(fraction * 1000)
        if bar_ctx is not None and step > state["done"]:
            bar_ctx.update(step - state["done"])
            state["done"] = step
        elif bar_ctx is None and not quiet and int(fraction * 10) > state["done"]:
            state["done"] = int(fraction * 10)
            _log(f"  sampled {state['done'] * 10}% of the window ({threads} threads)")

    options = AttachOptions(duration=duration, rate=rate, native=native, children=children)
    if bar_ctx is not None:
        with bar_ctx:
            cap = capture(pids, output_dir, options, progress, stop=stop, warn=_log)
    else:
        cap = capture(pids, output_dir, options, progress, stop=stop, warn=_log)
    try:
        outputs = pipeline.from_capture(cap, output_dir, user_rules, keep_raw)
    except NoSamples:
        if stop.signum is None:
            raise
        raise stop.error(f"interrupted by {stop.name} {cap.sampling['duration_s']:.1f} s into "
                         f"the window, before py-spy took any sample: no report written") from None
    stopped = None
    if cap.interrupted_by is not None:
        stopped = stop.error(f"interrupted by {stop.name} after {cap.sampling['duration_s']:.1f} s "
                             f"of the {duration:g} s window: partial report written")
    elif stop.signum is not None:
        stopped = stop.error(f"{stop.name} received after the window ended: the full report was "
                             f"written")
    ticket.window = (cap.started_at, cap.started_at + (cap.sampling.get("duration_s") or duration))
    return _finish(outputs, as_json, open_browser, stopped, cap.recorder_failure, ticket)


@main.command(epilog=EPILOG)
@click.argument("pids", metavar="PID [PID ...]", type=click.IntRange(min=1), nargs=-1, required=True)
@click.option("--duration", "-d", type=click.FloatRange(min=1), default=10.0, show_default=True,
              help="Seconds to sample.")
@click.option("--rate", "-r", type=click.IntRange(1, 1000), default=None,
              help="Stack samples per second. Default: chosen from the thread count so that the "
                   "target pauses little (about 200 thread-samples/s: 20 Hz for 10 threads, "
                   "3 Hz for 64). --rate 100 is full fidelity at a real cost to the target.")
@click.option("--native/--no-native", "native", default=None,
              help="Force native (C) frames on or off. Default: on where py-spy supports them; "
                   "without them thread state is estimated from Python frames.")
@click.option("--keep-raw", is_flag=True,
              help="Also keep py-spy's recording with its measured instants (.chrometrace.json; a "
                   "process tree: one per process, X.1.chrometrace.json, X.2...), the /proc record "
                   "(.procfs.json) and the native calibration samples (.native.speedscope.json) so "
                   "`analyze X*.chrometrace.json --procfs X.procfs.json --native-profile "
                   "X.native.speedscope.json` can replay the session.")
@click.option("--children/--no-children", default=True, show_default=True,
              help="Also sample every Python process descending from PID (gunicorn / uvicorn "
                   "workers, multiprocessing pools), followed as they start and exit; the sampling "
                   "budget is shared across them. A launcher PID (a shell) is followed to its "
                   "Python children.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@common_output
@ticket_options
def attach(pids, duration, rate, native, children, keep_raw, quiet, output_dir, rules_file,
           as_json, open_browser, fail_on, print_format, write_pprof, push_url, app_name, tags):
    """Sample the running Python service PID (and its worker processes) and diagnose its
    bottleneck. Name several PIDs to sample several process trees as one service."""
    mode = "auto" if native is None else ("on" if native else "off")
    ticket = Ticket(fail_on, print_format, write_pprof, push_url, app_name, tuple(tags))
    ticket.check(as_json)
    _run(lambda: _attach(list(pids), duration, rate, mode, output_dir, rules_file, as_json,
                         open_browser, keep_raw, quiet, children, ticket))


@main.command(epilog=EPILOG)
@click.argument("profiles", metavar="FILE [FILE ...]", type=click.Path(path_type=Path), nargs=-1,
                required=True)
@click.option("--procfs", type=click.Path(dir_okay=False, path_type=Path),
              help="The .procfs.json written by `attach --keep-raw` for the same window.")
@click.option("--native-profile", type=click.Path(dir_okay=False, path_type=Path),
              help="The .native.speedscope.json written by `attach --keep-raw`: sparse native "
                   "samples that calibrate the thread states of a Python-only profile.")
@common_output
@ticket_options
def analyze(profiles, procfs, native_profile, output_dir, rules_file, as_json, open_browser,
            fail_on, print_format, write_pprof, push_url, app_name, tags):
    """Diagnose a profile recorded elsewhere (py-spy chrometrace, speedscope JSON or
    raw/collapsed). Several files are read as one service: the recordings `attach --keep-raw`
    keeps of a process tree, one per process."""
    from diagnose.report import pipeline

    ticket = Ticket(fail_on, print_format, write_pprof, push_url, app_name, tuple(tags))
    ticket.check(as_json)

    def action():
        user_rules = pipeline.load_user_rules(rules_file)
        outputs = pipeline.from_file(list(profiles), output_dir, user_rules, procfs,
                                     native_profile)
        return _finish(outputs, as_json, open_browser, ticket=ticket)

    _run(action)


@main.command(epilog=EPILOG)
@click.option("--duration", "-d", type=click.FloatRange(min=1), default=10.0, show_default=True,
              help="Seconds to sample the demo.")
@common_output
def demo(duration, output_dir, rules_file, as_json, open_browser):
    """Start the bundled demo inference service, diagnose it, and stop it."""

    def action():
        service = subprocess.Popen(
            [sys.executable, "-m", "diagnose.demo.service", "--seconds", str(int(duration) + 30)],
            stdout=subprocess.PIPE, text=True)
        try:
            ready = _wait_ready(service, timeout=60)
            _log(f"Demo service running as pid {ready}")
            return _attach([ready], duration, None, "auto", output_dir, rules_file, as_json,
                           open_browser, False, False)
        finally:
            service.terminate()
            try:
                service.wait(timeout=10)
            except subprocess.TimeoutExpired:
                service.kill()

    _run(action)


def _finish_load(outcome, lines: list[str], as_json: bool, open_browser: bool) -> int:
    """Prints a sweep's or an experiment's verdict (or its JSON report) and where the report is;
    the exit code: 0, or 128 + the signal that stopped it (the partial report was written)."""
    if as_json:
        click.echo(json.dumps(outcome.report, indent=2, ensure_ascii=False))
    else:
        for line in lines:
            click.echo(line)
    _log(f"Report: {outcome.html_path}   (also .json)")
    if open_browser:
        webbrowser.open(outcome.html_path.resolve().as_uri())
    if outcome.stopped is not None:
        _log(outcome.stopped.message)
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


@main.command(epilog=EPILOG)
@click.argument("url")
@click.option("--pid", "pids", type=click.IntRange(min=1), multiple=True,
              help="The service's pid (repeatable): its CPU is recorded at every step, and it is "
                   "diagnosed under every step's load (see --diagnose-seconds).")
@click.option("--concurrency", "levels",
              help="Closed model: concurrent connections per step, comma-separated (e.g. "
                   "1,2,4,8). Default: doubling from 1 to --max-concurrency.")
@click.option("--rate", "rates",
              help="Open model: requests per second per step, comma-separated (e.g. 10,20,40); "
                   "requests leave on schedule whether or not the service keeps up, and each "
                   "latency counts from the request's intended send time.")
@click.option("--arrivals", type=click.Choice(["constant", "poisson"]), default="constant",
              show_default=True, help="Open model: evenly spaced or Poisson arrivals.")
@click.option("--max-concurrency", type=click.IntRange(1, 10000), default=64, show_default=True)
@click.option("--window", type=click.IntRange(1, 600), default=3, show_default=True,
              help="Seconds per measurement window.")
@click.option("--warmup", type=click.IntRange(0, 600), default=2, show_default=True,
              help="Seconds of load discarded at the start of each step.")
@click.option("--max-windows", type=click.IntRange(1, 100), default=6, show_default=True,
              help="Windows per step at most, while throughput or p99 are not yet stable "
                   "(the last 3 within 10% of their mean).")
@click.option("--patience", type=click.IntRange(1, 100), default=2, show_default=True,
              help="Stop when throughput gained less than 5% over this many steps.")
@click.option("--slo-p99", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="MS", help="Stop once a step's p99 passes this many milliseconds.")
@click.option("--max-duration", type=click.IntRange(1, 86400), default=1800, show_default=True,
              help="Seconds the whole sweep may take: no step starts after it.")
@click.option("--ceiling", type=click.FloatRange(min=0, min_open=True), default=None,
              help="The load generator's measured ceiling on this machine (req/s, see "
                   "benchmarks/generator_ceiling.py): a step reaching 80% of it is "
                   "generator-limited.")
@click.option("--diagnose-seconds", type=click.FloatRange(min=0), default=4.0, show_default=True,
              help="With --pid: sample the service this long under each step's load (0: no "
                   "diagnosis).")
@click.option("--method", default="GET", show_default=True, help="The requests' HTTP method.")
@click.option("--body", "body_file", type=click.Path(dir_okay=False, path_type=Path),
              help="A file whose bytes are every request's body.")
@click.option("--header", "headers", multiple=True, metavar="NAME:VALUE",
              help="A request header (repeatable).")
@click.option("--fail-on", type=click.Choice(["warning", "critical"]), default=None,
              help="CI gate: exit 10 when the verdict that explains the knee (the first step at "
                   "or past it naming a bottleneck; else the last step diagnosed) reaches this "
                   "severity, after writing every output.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@load_options
@common_output
def sweep(url, pids, levels, rates, arrivals, max_concurrency, window, warmup, max_windows,
          patience, slo_p99, max_duration, ceiling, diagnose_seconds, method, body_file, headers,
          fail_on, quiet, tool, gen_threads, request_timeout, output_dir, rules_file, as_json,
          open_browser):
    """Step the load on URL (loopback only) up: concurrency levels (closed model) or request
    rates (open model). Per step: throughput, p50/p90/p95/p99/max from an HDR histogram, errors
    by kind, stability, the load generator's own CPU and lateness, and (with --pid) the
    service's verdict under that load with its full report. Then the knee: the step after which
    p99 grows faster than throughput. Writes diagnose-sweep-<pid or host>-<time>.html/.json."""
    from diagnose.load import loadtest
    from diagnose.report import pipeline
    from diagnose.load.loadgen import loopback_url
    from diagnose.load.openloop import parse_header
    from diagnose.load.sweep import SweepSettings, doubling_levels, parse_levels

    def action():
        try:
            if levels and rates:
                raise ValueError("give --concurrency (closed model) or --rate (open model), "
                                 "not both")
            if rates:
                chosen, model = parse_levels(rates, float), "open"
            else:
                chosen = parse_levels(levels) if levels else doubling_levels(1, max_concurrency)
                model = "closed"
            settings = SweepSettings(levels=chosen, model=model, arrivals=arrivals,
                                     window_s=window, warmup_s=warmup,
                                     stable_windows=min(3, max_windows), max_windows=max_windows,
                                     patience=patience, slo_p99_ms=slo_p99,
                                     generator_ceiling_rps=ceiling, max_duration_s=max_duration)
            loadgen_url = loopback_url(url)
            if 0 < diagnose_seconds < 1:
                raise ValueError("--diagnose-seconds is 0 (no diagnosis) or at least 1")
            header_pairs = tuple(parse_header(h) for h in headers)
            body = _read_body(body_file) if body_file is not None else None
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        user_rules = pipeline.load_user_rules(rules_file)
        generator = loadtest.Generator(tool, gen_threads, request_timeout, model=model,
                                       arrivals=arrivals, method=method.upper(), body=body,
                                       headers=header_pairs)
        outcome = loadtest.sweep(loadgen_url, list(pids), settings, generator, output_dir,
                                 diagnose_seconds if pids else None, user_rules,
                                 (lambda _m: None) if quiet else _log)
        summary = outcome.report["summary"]
        lines = [f"Sweep: {summary['headline']}"]
        why = summary.get("why")
        if why:
            where = (f"concurrency {why['concurrency']}" if "concurrency" in why
                     else f"{why['rate']:g} req/s")
            lines.append(f"Why: at {where}, {why['primary'].replace('_', ' ')} — "
                         f"{why['headline'].split(' — ', 1)[-1]}")
        for step in outcome.report["steps"]:
            if step.get("verdict"):
                where = (f"concurrency {step['concurrency']}" if "concurrency" in step
                         else f"{step['rate']:g} req/s")
                lines.append(f"  at {where}: {step['verdict']['headline']}")
        code = _finish_load(outcome, lines, as_json, open_browser)
        gate = _sweep_gate_verdict(outcome.report)
        return _gate(code, gate, fail_on, "the verdict that explains the knee")

    _run(action)


MAX_BODY_BYTES = 16 * 1024 * 1024


def _read_body(path: Path) -> bytes:
    try:
        if path.stat().st_size > MAX_BODY_BYTES:
            raise ValueError(f"--body {path}: larger than {MAX_BODY_BYTES // 2**20} MiB")
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"--body {path}: {exc.strerror or exc}") from None


def _sweep_gate_verdict(report: dict) -> dict | None:
    """The verdict a sweep is gated on: the one that explains its knee (summary.why), else the
    last step's diagnosed."""
    why = (report.get("summary") or {}).get("why")
    if why:
        return why
    diagnosed = [s["verdict"] for s in report.get("steps") or [] if s.get("verdict")]
    return diagnosed[-1] if diagnosed else None


SEVERITY_ORDER = ("ok", "info", "warning", "critical")


def _gate(code: int, verdict: dict | None, fail_on: str | None, what: str) -> int:
    """--fail-on: exit 10 (after every output is written) when `verdict` reached the asked
    severity and nothing else already failed."""
    if fail_on is None or code != ExitCode.OK or not verdict:
        return code
    severity = verdict.get("severity") or "ok"
    if SEVERITY_ORDER.index(severity) >= SEVERITY_ORDER.index(fail_on):
        _log(f"fail-on {fail_on}: {what} is {severity} ({verdict.get('primary')}): exit "
             f"{ExitCode.FINDING_GATE}")
        return ExitCode.FINDING_GATE
    return code


def _wait_ready(service: subprocess.Popen, timeout: float) -> int:
    assert service.stdout is not None  # started with stdout=PIPE
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = service.stdout.readline()
        if not line:
            break
        if line.startswith("READY"):
            return int(line.split()[1])
    raise DiagnoseError("the demo service did not start")


# Commands that live in their own modules (they import this one's helpers, so they come last).
from diagnose.cli_diff import diff as _diff_command  # noqa: E402
from diagnose.cli_experiment import experiment as _experiment_command  # noqa: E402
from diagnose.cli_export import export as _export_command  # noqa: E402
from diagnose.cli_watch import watch as _watch_command  # noqa: E402

main.add_command(_diff_command)
main.add_command(_experiment_command)
main.add_command(_export_command)
main.add_command(_watch_command)

if __name__ == "__main__":
    main()
