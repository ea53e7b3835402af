"""`diagnose diff`: placeholder while it is being built."""

from __future__ import annotations

import click


@click.command(name="diff")
def diff():
    """Compare two reports: BEFORE and AFTER. (not built yet)"""
    raise click.UsageError("diagnose diff is not built yet")
