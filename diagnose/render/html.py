"""The self-contained HTML report: one file, inline assets, data as escaped JSON, strict CSP."""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Sequence
from importlib import resources

import jinja2
from markupsafe import Markup

from diagnose.render.cpu_account_words import account_words
from diagnose.render.json_text import compact_text
from diagnose.render.text_safety import show_invisible
from diagnose.render.wording import gain_words, observer_cpu_text
from diagnose.report.model import Report

_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                 "\u2029": "\\u2029"}


def script_safe_json(data: object) -> str:
    """JSON that cannot close its <script> element or break out of it in any parser."""
    text = compact_text(data)
    for raw, escaped in _JSON_ESCAPES.items():
        text = text.replace(raw, escaped)
    return text


def _sha256(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def content_security_policy(js: str | None, css: str) -> str:
    """Only the inline script and style of exactly these texts run; `js` None: no script."""
    script = "'none'" if js is None else f"'sha256-{_sha256(js)}'"
    return (f"default-src 'none'; script-src {script}; "
            f"style-src 'sha256-{_sha256(css)}'; img-src data:; base-uri 'none'; form-action 'none'")


def _asset(name: str) -> str:
    return resources.files("diagnose._reports").joinpath(name).read_text(encoding="utf-8")


# The report page's script, one file per view (reports/static/page/), joined in this order into
# one strict-mode function: one inline script, one CSP hash, no module loader, works offline.
# The parts share that function's scope: later parts use the helpers of `core`.
PAGE_SCRIPT = ("core", "verdict", "account", "flame", "timeline", "waits", "processes", "loops", "structure",
               "waitgraph", "chains", "main")


def _checked_inline(name: str, text: str, unsafe: tuple[str, ...]) -> str:
    """`text`, checked safe to inline: nothing that ends or confuses its element early, no
    carriage return or NUL that would break its CSP hash."""
    if any(bad in text.lower() for bad in unsafe) or "\r" in text or "\0" in text:
        raise ValueError(f"{name} cannot be inlined safely")
    return text


def page_script() -> str:
    """The report page's script, assembled from its parts."""
    parts = [_asset(f"static/page/{part}.js") for part in PAGE_SCRIPT]
    text = "(function () {\n  'use strict';\n\n" + "\n".join(parts) + "})();\n"
    return _checked_inline("static/page/*.js", text, ("</script", "<!--", "<script"))


@functools.cache
def template_environment() -> jinja2.Environment:
    """The pages' templates: every value autoescaped, a missing one an error. One environment
    per process: it keeps each template compiled."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("diagnose._reports", ""),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["show_invisible"] = show_invisible  # the `clean` macro's (_macros.html.j2)
    return env


def inline_stylesheet(name: str) -> str:
    """A stylesheet of reports/static, checked safe to inline in a <style> element: nothing
    that ends it early, no carriage return or NUL that would break its CSP hash."""
    return _checked_inline(name, _asset(name), ("</style", "<!--"))


def render_html(data: dict, report: Report, deadlock_lines: Sequence[str] = ()) -> str:
    """The report page of `data` (render/html_data.page_data, whose script reads it); its
    no-JavaScript view reads `report`, the model `data` was made from. `deadlock_lines`: the
    deadlock as text for that view (deadlock_text.dump_lines). The findings' gain words
    (render/wording.py) are made here from `report`, once for both: the page's data carries
    them as `gain_text` and the no-JavaScript view prints the same strings; so are the
    observer's CPU words (`observer_cpu_text`, "" when the report has no such measure), and the
    CPU account's (`cpu_account_text`, render/cpu_account_words.py)."""
    env = template_environment()
    js, css = page_script(), inline_stylesheet("static/report.css")
    template = env.get_template("report.html.j2")
    words = [gain_words(f) for f in report.findings]
    observer_cpu = observer_cpu_text(report.sampling.observer)
    account = account_words(report.cpu_account)
    data = {**data, "gain_text": [w.to_json() for w in words], "observer_cpu_text": observer_cpu,
            "cpu_account_text": account.to_json()}
    return template.render(data_json=Markup(script_safe_json(data)), js=Markup(js),
                           css=Markup(css), csp=content_security_policy(js, css),
                           report=report, deadlock_lines=deadlock_lines, gain_words=words,
                           observer_cpu=observer_cpu, cpu_account=account)
