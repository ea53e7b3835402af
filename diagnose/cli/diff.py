"""`diagnose diff BEFORE AFTER`: did the fix work? Two reports in, one diff page and JSON out."""

from __future__ import annotations

import json
import webbrowser
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from diagnose.cli.common import EPILOG, log, run
from diagnose.cli.options import OutputOptions, page_output_options

if TYPE_CHECKING:
    from diagnose.compare.model import Diff


def write_diff(diff: Diff, out_dir: Path) -> tuple[Path, Path]:
    """`diagnose-diff-<YYYYmmdd-HHMMSS>.json` and `.html` in `out_dir`, each whole or not at all;
    a name already taken gets a suffix (the rules every report follows)."""
    from diagnose.outputs.files import write_report
    from diagnose.render.diff_html import render_diff_html

    base = f"diagnose-diff-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    return write_report(out_dir, base, diff.to_json(), render_diff_html(diff))


@click.command(name="diff", epilog=EPILOG)
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@page_output_options
def diff(before: Path, after: Path, outputs: OutputOptions) -> None:
    """Compare two reports of one service (their .json, or the .html pages): the verdict before
    and after, each finding's severity change (or "within noise"), the wait sites that appeared,
    disappeared or changed, the state mix per thread role, and a differential flame graph.
    Frames are matched by function and by file relative to its package root (site-packages, the
    standard library) or release directory (the longest common path suffix), so the same code
    deployed under another prefix or virtualenv compares; reports with no code in common are of
    different programs and refused (exit 2)."""
    from diagnose.compare.report_diff import diff_reports
    from diagnose.checks.registry import evidence_labels
    from diagnose.report.reader import read_report

    def action() -> int:
        result = diff_reports(read_report(before, older_labels=evidence_labels),
                              read_report(after, older_labels=evidence_labels), (before.name, after.name))
        json_path, html_path = write_diff(result, outputs.output_dir)
        if outputs.as_json:
            click.echo(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
        else:
            click.echo(f"Diff: {result.summary}")
            if result.paths.note:
                click.echo(f"Paths: {result.paths.note}")
        log(f"Report: {html_path}   (also {json_path.name})")
        if outputs.open_browser:
            webbrowser.open(html_path.resolve().as_uri())
        return 0

    run(action)
