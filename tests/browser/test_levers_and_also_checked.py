"""The first screen of a report made from a recorded profile states each lever of the top finding
(the work half as costly, the work made free, more cores) beside its first advice, and a check
that found nothing shows as one "also checked" line with no advice, in a real browser."""

from __future__ import annotations

import pytest

from diagnose.report.model import Lever
from tests.browser.conftest import analyze_recorded, requires_browser
from tests.browser.typed import finding, shown

pytestmark = requires_browser

_LEVERS_JS = """(root) => Array.from(root.querySelectorAll('.gain-lever')).map(l => ({
  kind: l.dataset.kind, gain: Number(l.dataset.gain), text: l.textContent,
}))"""


@pytest.fixture(scope="module")
def preprocess_report(tmp_path_factory):
    return analyze_recorded("preprocess_bound", tmp_path_factory.mktemp("levers"))


def lever_text(lever: Lever) -> str:
    upper = ", upper bound" if lever.upper_bound else ""
    kind = "calibrated" if lever.basis.startswith("calibrated") else "estimate"
    return f"\u00d7{lever.gain:.2f} {lever.label} ({kind}{upper})"


def test_the_first_screen_states_the_headline_each_lever_and_the_first_advice(preprocess_report, open_report):
    html, report = preprocess_report
    verdict = report.verdict
    top = finding(report, verdict.primary)
    kinds = [lever.kind for lever in top.levers]
    # half its cost (calibrated), free (an upper bound), the idle cores
    assert kinds == ["remove_work", "remove_work", "more_cores"]
    assert top.levers[1].upper_bound and not top.levers[0].upper_bound
    assert top.levers[1].gain > top.levers[0].gain > 1.0
    opened = open_report(html)
    page = opened.page
    height = page.viewport_size["height"]
    assert page.text_content("#verdict-headline") == verdict.headline
    # the levers, each with its figure and words, on the first screen
    levers = shown(page.eval_on_selector("#verdict-gain", _LEVERS_JS))
    assert [(s.kind, s.gain) for s in levers] == [(lv.kind, lv.gain) for lv in top.levers]
    assert [s.text for s in levers] == [lever_text(lv) for lv in top.levers]
    line = page.text_content("#verdict-gain .verdict-gain-line")
    assert line == ("Predicted gain from fixing the top finding: "
                    + " \u00b7 ".join(lever_text(lv) for lv in top.levers))
    bases = page.eval_on_selector_all("#verdict-gain .verdict-lever-basis", "els => els.map(e => e.textContent)")
    assert bases == [lv.basis for lv in top.levers]
    box = page.locator("#verdict-gain").bounding_box()
    assert box is not None and box["y"] + box["height"] <= height
    # what to do, under the gain: the top finding's first two advice lines, on the first screen
    todo = page.eval_on_selector_all("#verdict-advice li", "els => els.map(e => e.textContent)")
    assert todo == list(top.advice[:2]) and len(top.advice) > 2
    assert page.get_attribute("#verdict-advice", "data-finding-id") == top.id
    assert f"{len(top.advice) - 2} more in the finding below" in page.text_content("#verdict-advice")
    box = page.locator("#verdict-advice").bounding_box()
    assert box is not None and box["y"] + box["height"] <= height
    # the top finding's summary line and body state the same levers, and its first advice
    details = f'details.finding[data-finding-id="{top.id}"]'
    assert page.get_attribute(details, "open") is not None
    assert shown(page.eval_on_selector(details, _LEVERS_JS)) == levers
    tag = page.text_content(f"{details} > summary .f-gain-tag")
    assert tag == " \u00b7 ".join(f"\u00d7{lv.gain:.2f}" for lv in top.levers) + " est."
    advice = page.locator(f"{details} ul.advice > li").first
    assert advice.text_content() == top.advice[0]
    assert advice.is_visible()
    opened.assert_clean()


def test_a_check_that_found_nothing_is_one_also_checked_line_without_advice(preprocess_report, open_report):
    html, report = preprocess_report
    cleared = [f for f in report.findings if f.severity == "ok"]
    lock = next(f for f in cleared if f.id == "lock_contention")
    assert lock.advice and lock.summary == "0% of request-thread time waits on locks"
    opened = open_report(html)
    page = opened.page
    lines = page.eval_on_selector_all(
        "details.finding.also-checked", "els => els.map(e => e.dataset.findingId)")
    assert lines == [f.id for f in cleared]
    row = f'details.also-checked[data-finding-id="{lock.id}"]'
    assert page.get_attribute(row, "open") is None
    summary = page.locator(f"{row} > summary")
    assert summary.is_visible()
    assert summary.text_content() == f"also checked: {lock.title} \u2014 {lock.summary}{lock.id}"
    assert summary.bounding_box()["height"] < 30  # one line
    # no advice, no gain, no score: not here, and not when it is opened either
    for selector in ("ul.advice", ".f-gain", ".f-gain-tag", ".f-score", ".f-knob"):
        assert page.locator(f"{row} {selector}").count() == 0, selector
    assert not any(h == "What to do" for h in page.eval_on_selector_all(
        f"{row} h4", "els => els.map(e => e.textContent)"))
    summary.click()
    assert page.get_attribute(row, "open") is not None
    assert page.locator(f"{row} table.evidence").count() == 1  # the figures stay a click away
    assert page.locator(f"{row} ul.advice").count() == 0
    # the findings that found something keep their advice
    found = [f for f in report.findings if f.severity != "ok"]
    for f in found:
        assert page.locator(f'details.finding[data-finding-id="{f.id}"] ul.advice > li').count() == len(f.advice)
    # the checks that could not run are listed as before
    assert page.locator("#not-applicable li").count() == len(report.not_applicable)
    opened.assert_clean()


# Every recording of a fixture workload (diagnose's own attach of it: fixtures/record.py).
RECORDED_FIXTURES = ("compute_bound", "lock_contention", "preprocess_bound", "scheduler_overhead",
                     "underloaded")


@pytest.mark.parametrize("name", RECORDED_FIXTURES)
def test_each_fixtures_first_screen_says_what_its_json_says(name, tmp_path, open_report):
    """The headline, the predicted gain (each lever, or the one figure) and the first advice of
    a real report, read where a person reads them first, against the JSON."""
    html, report = analyze_recorded(name, tmp_path)
    verdict = report.verdict
    opened = open_report(html)
    page = opened.page
    height = page.viewport_size["height"]
    assert page.text_content("#verdict-headline") == verdict.headline
    top = report.finding(verdict.primary)
    if top is None or top.severity == "ok":  # no finding leads: nothing more to state
        opened.assert_clean()
        return
    gain = page.locator("#verdict-gain")
    box = gain.bounding_box()
    assert box is not None and box["y"] + box["height"] <= height, "the gain is below the fold"
    text = gain.text_content()
    if top.levers:
        for lever in top.levers:
            assert f"\u00d7{lever.gain:.2f} {lever.label}" in text, (lever, text)
    elif top.predicted_gain is not None:
        assert f"\u00d7{top.predicted_gain:.2f}" in text, text
    advice = page.locator(f'details.finding[data-finding-id="{top.id}"] ul.advice > li').first
    assert advice.text_content() == top.advice[0]
    opened.assert_clean()
