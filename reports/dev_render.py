"""Render the HTML report template from a data file, the same way production does.

    python reports/dev_render.py reports/dev_sample_data.json out.html

`render_report_html` is deliberately small and self-contained (stdlib + jinja2 + markupsafe)
so it can be moved into diagnose/render/html.py as is.
"""

import base64
import hashlib
import json
import sys
from pathlib import Path

import jinja2
from markupsafe import Markup

REPORTS_DIR = Path(__file__).resolve().parent

# Characters that must not appear raw inside <script type="application/json">.
_JSON_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)


def render_report_html(data: dict, reports_dir: Path = REPORTS_DIR) -> str:
    """Return the self-contained report page for `data` (see docs/report-data.md)."""
    js = (reports_dir / "static" / "report.js").read_text(encoding="utf-8")
    css = (reports_dir / "static" / "report.css").read_text(encoding="utf-8")
    # The browser hashes the element text after HTML parsing; these would change it or end the
    # element early, and the CSP hash would then silently block the whole page.
    for name, text, forbidden in (
        ("report.js", js, ("</script", "<!--", "<script")),
        ("report.css", css, ("</style", "<!--")),
    ):
        if "\r" in text or "\0" in text or any(f in text.lower() for f in forbidden):
            raise ValueError(f"{name} cannot be inlined safely")

    data_json = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for raw, escaped in _JSON_ESCAPES:
        data_json = data_json.replace(raw, escaped)

    def sha256(text: str) -> str:
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"

    csp = (
        f"default-src 'none'; script-src {sha256(js)}; style-src {sha256(css)}; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(reports_dir)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    return env.get_template("report.html.j2").render(
        data_json=Markup(data_json),
        css=Markup(css),
        js=Markup(js),
        csp=csp,
        report=data["report"],
    )


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python reports/dev_render.py DATA.json OUT.html", file=sys.stderr)
        return 2
    data = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    with open(argv[2], "w", encoding="utf-8", newline="\n") as out:
        out.write(render_report_html(data))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
