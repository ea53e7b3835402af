"""`diagnose watch`: placeholder while it is being built."""

from __future__ import annotations

import click


@click.command(name="watch")
def watch():
    """Sample PID on a schedule and push each window. (not built yet)"""
    raise click.UsageError("diagnose watch is not built yet")
