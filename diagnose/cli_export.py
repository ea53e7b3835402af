"""`diagnose export`: placeholder while it is being built."""

from __future__ import annotations

import click


@click.command(name="export")
def export():
    """Convert a report to another format. (not built yet)"""
    raise click.UsageError("diagnose export is not built yet")
