"""The report's HTML page and Markdown summary, each made from the report alone: one function
for each, used by `attach` and `analyze` as they write a report and by `diagnose render` as it
rebuilds them from a saved `.json`, so both write the same bytes."""

from __future__ import annotations

from diagnose.render.deadlock_text import dump_lines
from diagnose.render.html import render_html
from diagnose.render.html_data import page_data
from diagnose.render.markdown import render_markdown
from diagnose.report.model import Report

# The files a report's summary names, the page first (outputs as pipeline.write_outputs names
# them: `<base><suffix>`).
SUMMARY_NAMES = (".html", ".json", ".speedscope.json")


def page_html(report: Report, data: dict | None = None) -> str:
    """The report's page. `data`: `report.to_json()` when the caller has it already."""
    return render_html(page_data(report, data), report, dump_lines(report))


def summary_markdown(report: Report, base: str) -> str:
    """The report's ticket summary, naming the files `<base>.html`, `.json`, `.speedscope.json`."""
    return render_markdown(report, [f"{base}{suffix}" for suffix in SUMMARY_NAMES])
