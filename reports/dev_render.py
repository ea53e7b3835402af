"""Renders a report page from a data file, for working on the template and its JS/CSS.

    python reports/dev_render.py reports/dev_sample_data.json out.html

Uses the production renderer (diagnose.render.html), so what you see is what users get.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from diagnose.render.html import render_html
from diagnose.report.model import Report


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    data = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    # the page's no-JavaScript view reads the report model the page data was made from
    Path(argv[1]).write_text(render_html(data, Report.from_json(data["report"])), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
