"""`diagnose experiment`: start the service once per variant, load it, compare."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from diagnose.cli.common import EPILOG, finish_load, log, run
from diagnose.cli.options import (LoadOptions, OutputOptions, TicketOptions,
                                  diagnose_seconds_option, load_options, option_group,
                                  page_output_options, quiet_option, slo_p99_option,
                                  ticket_options, warmup_option)

if TYPE_CHECKING:
    from diagnose.report.load_report import Advice


@dataclass(frozen=True)
class ExperimentOptions:
    """What an experiment compares (the variants, from --vary, --set or a report's advice) and
    how each run is measured."""

    vary: tuple[str, ...] = ()  # NAME=V1,V2, as given
    at_load: int | None = None  # one step at N connections (closed model)
    at_rate: float | None = None  # one step at R requests/s (open model)
    slo_p99: float | None = None
    seconds: int = 8
    warmup: int = 2
    rounds: int = 3
    diagnose_seconds: float = 3.0
    from_report: Path | None = None
    start_command: str | None = None  # the service's command line, instead of -- CMD ARGS
    assignments: tuple[str, ...] = ()  # NAME=VALUE, as given


experiment_options = option_group("plan", ExperimentOptions, [
    click.option("--vary", "vary", multiple=True, metavar="NAME=V1,V2",
                 help="An environment variable and its values (repeatable): one variant per "
                      "combination, at most 16; the first values make the baseline. The value "
                      "`unset` runs without the variable."),
    click.option("--at-load", "--concurrency", "at_load", type=click.IntRange(1, 10000),
                 help="Measure one step at N concurrent connections (closed model)."),
    click.option("--at-rate", type=click.FloatRange(min=0, min_open=True),
                 help="Measure one step at R requests/s offered (open model)."),
    slo_p99_option("Without --at-load/--at-rate each run is a sweep: its throughput is the "
                   "highest whose p99 is within this many ms (default: the knee's)."),
    click.option("--seconds", type=click.IntRange(1, 3600), default=8, show_default=True,
                 help="Measured seconds per run."),
    warmup_option("Seconds of load discarded at the start of each run."),
    click.option("--rounds", type=click.IntRange(1, 100), default=3, show_default=True,
                 help="Alternated rounds (each runs every variant once)."),
    diagnose_seconds_option(3.0, "Attach to each variant once, while it is loaded, for its "
                                 "verdict (0: no verdicts)."),
    click.option("--from-report", type=click.Path(dir_okay=False, path_type=Path),
                 help="Vary the environment knob a diagnose JSON report's first finding advises "
                      "(evidence.fix): as inherited against the advised value, measured beside "
                      "its predicted gain."),
    click.option("--start", "start_command",
                 help="The service's command as one shell-quoted string (instead of -- CMD "
                      "ARGS)."),
    click.option("--set", "assignments", multiple=True, metavar="NAME=VALUE",
                 help="Shorthand for two variants: as inherited (baseline) and with these "
                      "assignments (repeatable)."),
])
"""--vary, --at-load, --at-rate, --slo-p99, --seconds, --warmup, --rounds, --diagnose-seconds,
--from-report, --start, --set as `plan`."""


@click.command(epilog=EPILOG, context_settings={"ignore_unknown_options": True})
@click.argument("url")
@experiment_options
@ticket_options(fail_on_help=None, pprof_and_push=False)
@quiet_option
@load_options
@page_output_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def experiment(url: str, plan: ExperimentOptions, ticket: TicketOptions, quiet: bool,
               load: LoadOptions, outputs: OutputOptions, command: tuple[str, ...]) -> None:
    """Measure which setting serves more instead of predicting it:
    `diagnose experiment URL --vary NAME=v1,v2 [--at-load N | --at-rate R] -- CMD ARGS`
    starts CMD fresh for every variant and round with the variant's environment, waits until
    URL (loopback only) answers, loads it, stops its process group, and reports each variant's
    throughput, p99 and verdict, the winner and its gain over the baseline. Writes
    diagnose-experiment-<port>-<time>.html/.json/.md (the .md: a ticket summary)."""
    from diagnose.load import experiment_run
    from diagnose.load.experiment_decision import (Arm, RunSettings, arms_from_vary, fix_from_report,
                                     parse_assignments, parse_vary, vary_from_advice)
    from diagnose.load.loadgen import loopback_url

    def action() -> int:
        ticket.check(outputs.as_json)
        try:
            target = loopback_url(url)
            argv = _command(command, plan.start_command)
            dims = parse_vary(plan.vary)
            env = parse_assignments(plan.assignments)
            if plan.at_load is not None and plan.at_rate is not None:
                raise ValueError("give --at-load or --at-rate, not both")
            # --at-rate: the open model (a constant offered rate, latency from intended send)
            generator = load.generator(model="open" if plan.at_rate is not None else "closed")
            generator.describe()  # --tool wrk without wrk: said before anything starts
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        advice: Advice | None = None
        advised: tuple[tuple[str, str], ...] = ()
        if plan.from_report is not None:
            advised, advice = fix_from_report(plan.from_report)
            try:
                dims = dims + vary_from_advice(advised, os.environ)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None
        if env:
            if dims:
                raise click.UsageError("give the change with --vary or --set, not both")
            arms: tuple[Arm, ...] = (Arm("baseline", argv), Arm("variant", argv, env))
        elif not dims:
            raise click.UsageError("nothing to compare: give the variants with --vary "
                                   "NAME=V1,V2, --set or --from-report")
        else:
            try:
                names = [name for name, _ in dims]
                if len(set(names)) != len(names):
                    raise ValueError("--from-report varies a knob already given with --vary")
                arms = arms_from_vary(argv, dims)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None
        settings = RunSettings(target, plan.at_load, plan.seconds, plan.warmup, plan.rounds,
                               generator, rate=plan.at_rate, slo_p99_ms=plan.slo_p99,
                               diagnose_seconds=plan.diagnose_seconds)
        outcome = experiment_run.experiment(arms, settings, advice, outputs.output_dir,
                                            (lambda _m: None) if quiet else log, advised)
        lines = [f"Experiment: {outcome.report.headline}"]
        adv = outcome.report.advice
        if adv is not None:
            lines.append(f"{(adv.status or '').capitalize()}: measured "
                         f"{_ratio(adv.measured_gain)}, predicted {_ratio(adv.predicted_gain)}")
        return finish_load(outcome, lines, outputs, ticket)

    run(action)


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _command(command: tuple[str, ...], start_command: str | None) -> tuple[str, ...]:
    """The service's argv, from `-- CMD ARGS` or --start; ValueError for neither, both, or an
    option this command does not know (it would otherwise be taken for the command)."""
    import shlex

    if command and start_command:
        raise ValueError("give the service's command after -- or with --start, not both")
    if start_command:
        argv = tuple(shlex.split(start_command))
    else:
        argv = tuple(command)
        if argv and argv[0].startswith("-") and argv[0] != "--":
            raise ValueError(f"no such option: {argv[0]} (the service's command goes after --)")
    if not argv:
        raise ValueError("the service's command is missing: diagnose experiment URL --vary "
                         "NAME=V1,V2 -- CMD ARGS")
    return argv
