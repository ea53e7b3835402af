"""One set of unsafe characters (render/text_safety.py) for every output: the terminal's deadlock
dump, the pages' no-JavaScript views, the Markdown summary and the page's script."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

from diagnose.render.deadlock_text import safe
from diagnose.render.html import template_environment
from diagnose.render.markdown import md_cell, md_code, md_text
from diagnose.render.text_safety import (INVISIBLE, INVISIBLE_RANGES, LINE_BREAKING,
                                         js_character_class, show_invisible)

REPO = Path(__file__).resolve().parents[2]
CORE_JS = REPO / "reports" / "static" / "page" / "core.js"


def _js_set(character_class: str) -> frozenset[str]:
    """The characters of a JavaScript character class written with \\uXXXX escapes."""
    out: set[str] = set()
    for low, high in re.findall(r"\\u([0-9a-fA-F]{4})(?:-\\u([0-9a-fA-F]{4}))?",
                                character_class):
        out.update(chr(c) for c in range(int(low, 16), int(high or low, 16) + 1))
    return frozenset(out)


def test_the_page_script_marks_exactly_the_python_set():
    source = CORE_JS.read_text(encoding="utf-8")
    found = re.search(r"const INVISIBLE_RE = /(\[[^\]]*\])/g;", source)
    assert found, "core.js declares INVISIBLE_RE as one character class"
    assert _js_set(found.group(1)) == INVISIBLE
    assert found.group(1) == js_character_class()


def test_the_set_holds_the_controls_bidi_and_zero_width_characters():
    for c in "\x00\t\n\x1b\x7f\x85\u2028\u2029\u202a\u202e\u2066\u2069\u200e\u200f\u061c" \
             "\u200b\u200d\u2060\ufeff\u00ad":
        assert c in INVISIBLE, f"U+{ord(c):04X}"
    # every control, line and paragraph separator is in it (the Markdown's spaces come from it)
    assert LINE_BREAKING == {c for c in map(chr, range(0x10000))
                             if unicodedata.category(c) in ("Cc", "Zl", "Zp")}
    assert all(low <= high for low, high in INVISIBLE_RANGES)
    assert "a" not in INVISIBLE and " " not in INVISIBLE and "\u00e9" not in INVISIBLE


HOSTILE = "a" + "".join(sorted(INVISIBLE)) + "z"


def test_the_templates_clean_macro_shows_every_character_of_the_set():
    template = template_environment().from_string(
        '{% from "_macros.html.j2" import clean %}{{ clean(s) }}|{{ clean(none) }}|')
    shown = template.render(s="<b>" + HOSTILE)
    assert not set(shown) & INVISIBLE
    assert shown.startswith("&lt;b&gt;a[U+0000][U+0001]")
    assert "[U+202E]" in shown and "[U+200B]" in shown and "[U+000A]" in shown
    assert shown.endswith("z||")


def test_the_terminal_and_markdown_show_every_character_of_the_set():
    assert not set(safe(HOSTILE, limit=10_000)) & INVISIBLE
    assert safe("evil\x1b[2J\u202ename\u200b") == "evil[U+001B][2J[U+202E]name[U+200B]"
    for shown in (md_text(HOSTILE), md_cell(HOSTILE), md_code(HOSTILE)):
        assert not set(shown) & INVISIBLE
        assert "U+202E" in shown and "U+200B" in shown  # md_text escapes the brackets
    # the Markdown keeps one line: line breaks and controls are spaces, not code points
    assert md_text("one\ntwo\u2028three\u200bfour") == "one two three\\[U+200B\\]four"


def test_show_invisible_keeps_markup_markup():
    from markupsafe import Markup
    shown = show_invisible(Markup("<i>x</i>\u202e"))
    assert isinstance(shown, Markup) and shown == Markup("<i>x</i>[U+202E]")
    assert show_invisible(None) == "None" and show_invisible(12) == "12"


@pytest.mark.parametrize("folder,pattern", [("diagnose", "*.py"), ("reports", "*.j2"),
                                            ("reports/static/page", "*.js")])
def test_no_other_file_lists_the_bidi_controls(folder, pattern):
    """The set is declared once (and in core.js's INVISIBLE_RE, tested equal above)."""
    allowed = {REPO / "diagnose" / "render" / "text_safety.py", CORE_JS}
    for path in sorted((REPO / folder).rglob(pattern)):
        if path in allowed:
            continue
        text = path.read_text(encoding="utf-8")
        assert "\\u202e" not in text.lower() and "\u202e" not in text, path
