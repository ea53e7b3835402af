"""`diagnose sweep URL`: step the load up, find the knee, diagnose the service under it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from diagnose.cli.common import EPILOG, finish_load, gate, log, run
from diagnose.cli.options import (LoadOptions, OutputOptions, TicketOptions,
                                  diagnose_seconds_option, load_options, option_group,
                                  quiet_option, report_output_options, slo_p99_option,
                                  ticket_options, warmup_option)

if TYPE_CHECKING:
    from diagnose.report.load_report import SweepReport
    from diagnose.report.load_report import SweepSettings
    from diagnose.report.model import Verdict


@dataclass(frozen=True)
class SweepOptions:
    """The steps of a sweep (closed-model concurrency levels or open-model rates), how each is
    measured and when the sweep stops, and the pids diagnosed under each step's load."""

    pids: tuple[int, ...] = ()
    levels: str | None = None  # --concurrency, as given: "1,2,4,8"
    rates: str | None = None  # --rate, as given: "10,20,40"
    arrivals: str = "constant"
    max_concurrency: int = 64
    window: int = 3
    warmup: int = 2
    max_windows: int = 6
    patience: int = 2
    slo_p99: float | None = None
    max_duration: int = 1800
    ceiling: float | None = None
    diagnose_seconds: float = 4.0

    def settings(self) -> SweepSettings:
        """The sweep's settings; ValueError (a usage error) for levels and rates both given or a
        malformed list."""
        from diagnose.load.sweep_steps import doubling_levels, parse_levels
        from diagnose.report.load_report import SweepSettings

        if self.levels and self.rates:
            raise ValueError("give --concurrency (closed model) or --rate (open model), not both")
        if self.rates:
            chosen, model = parse_levels(self.rates, float), "open"
        else:
            chosen = (parse_levels(self.levels) if self.levels
                      else doubling_levels(1, self.max_concurrency))
            model = "closed"
        return SweepSettings(levels=chosen, model=model, arrivals=self.arrivals,
                             window_s=self.window, warmup_s=self.warmup,
                             stable_windows=min(3, self.max_windows),
                             max_windows=self.max_windows, patience=self.patience,
                             slo_p99_ms=self.slo_p99, generator_ceiling_rps=self.ceiling,
                             max_duration_s=self.max_duration)


sweep_options = option_group("steps", SweepOptions, [
    click.option("--pid", "pids", type=click.IntRange(min=1), multiple=True,
                 help="The service's pid (repeatable): its CPU is recorded at every step, and it "
                      "is diagnosed under every step's load (see --diagnose-seconds)."),
    click.option("--concurrency", "levels",
                 help="Closed model: concurrent connections per step, comma-separated (e.g. "
                      "1,2,4,8). Default: doubling from 1 to --max-concurrency."),
    click.option("--rate", "rates",
                 help="Open model: requests per second per step, comma-separated (e.g. "
                      "10,20,40); requests leave on schedule whether or not the service keeps "
                      "up, and each latency counts from the request's intended send time."),
    click.option("--arrivals", type=click.Choice(["constant", "poisson"]), default="constant",
                 show_default=True, help="Open model: evenly spaced or Poisson arrivals."),
    click.option("--max-concurrency", type=click.IntRange(1, 10000), default=64,
                 show_default=True),
    click.option("--window", type=click.IntRange(1, 600), default=3, show_default=True,
                 help="Seconds per measurement window."),
    warmup_option("Seconds of load discarded at the start of each step."),
    click.option("--max-windows", type=click.IntRange(1, 100), default=6, show_default=True,
                 help="Windows per step at most, while throughput or p99 are not yet stable "
                      "(the last 3 within 10% of their mean)."),
    click.option("--patience", type=click.IntRange(1, 100), default=2, show_default=True,
                 help="Stop when throughput gained less than 5% over this many steps."),
    slo_p99_option("Stop once a step's p99 passes this many milliseconds.", default=None,
                   metavar="MS"),
    click.option("--max-duration", type=click.IntRange(1, 86400), default=1800,
                 show_default=True, help="Seconds the whole sweep may take: no step starts after "
                                         "it."),
    click.option("--ceiling", type=click.FloatRange(min=0, min_open=True), default=None,
                 help="The load generator's measured ceiling on this machine (req/s, see "
                      "benchmarks/generator_ceiling.py): a step reaching 80% of it is "
                      "generator-limited."),
    diagnose_seconds_option(4.0, "With --pid: sample the service this long under each step's "
                                 "load (0: no diagnosis)."),
])
"""--pid, --concurrency, --rate, --arrivals, --max-concurrency, --window, --warmup,
--max-windows, --patience, --slo-p99, --max-duration, --ceiling, --diagnose-seconds as `steps`."""


