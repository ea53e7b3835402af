"""Command line: thin click commands, one module per command; errors become exit codes in one
place (`common.run`)."""

from __future__ import annotations

import atexit
import gc
import sys

from diagnose.collect import priority

# The interpreter's teardown runs the cyclic collector over everything an analysis left behind
# (frames, interned stacks, report objects): ~0.6 s after the verdict was printed, measured on a
# 3 s attach. Frozen at exit, they go with the process; registered first, this runs last.
atexit.register(gc.freeze)

# `attach` and `demo` raise their priority before the imports below: beside a service that
# saturates the cores, importing took most of a minute at the service's priority.
if sys.argv[1:2] in (["attach"], ["demo"]):
    priority.raise_own()
if sys.argv[1:2] == ["attach"]:
    # The sampling plan's first read of the target's threads, before the imports below fill the
    # interval the plan measures activity over.
    from diagnose.collect import activity

    activity.read_early(sys.argv[2:])

import click  # noqa: E402

from diagnose import __version__  # noqa: E402
from diagnose.cli.analyze import analyze  # noqa: E402
from diagnose.cli.attach import attach  # noqa: E402
from diagnose.cli.common import EPILOG  # noqa: E402
from diagnose.cli.demo import demo  # noqa: E402
from diagnose.cli.diff import diff  # noqa: E402
from diagnose.cli.experiment import experiment  # noqa: E402
from diagnose.cli.export import export  # noqa: E402
from diagnose.cli.render import render  # noqa: E402
from diagnose.cli.sweep import sweep  # noqa: E402
from diagnose.cli.watch import watch  # noqa: E402


@click.group(epilog=EPILOG)
@click.version_option(__version__, prog_name="diagnose")
def main() -> None:
    """Tells you why a multi-threaded Python inference service is slow, and what to change.

    `diagnose attach PID` samples a live process with py-spy and /proc, classifies the
    bottleneck (preprocessing, lock contention, scheduler overhead, compute, underload) and
    writes a self-contained HTML report, a JSON report and a speedscope profile.
    """


for _command in (attach, analyze, demo, sweep, diff, experiment, export, render, watch):
    main.add_command(_command)
