"""The page of `diagnose diff`: one self-contained file, no script at all (the differential flame
graph is SVG laid out here), inline CSS under a hashed CSP, every text autoescaped. The
numbers and judgements come finished in the diff model (diagnose/compare/model.py); this only
lays out."""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from diagnose.compare.model import Diff, FlameNode
from diagnose.render.html import (content_security_policy, inline_stylesheet, script_safe_json,
                                  template_environment)

_CSS = "static/diff.css"

# Flame graph geometry, in SVG user units.
FLAME_W, ROW_H = 1160, 17
CHAR_W = 6.6  # an 11px system font's mean character width, to cut labels to their box
# The colour saturates at this change of a frame's share (10 points of all samples): the same
# colour means the same change on every diff page.
SATURATE_AT = 0.10
_NEUTRAL, _GREW, _SHRANK = (226, 226, 226), (200, 40, 40), (40, 100, 190)


@dataclass(frozen=True)
class FlameRect:
    x: float
    y: int
    w: float
    fill: str
    label: str  # the function's name cut to the box ("" when none fits)
    node: FlameNode


@dataclass(frozen=True)
class FlameLayout:
    w: int
    h: int
    row_h: int
    rects: tuple[FlameRect, ...]


@dataclass(frozen=True)
class LegendEntry:
    label: str
    fill: str


def change_colour(change: float) -> str:
    """Grey for no change, towards red as the frame's share grew, towards blue as it shrank."""
    t = min(1.0, abs(change) / SATURATE_AT)
    end = _GREW if change > 0 else _SHRANK
    r, g, b = (round(n + (e - n) * t) for n, e in zip(_NEUTRAL, end))
    return f"#{r:02x}{g:02x}{b:02x}"


def _label(function: str, width: float) -> str:
    fits = int((width - 6) / CHAR_W)
    if fits < 3:
        return ""
    return function if len(function) <= fits else function[:fits - 1] + "…"


def flame_layout(nodes: tuple[FlameNode, ...]) -> FlameLayout:
    """Rectangles for the depth-first nodes: widths from AFTER's shares, children from their
    parent's left edge, root on top."""
    next_x: list[float] = []
    rects = []
    for node in nodes:
        depth = node.depth
        del next_x[depth + 1:]
        while len(next_x) <= depth:
            next_x.append(0.0)
        x, width = next_x[depth], node.after * FLAME_W
        next_x[depth] = x + width
        next_x.append(x)  # this node's children start at its left edge
        rects.append(FlameRect(x=round(x, 2), y=depth * ROW_H, w=round(max(width, 0.3), 2),
                               fill=change_colour(node.change),
                               label=_label(node.function, width), node=node))
    depth = max((n.depth for n in nodes), default=-1) + 1
    return FlameLayout(w=FLAME_W, h=max(depth, 1) * ROW_H, row_h=ROW_H, rects=tuple(rects))


LEGEND = tuple(LegendEntry(label, change_colour(c))
               for label, c in (("−10 points or less", -SATURATE_AT), ("−5", -SATURATE_AT / 2),
                                ("no change", 0.0), ("+5", SATURATE_AT / 2),
                                ("+10 points or more", SATURATE_AT)))


def render_diff_html(diff: Diff) -> str:
    css = inline_stylesheet(_CSS)
    return template_environment().get_template("diff.html.j2").render(
        diff=diff, flame=flame_layout(diff.flame.nodes), legend=LEGEND, css=Markup(css),
        csp=content_security_policy(None, css), data_json=Markup(script_safe_json(diff.to_json())))
