"""Where the CPU went, in a real browser: the gc_heavy attach's page draws one stacked bar under
the verdict whose segments are the account's parts (the collector among them, marked as an
estimate), and a report of an older recording says "not measured" instead of drawing one."""

from __future__ import annotations

import pytest

from diagnose.vocab import CpuPart
from tests.browser.conftest import analyze_recorded, requires_browser
from tests.replay import replay

pytestmark = requires_browser

_SEGMENTS_JS = """(bar) => Array.from(bar.querySelectorAll('.account-seg')).map(s => ({
  part: s.dataset.part, share: Number(s.dataset.share), width: s.getBoundingClientRect().width,
}))"""


def test_the_account_is_one_bar_of_its_parts_under_the_verdict(tmp_path, open_report):
    report = replay("gc_heavy", "attach_4s", tmp_path)
    account = report.cpu_account
    assert account is not None
    html = next((tmp_path / "out").glob("*.html"))
    opened = open_report(html)
    page = opened.page
    opened.assert_clean()
    assert page.get_attribute("#cpu-account-summary", "data-measured") == "true"
    summary = page.text_content("#cpu-account-summary") or ""
    assert "garbage collector" in summary and "(estimate)" in summary
    segments = page.eval_on_selector("#cpu-account-bar", _SEGMENTS_JS)
    drawn = {p.part.value: p.share for p in account.parts if p.share}
    assert {s["part"]: s["share"] for s in segments} == pytest.approx(drawn, abs=1e-4)
    total = page.locator("#cpu-account-bar").bounding_box()
    assert total is not None
    collector = next(s for s in segments if s["part"] == CpuPart.COLLECTOR.value)
    assert collector["width"] == pytest.approx(collector["share"] * total["width"], abs=2)
    tags = dict(page.eval_on_selector_all(".account-part", "els => els.map(e => [e.dataset.part, e.dataset.tag])"))
    assert tags["collector"] == "estimate" and tags["kernel"] == "measured"
    # under the verdict, before the findings
    account_box = page.locator("#cpu-account").bounding_box()
    findings_box = page.locator("#findings").bounding_box()
    assert account_box is not None and findings_box is not None and account_box["y"] < findings_box["y"]


def test_an_older_recording_says_not_measured_and_draws_no_bar(tmp_path, open_report):
    html, report = analyze_recorded("lock_contention", tmp_path)
    assert report.cpu_account is None
    opened = open_report(html)
    opened.assert_clean()
    page = opened.page
    assert page.get_attribute("#cpu-account-summary", "data-measured") == "false"
    assert (page.text_content("#cpu-account-summary") or "").startswith("not measured")
    assert page.locator("#cpu-account-bar").count() == 0
