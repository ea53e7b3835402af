"""The guards the browser tests rely on do catch what they are meant to catch."""

from __future__ import annotations

from tests.browser.conftest import requires_browser

pytestmark = requires_browser

# A page that asks for the network and runs an inline script its own CSP does not allow.
_LEAKY_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src http:">
</head><body><img src="http://192.0.2.1/pixel.png">
<script>console.log('inline ran')</script></body></html>"""


def test_other_requests_and_csp_violations_are_caught(open_report, tmp_path):
    page_file = tmp_path / "leaky.html"
    page_file.write_text(_LEAKY_PAGE, encoding="utf-8")
    opened = open_report(page_file, wait_ready=False)
    opened.page.wait_for_load_state("load")
    assert opened.other_requests == ["http://192.0.2.1/pixel.png"]
    assert any("script-src" in m for m in opened.csp_messages())
    assert ("log", "inline ran") not in opened.console