@dataclass(frozen=True)
class RequestOptions:
    """What every request of the load looks like."""

    method: str = "GET"
    body_file: Path | None = None
    headers: tuple[str, ...] = ()  # NAME:VALUE, as given


request_options = option_group("requests", RequestOptions, [
    click.option("--method", default="GET", show_default=True, help="The requests' HTTP method."),
    click.option("--body", "body_file", type=click.Path(dir_okay=False, path_type=Path),
                 help="A file whose bytes are every request's body."),
    click.option("--header", "headers", multiple=True, metavar="NAME:VALUE",
                 help="A request header (repeatable)."),
])
"""--method, --body, --header as `requests`."""

SWEEP_FAIL_ON_HELP = ("CI gate: exit 10 when the verdict that explains the knee (the first step "
                      "at or past it naming a bottleneck; else the last step diagnosed) reaches "
                      "this severity, after writing every output.")


@click.command(epilog=EPILOG)
@click.argument("url")
@sweep_options
@request_options
@ticket_options(fail_on_help=SWEEP_FAIL_ON_HELP, pprof_and_push=False)
@quiet_option
@load_options
@report_output_options
def sweep(url: str, steps: SweepOptions, requests: RequestOptions, ticket: TicketOptions,
          quiet: bool, load: LoadOptions, outputs: OutputOptions) -> None:
    """Step the load on URL (loopback only) up: concurrency levels (closed model) or request
    rates (open model). Per step: throughput, p50/p90/p95/p99/max from an HDR histogram, errors
    by kind, stability, the load generator's own CPU and lateness, and (with --pid) the
    service's verdict under that load with its full report. Then the knee: the step after which
    p99 grows faster than throughput. Writes diagnose-sweep-<pid or host>-<time>.html/.json/.md
    (the .md: a ticket summary of the knee, the verdict behind it and the steps)."""
    from diagnose.load import loadtest
    from diagnose.load.loadgen import loopback_url
    from diagnose.load.openloop import parse_header
    from diagnose.run import pipeline

    def action() -> int:
        ticket.check(outputs.as_json)
        try:
            settings = steps.settings()
            loadgen_url = loopback_url(url)
            if 0 < steps.diagnose_seconds < 1:
                raise ValueError("--diagnose-seconds is 0 (no diagnosis) or at least 1")
            header_pairs = tuple(parse_header(h) for h in requests.headers)
            body = _read_body(requests.body_file) if requests.body_file is not None else None
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        user_rules = pipeline.load_user_rules(outputs.rules_file)
        generator = load.generator(model=settings.model, arrivals=steps.arrivals,
                                   method=requests.method.upper(), body=body,
                                   headers=header_pairs)
        pids = list(steps.pids)
        outcome = loadtest.sweep(loadgen_url, pids, settings, generator, outputs.output_dir,
                                 steps.diagnose_seconds if pids else None, user_rules,
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
        code = finish_load(outcome, lines, outputs, ticket)
        verdict = _sweep_gate_verdict(outcome.report)
        return gate(code, verdict, ticket.fail_on, "the verdict that explains the knee")

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
