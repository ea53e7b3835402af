"""The event-loop view's tasks by await site (report.tasks), in a real browser: every site of
every process as a row with its primitive, permits and waits; names from the target as text;
a process whose tasks could not be read says why."""

from __future__ import annotations

from dataclasses import replace

import pytest

from diagnose.report.model import ProcessTasks, TaskAwaitSite
from tests.browser.conftest import dev_sample_data, render_page, requires_browser
from tests.browser.typed import report_of, shown, with_report

pytestmark = requires_browser

HOSTILE_NAME = "<img src=x onerror=alert(7)>"
HOSTILE_FILE = "/srv/app/<script>alert(8)</script>.py"


SITE = TaskAwaitSite(function="predict", file="/srv/app/api.py", line=31, kind="semaphore",
                     name="MODEL_SLOTS", local=True, primitives=1, waiting_avg=29.5, waiting_max=30,
                     share=0.92, holders_avg=2.0, permits_free=0, capacity=2, waiters_max=30,
                     detail="")


def site(**kw) -> TaskAwaitSite:
    return replace(SITE, **kw)


def tasks_section() -> tuple[ProcessTasks, ...]:
    return (
        ProcessTasks(pid=4341, python="3.11", snapshots=40, torn=1, reads=41, failed_reads=1,
                     read_seconds=0.2, unreadable=None, tasks_avg=33.0, request_tasks_avg=32.0,
                     request_tasks_max=32, request_rule="tasks running the application's code",
                     local_share=0.93, downstream_share=0.06,
                     sites=(site(),
                            site(function="lookup", line=44, kind="io", name="client.get", local=False,
                                 waiting_avg=2.0, waiting_max=3, share=0.06, holders_avg=None,
                                 permits_free=None, capacity=None, waiters_max=None),
                            site(function=HOSTILE_NAME, file=HOSTILE_FILE, name=HOSTILE_NAME,
                                 kind="future", share=0.01, capacity=None, permits_free=None)),
                     notes=()),
        ProcessTasks(pid=4342, python="3.10", snapshots=0, reads=4, failed_reads=4,
                     unreadable="asyncio tasks not readable on CPython 3.10: no layout", sites=()),
    )


@pytest.fixture
def page(open_report, tmp_path):
    data = dev_sample_data()
    data = with_report(data, replace(report_of(data), tasks=tasks_section()))
    return open_report(render_page(data, tmp_path / "tasks.html"))


ROWS_JS = """els => els.map(tr => ({
  kind: tr.dataset.kind, local: tr.dataset.local,
  cells: Array.from(tr.querySelectorAll('td')).map(td => td.textContent)}))"""


def test_tasks_are_shown_by_await_site_with_primitive_permits_and_waits(page):
    p = page.page
    assert p.is_visible("#await-sites")
    rows = shown(p.eval_on_selector_all('#await-sites .await-process[data-pid="4341"] tr.await-row',
                                        ROWS_JS))
    assert [r.kind for r in rows] == ["semaphore", "io", "future"]
    first = rows[0].cells
    assert "predict" in first[1] and "api.py:31" in first[1]
    assert "asyncio.Semaphore" in first[2] and "MODEL_SLOTS" in first[2]
    assert first[3] == "2 (0 free)"
    assert (first[4], first[5]) == ("29.5", "30")
    assert "92" in first[6]
    assert rows[1].local == "false" and "outside" in rows[1].cells[2]
    facts = p.inner_text('#await-sites .await-process[data-pid="4341"] .await-facts')
    assert "40 reads (1 torn)" in facts and "32 request tasks" in facts
    page.assert_clean()


def test_a_process_whose_tasks_could_not_be_read_says_why(page):
    text = page.page.inner_text('#await-sites .await-process[data-pid="4342"]')
    assert "not readable on CPython 3.10" in text


def test_names_from_the_target_are_inert_text(page):
    p = page.page
    assert p.evaluate("document.getElementsByTagName('img').length") == 0
    text = p.inner_text("#await-sites")
    assert text.count(HOSTILE_NAME) == 2  # the function and the primitive's name
    titles = p.eval_on_selector_all("#await-sites .site-file", "els => els.map(e => e.title)")
    assert any("<script>alert(8)</script>" in t for t in titles)
    p.wait_for_timeout(200)
    page.assert_clean()
