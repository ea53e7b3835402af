"""A deadlock in the report page's verdict: each thread, the lock it holds and the one it waits
for, as a thread dump prints them; names from the target are text, never markup."""

from __future__ import annotations

from dataclasses import replace

import pytest

from diagnose.render.deadlock_text import dump_lines
from tests.browser.conftest import analyze_recorded, page_data, render_page, requires_browser
from tests.browser.typed import report_of, with_report
from tests.report_data import as_finding

pytestmark = requires_browser


def lock(name, line, file="/srv/app/<img src=x onerror=alert(1)>.py"):
    return {"name": name, "qualified": name, "file": file, "line": line, "function": "f",
            "taken": "with"}


@pytest.fixture(scope="module")
def lock_report(tmp_path_factory):
    return analyze_recorded("lock_contention", tmp_path_factory.mktemp("lock_contention"))


def test_the_verdict_prints_each_deadlocked_thread_with_what_it_holds_and_waits_for(
        lock_report, open_report, browser, tmp_path):
    html, _ = lock_report
    data = page_data(html)
    report = report_of(data)
    cycle = {"threads": [
        {"thread": "request-0", "tid": 11, "holds": lock("INVENTORY_LOCK", 45),
         "waits_for": lock("PRICING_LOCK", 48), "held_by": "<b>request-1</b>"},
        {"thread": "<b>request-1</b>", "tid": 12, "holds": lock("PRICING_LOCK", 53),
         "waits_for": lock("INVENTORY_LOCK", 56), "held_by": "request-0"}],
        "victims": [{"thread": f"request-{i}"} for i in range(2, 12)], "lock_order": []}
    deadlock = as_finding({"id": "deadlock", "title": "The service is deadlocked", "score": 100,
                           "severity": "critical", "summary": "hung", "advice": ["order"],
                           "evidence": {"deadlocks": [cycle], "deadlocked_threads": 2}})
    report = replace(report, findings=(deadlock, *report.findings),
                     verdict=replace(report.verdict, primary="deadlock",
                                     headline="The service is deadlocked — hung"))
    data = with_report(data, report)
    # the no-JavaScript view's dump, rendered from the report model as the pipeline does
    lines = tuple(dump_lines(report))
    opened = open_report(render_page(data, tmp_path / "deadlock.html", lines))
    box = opened.page.locator("#verdict #verdict-deadlock")
    assert box.count() == 1 and box.is_visible()
    lines = box.inner_text().splitlines()
    assert lines[0] == "Found one deadlock:"
    where = "app/<img src=x onerror=alert(1)>.py"
    assert (f'"request-0" holds INVENTORY_LOCK ({where}:45), waits for PRICING_LOCK ({where}:48), '
            f'held by "<b>request-1</b>"') in lines
    assert (f'"<b>request-1</b>" holds PRICING_LOCK ({where}:53), waits for INVENTORY_LOCK '
            f'({where}:56), held by "request-0"') in lines
    assert ("10 more threads wait behind it: request-2, request-3, request-4, request-5, request-6, "
            "request-7, request-8, request-9 and 2 more") in lines
    assert opened.page.locator("#verdict-deadlock img, #verdict-deadlock b").count() == 0
    opened.assert_clean()

    # without JavaScript, the fallback prints the same thread dump, as text
    context = browser.new_context(java_script_enabled=False, service_workers="block")
    try:
        page = context.new_page()
        url = (tmp_path / "deadlock.html").resolve().as_uri()
        context.route("**/*", lambda r: r.continue_() if r.request.url == url else r.abort())
        page.goto(url, wait_until="load")
        dump = page.inner_text("#noscript-deadlock")
        assert dump.startswith("Found one deadlock:")
        assert f'holds INVENTORY_LOCK ({where}:45)' in dump and 'held by "<b>request-1</b>"' in dump
        assert page.locator("#noscript-deadlock img, #noscript-deadlock b").count() == 0
    finally:
        context.close()


def test_the_deadlock_findings_evidence_is_labelled_rows_and_the_dump_is_not_repeated(
        tmp_path, open_report):
    """A page made by the CLI from a report with a deadlock finding: its evidence reads as
    labelled rows, and the thread-by-thread data is shown once, in the verdict."""
    from diagnose.render.evidence import describe_evidence

    html, _ = analyze_recorded("lock_contention", tmp_path / "made")
    data = page_data(html)
    cycle = {"threads": [
        {"thread": "a", "tid": 1, "holds": lock("L1", 1, "/x/y.py"), "waits_for": lock("L2", 2, "/x/y.py"),
         "held_by": "b"},
        {"thread": "b", "tid": 2, "holds": lock("L2", 3, "/x/y.py"), "waits_for": lock("L1", 4, "/x/y.py"),
         "held_by": "a"}], "victims": []}
    finding = {"id": "deadlock", "title": "The service is deadlocked", "score": 100, "severity": "critical",
               "summary": "hung", "advice": ["order"],
               "evidence": {"deadlocked_threads": 2, "victim_threads": 0, "deadlocks": [cycle],
                            "fix": {"knob": "lock_order", "value": ["L1", "L2"]}}}
    deadlock = as_finding(finding)
    report = report_of(data)
    data = with_report(data, replace(report, findings=(deadlock, *report.findings)))
    data["evidence_text"].insert(0, [r.to_json() for r in describe_evidence(deadlock)])
    opened = open_report(render_page(data, tmp_path / "rows.html"))
    rows = opened.page.locator('details.finding[data-finding-id="deadlock"]').first.locator(
        "table.evidence.labelled th")
    assert rows.all_text_contents() == ["threads in the deadlock", "threads queued behind it (victims)"]
    opened.assert_clean()


def test_no_deadlock_block_without_a_deadlock(lock_report, open_report):
    html, _ = lock_report
    opened = open_report(html)
    assert opened.page.locator("#verdict-deadlock").count() == 0
    opened.assert_clean()
