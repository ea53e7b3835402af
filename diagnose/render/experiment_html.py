"""The HTML page of `diagnose experiment`: one self-contained file, no script (the bars are SVG
drawn here), inline CSS under a hashed CSP, every text autoescaped (environment values and
commands come from the user, verdict headlines from the profiled process). It only renders: the
numbers and judgements come finished in the report."""

from __future__ import annotations

import re
from collections.abc import Sequence

from markupsafe import Markup

from diagnose.report.load_report import ExperimentReport, Variant

from diagnose.render.html import (content_security_policy, inline_stylesheet, script_safe_json,
                                  template_environment)

_CSS = "static/sweep.css"

# Bar chart geometry, in SVG user units: one row per variant.
W, LEFT, RIGHT, ROW, TOP, BOTTOM = 640, 220, 70, 26, 8, 26
LABEL_CHARS = 34
# A report named by us sits beside the page; anything else is not linked.
_SAFE_LINK = re.compile(r"[A-Za-z0-9._-]+\.html\Z")



def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"


def bars(variants: Sequence[Variant]) -> dict:
    """Median throughput per variant as a horizontal bar, the rounds' range as a whisker."""
    top = max([v.throughput_rps or 0 for v in variants]
              + [max(v.rps_by_round or [0]) for v in variants] + [1e-9])
    scale = (W - LEFT - RIGHT) / top
    rows = []
    for i, v in enumerate(variants):
        y = TOP + i * ROW
        rps, runs = v.throughput_rps, [r for r in v.rps_by_round if r]
        rows.append({"y": y, "mid": y + ROW / 2, "label": _short(v.name),
                     "width": round((rps or 0) * scale, 1), "value": rps,
                     "failed": v.status == "failed",
                     "lo": round(LEFT + min(runs) * scale, 1) if runs and rps else None,
                     "hi": round(LEFT + max(runs) * scale, 1) if runs and rps else None})
    height = TOP + len(variants) * ROW + BOTTOM
    ticks = [{"x": round(LEFT + top * f / 4 * scale, 1), "label": f"{top * f / 4:,.4g}"}
             for f in range(5)]
    return {"w": W, "h": height, "left": LEFT, "axis_y": height - BOTTOM, "rows": rows,
            "ticks": ticks, "bar_h": ROW - 8}



def render_experiment_html(report: ExperimentReport) -> str:
    css = inline_stylesheet(_CSS)
    links = {v.name: v.report for v in report.variants
             if v.report is not None and _SAFE_LINK.match(v.report)}
    return template_environment().get_template("experiment.html.j2").render(
        report=report, chart=bars(report.variants), links=links, css=Markup(css),
        csp=content_security_policy(None, css),
        data_json=Markup(script_safe_json(report.to_json())))
