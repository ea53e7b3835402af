"""`diagnose analyze FILE`: diagnose a profile recorded elsewhere."""

from __future__ import annotations

from pathlib import Path

import click

from diagnose.cli.common import EPILOG, finish, run
from diagnose.cli.options import (OutputOptions, TicketOptions, report_output_options,
                                  ticket_options)


@click.command(epilog=EPILOG)
@click.argument("profiles", metavar="FILE [FILE ...]", type=click.Path(path_type=Path), nargs=-1,
                required=True)
@click.option("--procfs", type=click.Path(dir_okay=False, path_type=Path),
              help="The .procfs.json written by `attach --keep-raw` for the same window.")
@click.option("--native-profile", type=click.Path(dir_okay=False, path_type=Path),
              help="The .native.speedscope.json written by `attach --keep-raw`: sparse native "
                   "samples that calibrate the thread states of a Python-only profile.")
@click.option("--tasks", "tasks", type=click.Path(dir_okay=False, path_type=Path),
              help="The .tasks.json written by `attach --keep-raw`: every read of each "
                   "process's asyncio tasks over the window, so a replay sees the awaits too.")
@click.option("--sampling", "sampling", type=click.Path(dir_okay=False, path_type=Path),
              help="The .sampling.json written by `attach --keep-raw`: the live window's "
                   "sampling (its rate, py-spy's sample counts, the plan) and target, so a "
                   "replay is analyzed as the attach was rather than with a rate estimated "
                   "from the samples.")
@report_output_options
@ticket_options()
def analyze(profiles: tuple[Path, ...], procfs: Path | None, native_profile: Path | None,
            tasks: Path | None, sampling: Path | None, outputs: OutputOptions,
            ticket: TicketOptions) -> None:
    """Diagnose a profile recorded elsewhere (py-spy chrometrace, speedscope JSON or
    raw/collapsed). Several files are read as one service: the recordings `attach --keep-raw`
    keeps of a process tree, one per process."""
    from diagnose.run import pipeline

    ticket.check(outputs.as_json)

    def action() -> int:
        user_rules = pipeline.load_user_rules(outputs.rules_file)
        written = pipeline.from_file(list(profiles), outputs.output_dir, user_rules, procfs,
                                     native_profile, tasks, sampling)
        return finish(written, outputs, ticket)

    run(action)

