"""The page's data (docs/report-data.md): the report, whole, and the words the page reads.

Made from the report alone, so that `attach`, `analyze` and `render` (a saved `.json`) write the
same page. Each table is carried once: the page draws its flame graph from the report's `stacks`
and its thread table and timeline from `threads` and `page` (report/model/page.py).
"""

from __future__ import annotations

from diagnose.vocab import page_vocabulary
from diagnose.render.evidence import SKIPPED, describe_evidence
from diagnose.report.model import Report


def page_data(report: Report, data: dict | None = None) -> dict:
    """`data`: `report.to_json()` when the caller has it already (the .json file's)."""
    data = report.to_json() if data is None else data
    return {
        # The whole .json report, its `stacks` table and the page's own tables included: the
        # page is the one file people attach to a ticket, and `diagnose diff` / `export` /
        # `render` read it as they read the .json.
        "report": data,
        # Per finding, in the report's order: its evidence as labelled rows with units.
        "evidence_text": [[row.to_json() for row in describe_evidence(f)] for f in report.findings],
        # The evidence keys shown another way than as a row (the knob line, the thread dump).
        "evidence_hidden": list(SKIPPED),
        # The words the page shows and the orders it sorts by (model/vocab.py).
        "vocabulary": page_vocabulary(),
    }
