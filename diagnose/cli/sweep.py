"""`diagnose sweep URL`: step the load up, find the knee, diagnose the service under it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from diagnose.cli.common import (EPILOG, check_print, common_output, finish_load, gate,
                                 load_options, log, print_option, run)
from diagnose.model.vocab import GATE_SEVERITIES

if TYPE_CHECKING:
    from diagnose.load.model import SweepReport
    from diagnose.report.model import Verdict


@click.command(epilog=EPILOG)
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
@click.option("--fail-on", type=click.Choice(GATE_SEVERITIES), default=None,
              help="CI gate: exit 10 when the verdict that explains the knee (the first step at "
                   "or past it naming a bottleneck; else the last step diagnosed) reaches this "
                   "severity, after writing every output.")
@print_option
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@load_options
@common_output
def sweep(url, pids, levels, rates, arrivals, max_concurrency, window, warmup, max_windows,
          patience, slo_p99, max_duration, ceiling, diagnose_seconds, method, body_file, headers,
          fail_on, print_format, quiet, tool, gen_threads, request_timeout, output_dir,
          rules_file, as_json, open_browser):
    """Step the load on URL (loopback only) up: concurrency levels (closed model) or request
    rates (open model). Per step: throughput, p50/p90/p95/p99/max from an HDR histogram, errors
    by kind, stability, the load generator's own CPU and lateness, and (with --pid) the
    service's verdict under that load with its full report. Then the knee: the step after which
    p99 grows faster than throughput. Writes diagnose-sweep-<pid or host>-<time>.html/.json/.md
    (the .md: a ticket summary of the knee, the verdict behind it and the steps)."""
    from diagnose.load import loadtest
    from diagnose.report import pipeline
    from diagnose.load.loadgen import loopback_url
    from diagnose.load.openloop import parse_header
    from diagnose.load.sweep import SweepSettings, doubling_levels, parse_levels

    def action():
        check_print(print_format, as_json)
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
                                 (lambda _m: None) if quiet else log)
        summary = outcome.report.summary
        lines = [f"Sweep: {summary.headline}"]
        why = summary.why
        if why:
            lines.append(f"Why: at {why.label}, {why.primary.replace('_', ' ')} — "
                         f"{(why.headline or '').split(' — ', 1)[-1]}")
        for step in outcome.report.steps:
            if step.verdict:
                lines.append(f"  at {step.label}: {step.verdict.headline}")
        code = finish_load(outcome, lines, as_json, open_browser, print_format)
        verdict = _sweep_gate_verdict(outcome.report)
        return gate(code, verdict, fail_on, "the verdict that explains the knee")

    run(action)


MAX_BODY_BYTES = 16 * 1024 * 1024


def _read_body(path: Path) -> bytes:
    try:
        if path.stat().st_size > MAX_BODY_BYTES:
            raise ValueError(f"--body {path}: larger than {MAX_BODY_BYTES // 2**20} MiB")
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"--body {path}: {exc.strerror or exc}") from None


def _sweep_gate_verdict(report: SweepReport) -> Verdict | None:
    """The verdict a sweep is gated on: the one that explains its knee (summary.why), else the
    last step's diagnosed."""
    from diagnose.report.model import Verdict
    from diagnose.report.model.codec import decode

    why = report.summary.why
    diagnosed = [s.verdict for s in report.steps if s.verdict]
    chosen = why.verdict if why else (diagnosed[-1] if diagnosed else None)
    if not chosen:
        return None
    # A step's verdict says no severity when its diagnosis had none to say; the severity is
    # checked against the vocabulary as a report's is.
    return decode(Verdict, {"primary": chosen.primary, "headline": chosen.headline or "",
                            "severity": chosen.severity or "ok"}, "verdict")
