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

import importlib  # noqa: E402

import click  # noqa: E402

from diagnose import __version__  # noqa: E402
from diagnose.cli.common import EPILOG  # noqa: E402

# Each command's module, imported when the command runs (or --help lists them): `attach` starts
# sampling without first importing every other command (the analysis, the load generators),
# ~0.1 s of a 2-core machine's CPU on the way to the window.
COMMANDS = {"attach": "diagnose.cli.attach", "analyze": "diagnose.cli.analyze", "demo": "diagnose.cli.demo",
            "sweep": "diagnose.cli.sweep", "diff": "diagnose.cli.diff", "experiment": "diagnose.cli.experiment",
            "export": "diagnose.cli.export", "render": "diagnose.cli.render", "watch": "diagnose.cli.watch"}


class LazyGroup(click.Group):
    """A group whose commands are imported by name when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMANDS.get(cmd_name)
        if module is None:
            return None
        command = getattr(importlib.import_module(module), cmd_name)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, epilog=EPILOG)
@click.version_option(__version__, prog_name="diagnose")
def main() -> None:
    """Tells you why a multi-threaded Python inference service is slow, and what to change.

    `diagnose attach PID` samples a live process with py-spy and /proc, classifies the
    bottleneck (preprocessing, lock contention, scheduler overhead, compute, underload) and
    writes a self-contained HTML report, a JSON report and a speedscope profile.
    """


def commands() -> dict[str, click.Command]:
    """Every command by name, each imported (what `--help` lists)."""
    ctx = click.Context(main)
    found = {name: main.get_command(ctx, name) for name in main.list_commands(ctx)}
    return {name: command for name, command in found.items() if command is not None}
