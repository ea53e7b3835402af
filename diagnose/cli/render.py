"""`diagnose render REPORT`: the HTML page and the Markdown summary of a saved report, rebuilt
from its data alone (a ticket's attachment after an upgrade, a CI artifact)."""

from __future__ import annotations

from pathlib import Path

import click

from diagnose.cli.common import log, run

EPILOG = """\b
Exit codes: 0 ok, 6 REPORT is not a diagnose report, 11 an output file could not be written.
"""

# The suffixes of a report file whose stem is the report's name (`diagnose-<pid>-<time>`).
_REPORT_SUFFIXES = (".json", ".html")


def report_base(path: Path) -> str:
    """The report's name, as `attach` wrote its files: `<base>.json`, `<base>.html`."""
    name = path.name
    for suffix in _REPORT_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[:-len(suffix)]
    return name


def render_files(report_path: Path, out_dir: Path | None) -> tuple[Path, Path, bool]:
    """Writes `<base>.html` and `<base>.md` of the report at `report_path` into `out_dir`
    (default: beside it), each whole or not at all, replacing files of those names. Returns
    their paths and whether the report predates the page's own tables (rendered without them)."""
    from diagnose.outputs.files import WriteFailed, prepare_output_dir, write_text
    from diagnose.errors import OutputFailed
    from diagnose.render.page_tables import earlier_page
    from diagnose.render.report_files import page_html, summary_markdown
    from diagnose.checks.registry import evidence_labels
    from diagnose.report.reader import read_report

    report = read_report(report_path, need_stacks=False, older_labels=evidence_labels)
    earlier = report.page is None
    report = earlier_page(report)
    base = report_base(report_path)
    out_dir = report_path.parent if out_dir is None else out_dir
    prepare_output_dir(out_dir)
    html_path, md_path = out_dir / f"{base}.html", out_dir / f"{base}.md"
    try:
        write_text(html_path, page_html(report))
        write_text(md_path, summary_markdown(report, base))
    except WriteFailed as exc:
        kept = f"; {html_path.name} was written" if html_path.exists() and exc.path != html_path else ""
        raise OutputFailed(f"could not write {exc.path}: {exc.reason}{kept}") from None
    return html_path, md_path, earlier


@click.command(name="render", epilog=EPILOG)
@click.argument("report_path", metavar="REPORT", type=click.Path(path_type=Path))
@click.option("--out", "--output-dir", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None,
              help="Where the .html and .md are written (default: beside REPORT). Files of "
                   "those names there are replaced.")
def render(report_path: Path, out_dir: Path | None) -> None:
    """Rebuild the HTML page and the Markdown summary of REPORT (a diagnose .json report, or
    its .html page) from the report's data alone: no profile, no process, no analysis.

    Writes <name>.html and <name>.md, named after REPORT as `attach` names them
    (diagnose-<pid>-<time>.json gives diagnose-<pid>-<time>.html and .md); for a report
    written by this version they are byte for byte the files `attach` or `analyze` wrote. A
    report written before reports carried the page's own tables is rendered without its
    timeline, its frames coloured by the built-in rules, and the page says so: analyze its
    .speedscope.json again for the whole page. Prints the paths written."""

    def action() -> int:
        html_path, md_path, earlier = render_files(report_path, out_dir)
        if earlier:
            log(f"warning: {report_path} was written by an older diagnose: the page has no "
                f"timeline and its frames are coloured by the built-in rules; analyze its "
                f".speedscope.json again for the whole page")
        click.echo(str(html_path))
        click.echo(str(md_path))
        return 0

    run(action)
