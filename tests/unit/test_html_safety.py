"""Data enters the page once, as JSON that cannot break out of its script element."""

import json

from diagnose.render.html import content_security_policy, script_safe_json


def test_script_safe_json_escapes_markup_and_line_separators():
    hostile = {"name": "</script><img src=x onerror=alert(1)>", "sep": "a\u2028b\u2029c", "amp": "&"}
    text = script_safe_json(hostile)
    for raw in ("<", ">", "&", "\u2028", "\u2029"):
        assert raw not in text
    assert json.loads(text) == hostile


def test_csp_allows_only_the_inline_assets_and_no_network():
    csp = content_security_policy("console.log(1)", "body{}")
    assert "default-src 'none'" in csp
    assert "script-src 'sha256-" in csp and "style-src 'sha256-" in csp
    assert "http" not in csp and "unsafe-inline" not in csp
