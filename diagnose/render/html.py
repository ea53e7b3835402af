"""The self-contained HTML report: one file, inline assets, data as escaped JSON, strict CSP."""

from __future__ import annotations

import base64
import hashlib
import json
from importlib import resources

import jinja2
from markupsafe import Markup

_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                 "\u2029": "\\u2029"}


def script_safe_json(data) -> str:
    """JSON that cannot close its <script> element or break out of it in any parser."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
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


# Sequences that would end or confuse the inline element early and break the CSP hash.
_UNSAFE_INLINE = {"static/report.js": ("</script", "<!--", "<script"),
                  "static/report.css": ("</style", "<!--")}


def _inline_asset(name: str) -> str:
    text = _asset(name)
    if any(bad in text.lower() for bad in _UNSAFE_INLINE[name]) or "\r" in text or "\0" in text:
        raise ValueError(f"{name} cannot be inlined safely")
    return text


def template_environment() -> jinja2.Environment:
    """The pages' templates: every value autoescaped, a missing one an error."""
    return jinja2.Environment(loader=jinja2.PackageLoader("diagnose._reports", ""),
                              autoescape=True, undefined=jinja2.StrictUndefined)


def inline_stylesheet(name: str) -> str:
    """A stylesheet of reports/static, checked safe to inline in a <style> element: nothing
    that ends it early, no carriage return or NUL that would break its CSP hash."""
    text = _asset(name)
    if "</style" in text.lower() or "<!--" in text or "\r" in text or "\0" in text:
        raise ValueError(f"{name} cannot be inlined safely")
    return text


def render_html(data: dict) -> str:
    env = template_environment()
    js, css = _inline_asset("static/report.js"), _inline_asset("static/report.css")
    template = env.get_template("report.html.j2")
    return template.render(data_json=Markup(script_safe_json(data)), js=Markup(js),
                           css=Markup(css), csp=content_security_policy(js, css),
                           report=data["report"])
