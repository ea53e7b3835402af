"""`diagnose experiment`: start the service once per variant, load it, compare."""

from __future__ import annotations

import os
from pathlib import Path

import click

from diagnose.cli.common import (EPILOG, check_print, finish_load, load_options, log, page_output,
                                 print_option, run)


@click.command(epilog=EPILOG, context_settings={"ignore_unknown_options": True})
@click.argument("url")
@click.option("--vary", "vary", multiple=True, metavar="NAME=V1,V2",
              help="An environment variable and its values (repeatable): one variant per "
                   "combination, at most 16; the first values make the baseline. The value "
                   "`unset` runs without the variable.")
@click.option("--at-load", "--concurrency", "at_load", type=click.IntRange(1, 10000),
              help="Measure one step at N concurrent connections (closed model).")
@click.option("--at-rate", type=click.FloatRange(min=0, min_open=True),
              help="Measure one step at R requests/s offered (open model).")
@click.option("--slo-p99", type=click.FloatRange(min=0, min_open=True),
              help="Without --at-load/--at-rate each run is a sweep: its throughput is the "
                   "highest whose p99 is within this many ms (default: the knee's).")
@click.option("--seconds", type=click.IntRange(1, 3600), default=8, show_default=True,
              help="Measured seconds per run.")
@click.option("--warmup", type=click.IntRange(0, 600), default=2, show_default=True,
              help="Seconds of load discarded at the start of each run.")
@click.option("--rounds", type=click.IntRange(1, 100), default=3, show_default=True,
              help="Alternated rounds (each runs every variant once).")
@click.option("--diagnose-seconds", type=click.FloatRange(min=0), default=3.0,
              show_default=True,
              help="Attach to each variant once, while it is loaded, for its verdict (0: no "
                   "verdicts).")
@click.option("--from-report", type=click.Path(dir_okay=False, path_type=Path),
              help="Vary the environment knob a diagnose JSON report's first finding advises "
                   "(evidence.fix): as inherited against the advised value, measured beside "
                   "its predicted gain.")
@click.option("--start", "start_command",
              help="The service's command as one shell-quoted string (instead of -- CMD ARGS).")
@click.option("--set", "assignments", multiple=True, metavar="NAME=VALUE",
              help="Shorthand for two variants: as inherited (baseline) and with these "
                   "assignments (repeatable).")
@print_option
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@load_options
@page_output
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def experiment(url, vary, at_load, at_rate, slo_p99, seconds, warmup, rounds, diagnose_seconds,
               from_report, start_command, assignments, print_format, quiet, tool, gen_threads,
               request_timeout, output_dir, as_json, open_browser, command):
    """Measure which setting serves more instead of predicting it:
    `diagnose experiment URL --vary NAME=v1,v2 [--at-load N | --at-rate R] -- CMD ARGS`
    starts CMD fresh for every variant and round with the variant's environment, waits until
    URL (loopback only) answers, loads it, stops its process group, and reports each variant's
    throughput, p99 and verdict, the winner and its gain over the baseline. Writes
    diagnose-experiment-<port>-<time>.html/.json/.md (the .md: a ticket summary)."""
    from diagnose.load import experiment_run, loadtest
    from diagnose.load.experiment import (Arm, RunSettings, arms_from_vary, fix_from_report,
                                     parse_assignments, parse_vary, vary_from_advice)
    from diagnose.load.loadgen import loopback_url

    def action():
        check_print(print_format, as_json)
        try:
            target = loopback_url(url)
            argv = _command(command, start_command)
            dims = parse_vary(vary)
            env = parse_assignments(assignments)
            if at_load is not None and at_rate is not None:
                raise ValueError("give --at-load or --at-rate, not both")
            # --at-rate: the open model (a constant offered rate, latency from intended send)
            generator = loadtest.Generator(tool, gen_threads, request_timeout,
                                           model="open" if at_rate is not None else "closed")
            generator.describe()  # --tool wrk without wrk: said before anything starts
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        advice, advised = None, ()
        if from_report is not None:
            advised, advice = fix_from_report(from_report)
            try:
                dims = dims + vary_from_advice(advised, os.environ)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None
        if env:
            if dims:
                raise click.UsageError("give the change with --vary or --set, not both")
            arms = (Arm("baseline", argv), Arm("variant", argv, env))
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
        settings = RunSettings(target, at_load, seconds, warmup, rounds, generator,
                               rate=at_rate, slo_p99_ms=slo_p99,
                               diagnose_seconds=diagnose_seconds)
        outcome = experiment_run.experiment(arms, settings, advice, output_dir,
                                            (lambda _m: None) if quiet else log, advised)
        lines = [f"Experiment: {outcome.report.headline}"]
        adv = outcome.report.advice
        if adv is not None:
            lines.append(f"{(adv.status or '').capitalize()}: measured "
                         f"{_ratio(adv.measured_gain)}, predicted {_ratio(adv.predicted_gain)}")
        return finish_load(outcome, lines, as_json, open_browser, print_format)

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
