"""`diagnose experiment`: start the service once per variant, load it, compare."""

from __future__ import annotations

from pathlib import Path

import click

from diagnose.cli import EPILOG, _finish_load, _log, _run, load_options


@click.command(epilog=EPILOG)
@click.argument("url")
@click.option("--start", "start_command", required=True,
              help="The command that starts the service (shell-quoted, run without a shell, in "
                   "its own process group; stopped with that group after every run).")
@click.option("--set", "assignments", multiple=True, metavar="NAME=VALUE",
              help="The change: an environment variable for the variant (repeatable).")
@click.option("--variant-command",
              help="The change: another command that starts the variant (default: --start).")
@click.option("--from-report", type=click.Path(dir_okay=False, path_type=Path),
              help="The change: the environment knob a diagnose JSON report's first finding "
                   "advises (evidence.fix), measured beside its predicted gain.")
@click.option("--concurrency", type=click.IntRange(1, 10000), default=8, show_default=True,
              help="Connections held open (e.g. the knee a sweep found).")
@click.option("--seconds", type=click.IntRange(1, 3600), default=8, show_default=True,
              help="Measured seconds per run.")
@click.option("--warmup", type=click.IntRange(0, 600), default=2, show_default=True,
              help="Seconds of load discarded at the start of each run.")
@click.option("--rounds", type=click.IntRange(1, 100), default=3, show_default=True,
              help="Alternated rounds (each runs the baseline and the variant once).")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@load_options
@click.option("--output-dir", "-o", type=click.Path(file_okay=False, path_type=Path),
              default=Path("reports"), show_default=True,
              help="Where the .html and .json files are written.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the JSON report on stdout (logs go to stderr).")
@click.option("--open", "open_browser", is_flag=True, help="Open the HTML report in a browser.")
def experiment(url, start_command, assignments, variant_command, from_report, concurrency,
               seconds, warmup, rounds, quiet, tool, gen_threads, request_timeout, output_dir,
               as_json, open_browser):
    """Measure a change instead of predicting it: start the service (--start) fresh for every
    run, as it is and with the change (--set NAME=VALUE, --variant-command or --from-report),
    load URL (loopback only) at a fixed concurrency, alternate the two over --rounds, and say
    whether the change is better, worse or no clear difference."""
    import shlex

    from diagnose import experiment_run, loadtest
    from diagnose.experiment import Arm, RunSettings, fix_from_report, parse_assignments
    from diagnose.loadgen import loopback_url

    def action():
        try:
            target = loopback_url(url)
            base_argv = tuple(shlex.split(start_command))
            variant_argv = tuple(shlex.split(variant_command)) if variant_command else base_argv
            env = parse_assignments(assignments)
            generator = loadtest.Generator(tool, gen_threads, request_timeout)
            generator.describe()  # --tool wrk without wrk: said before anything starts
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        if not base_argv or not variant_argv:
            raise click.UsageError("--start (and --variant-command) need a command")
        advice = None
        if from_report is not None:
            advised, advice = fix_from_report(from_report)
            env = env + advised
        if not env and not variant_command:
            raise click.UsageError("nothing to compare: give the change with --set, "
                                   "--variant-command or --from-report")
        arms = (Arm("baseline", base_argv), Arm("variant", variant_argv, env))
        settings = RunSettings(target, concurrency, seconds, warmup, rounds, generator)
        outcome = experiment_run.experiment(arms, settings, advice, output_dir,
                                      (lambda _m: None) if quiet else _log)
        return _finish_load(outcome, [f"Experiment: {outcome.report['decision']['headline']}"],
                            as_json, open_browser)

    _run(action)
