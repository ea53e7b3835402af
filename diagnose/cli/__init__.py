"""Command line: thin click commands, one module per command; errors become exit codes in one
place (`common.run`)."""

from __future__ import annotations

import click

from diagnose import __version__
from diagnose.cli.analyze import analyze
from diagnose.cli.attach import attach
from diagnose.cli.common import EPILOG
from diagnose.cli.demo import demo
from diagnose.cli.diff import diff
from diagnose.cli.experiment import experiment
from diagnose.cli.export import export
from diagnose.cli.sweep import sweep
from diagnose.cli.watch import watch


@click.group(epilog=EPILOG)
@click.version_option(__version__, prog_name="diagnose")
def main() -> None:
    """Tells you why a multi-threaded Python inference service is slow, and what to change.

    `diagnose attach PID` samples a live process with py-spy and /proc, classifies the
    bottleneck (preprocessing, lock contention, scheduler overhead, compute, underload) and
    writes a self-contained HTML report, a JSON report and a speedscope profile.
    """


for _command in (attach, analyze, demo, sweep, diff, experiment, export, watch):
    main.add_command(_command)
