"""The HTML page of `diagnose sweep`: one self-contained file,
no script at all (the charts are SVG drawn here), inline CSS under a hashed CSP, every text
autoescaped. Renderers only render: the numbers and judgements come finished in the report."""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup

from diagnose.report.load_report import SweepReport, SweepStep

from diagnose.render.html import (content_security_policy, inline_stylesheet, script_safe_json,
                                  template_environment)

_CSS = "static/sweep.css"



# Chart geometry, in SVG user units.
W, H, LEFT, RIGHT, TOP, BOTTOM = 500, 260, 56, 12, 12, 34


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for m in (1, 2, 2.5, 5, 10):
        if value <= m * exp:
            return m * exp
    return 10 * exp


def _series_value(step: SweepStep, key: str) -> float | None:
    """"throughput_rps", or a latency percentile "p50" / "p95" / "p99" (ms)."""
    latency = step.latency_ms
    return {"throughput_rps": step.throughput_rps, "p50": latency.p50, "p95": latency.p95,
            "p99": latency.p99}[key]


def chart(steps: Sequence[SweepStep], series: tuple[str, ...], knee: float | None) -> dict:
    """Polylines of `series` over the load (connections or requests/s) on a log2 axis."""
    points = [s for s in steps if s.level]
    frame = {"w": W, "h": H, "left": LEFT, "bottom": H - BOTTOM, "right": W - RIGHT, "top": TOP}
    if not points:
        return {**frame, "lines": [], "xticks": [], "yticks": [], "knee_x": None}
    xs = [math.log2(level) for s in points if (level := s.level)]  # every point has a level
    x0, x1 = min(xs), max(xs)
    span = (x1 - x0) or 1.0
    top = _nice_max(max((_series_value(s, k) or 0) for s in points for k in series))

    def px(c: float | None) -> float:
        return LEFT + (math.log2(c or 1) - x0) / span * (W - LEFT - RIGHT)

    def py(v: float | None) -> float:
        return H - BOTTOM - ((v or 0) / top) * (H - TOP - BOTTOM)

    lines = []
    for key in series:
        pts = [(px(s.level), py(_series_value(s, key))) for s in points
               if _series_value(s, key) is not None]
        lines.append({"key": key, "points": " ".join(f"{x:.1f},{y:.1f}" for x, y in pts),
                      "dots": [{"x": round(x, 1), "y": round(y, 1)} for x, y in pts]})
    yticks = [{"y": round(py(top * f / 4), 1), "label": f"{top * f / 4:,.4g}"} for f in range(5)]
    xticks = [{"x": round(px(s.level), 1), "label": f"{s.level or 0:g}"} for s in points]
    return {**frame, "lines": lines, "xticks": xticks, "yticks": yticks,
            "knee_x": round(px(knee), 1) if knee else None}



def render_sweep_html(report: SweepReport) -> str:
    css = inline_stylesheet(_CSS)
    knee_step = report.knee_step
    knee = knee_step.level if knee_step else None
    charts = {"rps": chart(report.steps, ("throughput_rps",), knee),
              "latency": chart(report.steps, ("p50", "p95", "p99"), knee)}
    return template_environment().get_template("sweep.html.j2").render(
        report=report, charts=charts, css=Markup(css), csp=content_security_policy(None, css),
        data_json=Markup(script_safe_json(report.to_json())))
