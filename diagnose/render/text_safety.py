"""Untrusted text shown as what it is: the one set of characters no output prints as themselves.

Thread, lock, function and file names, command lines and notes come from the profiled process.
Some characters in them are invisible or act on the text around them: C0 and C1 controls (a
terminal's escape sequences, line breaks), the bidirectional embeddings, overrides, isolates and
marks (which reorder a line: a name could make its row read backwards), zero-width and other
invisible formatting (which hide a difference between two names). Every output shows each of
them as its code point instead:

- the terminal's deadlock dump and the pages' no-JavaScript views (the `clean` macro of
  reports/_macros.html.j2, this module's `show_invisible` filter) write `[U+202E]`;
- the Markdown summary first makes the line breaks and other controls spaces (it is one line
  per row), then writes the rest as `[U+200B]`;
- the report page's script marks them `U+202E` (reports/static/page/core.js, `INVISIBLE_RE`:
  the same set, kept equal to `INVISIBLE_RANGES` by tests/unit/test_text_safety.py).
"""

from __future__ import annotations

import unicodedata

from markupsafe import Markup

# Inclusive code point ranges, in order. All are in the Basic Multilingual Plane, so the page's
# script matches them with a character class of UTF-16 code units.
INVISIBLE_RANGES: tuple[tuple[int, int], ...] = (
    (0x0000, 0x001F),  # C0 controls: NUL, tab, line feed, escape, ...
    (0x007F, 0x009F),  # DEL and the C1 controls
    (0x00AD, 0x00AD),  # soft hyphen
    (0x061C, 0x061C),  # Arabic letter mark (bidi)
    (0x180E, 0x180E),  # Mongolian vowel separator
    (0x200B, 0x200F),  # zero-width space, non-joiner, joiner; left-to-right and right-to-left marks
    (0x2028, 0x202E),  # line and paragraph separators; bidi embeddings, pop and overrides
    (0x2060, 0x2064),  # word joiner, invisible operators
    (0x2066, 0x206F),  # bidi isolates and their pop; deprecated format characters
    (0xFEFF, 0xFEFF),  # zero-width no-break space (byte order mark)
    (0xFFF9, 0xFFFB),  # interlinear annotation
)

INVISIBLE = frozenset(chr(c) for low, high in INVISIBLE_RANGES for c in range(low, high + 1))

# The controls among them that end or break a line (Cc, and the line and paragraph separators):
# the Markdown summary makes these spaces, since a newline would end a table row.
LINE_BREAKING = frozenset(c for c in INVISIBLE if unicodedata.category(c) in ("Cc", "Zl", "Zp"))


def code_point(c: str) -> str:
    """`U+202E`: how a character of the set is named in place of itself."""
    return f"U+{ord(c):04X}"


def show_invisible(text: object) -> str:
    """`text` with each character of the set written as its code point in brackets: `[U+202E]`.
    Markup stays Markup (the brackets and code point are inert in HTML)."""
    if isinstance(text, Markup):
        return Markup("".join(f"[{code_point(c)}]" if c in INVISIBLE else c for c in text))
    return "".join(f"[{code_point(c)}]" if c in INVISIBLE else c for c in str(text))


def js_character_class() -> str:
    """The set as a JavaScript regular expression's character class, `[\\u0000-\\u001f...]`, as
    the page's script writes it (lower-case hex, a single character without a range)."""
    def esc(c: int) -> str:
        return f"\\u{c:04x}"
    return "[" + "".join(esc(low) if low == high else f"{esc(low)}-{esc(high)}"
                         for low, high in INVISIBLE_RANGES) + "]"
