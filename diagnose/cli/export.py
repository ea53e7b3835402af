"""`diagnose export REPORT --format pprof`: a written report's stacks in another tool's format."""

from __future__ import annotations

import os
from pathlib import Path

import click

from diagnose.cli.common import run
from diagnose.errors import OutputFailed

FORMAT_SUFFIXES = {"pprof": ".pb.gz"}

EPILOG = """\b
Exit codes: 0 ok, 6 REPORT is not a diagnose report with stacks, 11 the output could not be
written (or -o names a file that exists).
"""


def _claim(path: Path) -> bool:
    """Creates `path` empty if no file has that name; False when one has (never replaced)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        raise OutputFailed(f"could not write {path}: {exc.strerror or exc}") from None


def default_output(report_path: Path, suffix: str) -> Path:
    """`<report stem><suffix>` beside the report, or `<stem>-2<suffix>`, `-3`...: the first name
    no file has, claimed (created empty) so that two exports at once never share one."""
    stem = report_path.name.rsplit(".", 1)[0] if "." in report_path.name else report_path.name
    for n in range(1, 1000):
        candidate = report_path.with_name(f"{stem}{suffix}" if n == 1 else f"{stem}-{n}{suffix}")
        if _claim(candidate):
            return candidate
    raise OutputFailed(f"could not export beside {report_path}: 999 files named {stem}*{suffix} "
                       f"exist")


def _export(report_path: Path, fmt: str, output: Path | None) -> None:
    # imported here: the pprof encoder (protobuf) is for this command alone, not for every
    # start of the program
    from diagnose.export.pprof import write_pprof
    from diagnose.checks.registry import evidence_labels
    from diagnose.report.reader import read_report

    report = read_report(report_path, older_labels=evidence_labels)
    if output is None:
        target = default_output(report_path, FORMAT_SUFFIXES[fmt])
    elif _claim(output):
        target = output
    else:
        # A name the user chose is never replaced silently: the file there may matter.
        raise OutputFailed(f"{output} exists: remove it or name another file with -o")
    try:
        write_pprof(report, target)
    except BaseException:
        target.unlink(missing_ok=True)  # the empty file that claimed the name
        raise
    click.echo(str(target))


@click.command(name="export", epilog=EPILOG)
@click.argument("report_path", metavar="REPORT", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(sorted(FORMAT_SUFFIXES)), default="pprof",
              show_default=True, help="pprof: a gzipped profile.proto (go tool pprof, Pyroscope).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="The file to write (default: beside REPORT as <report stem>.pb.gz, with -2, "
                   "-3... when that name is taken). Never replaced if it exists.")
def export(report_path, fmt, output):
    """Write the stacks of REPORT (a diagnose .json or .html report) as a pprof profile.

    Prints the path written."""
    run(lambda: _export(report_path, fmt, output))
