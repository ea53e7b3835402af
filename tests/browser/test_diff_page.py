"""The diff page in a real browser: drawn without script, no CSP violation, nothing fetched, the
differential flame graph laid out from AFTER's shares, hostile names inert."""

from __future__ import annotations

from dataclasses import replace

from diagnose.compare.report_diff import diff_reports
from diagnose.render.diff_html import render_diff_html
from tests.browser.conftest import requires_browser
from tests.unit.test_diff import report

pytestmark = [requires_browser]

HOSTILE = "</script><img src=x onerror=alert(1)>"


def diff_page(tmp_path):
    before, after = report(0.6, 90), report(0.0, 0)
    frames = list(after.stacks.frames)
    frames[2] = replace(frames[2], function=HOSTILE)  # the fixed caller, named by the process
    after = replace(after, stacks=replace(after.stacks, frames=tuple(frames)), waits=())
    path = tmp_path / "diff.html"
    path.write_text(render_diff_html(diff_reports(before, after)), encoding="utf-8")
    return path


def test_the_diff_page_draws_its_flame_graph_without_script(open_report, tmp_path):
    opened = open_report(diff_page(tmp_path), wait_ready=False)
    page = opened.page
    opened.assert_clean()
    assert page.evaluate("document.scripts.length") == 1  # the JSON data block only
    assert page.locator("img").count() == 0
    rects = page.locator("svg.flame rect")
    assert rects.count() == 4  # Thread.run → handle → (renamed caller) → forward
    widths = [float(rects.nth(i).get_attribute("width")) for i in range(4)]
    assert widths[0] == widths[3] and widths[0] > 1000  # every sample passes through all four
    assert HOSTILE in page.locator("svg.flame title").nth(2).text_content()
    assert page.locator("#vanished li").count() == 1
    assert "Thread.run → handle → predict" in page.locator("#vanished").inner_text()
    assert page.locator("#primary-status").inner_text() == "changed"
    assert "lock_contention critical → ok" in page.locator("#headline").inner_text()
    assert page.locator('tr[data-finding="lock_contention"].real').count() == 1
