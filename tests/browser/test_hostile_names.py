"""A report of a process whose names are hostile markup stays inert text in a real browser.

The fixture workload fixtures/workloads/hostile_names.py runs threads named like markup, with
control and bidi characters, a function whose code name is an <img onerror> tag, module-level
code, and secret-looking command-line arguments. The real CLI attaches to it; the page it writes
must show all of that as text, run none of it, and leak none of the secrets.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import open_report_in, requires_browser
from tests.browser.typed import typed
from tests.integration.conftest import SECRETS, requires_ptrace, shared_hostile_names

pytestmark = [pytest.mark.integration, requires_ptrace, requires_browser]

SCRIPT_THREAD_NAME = "</script><img src=x onerror=alert(1)>"
IMG_FUNCTION_NAME = "<img src=x onerror=alert(2)>"
SCRIPT_FILE_NAME = "<script>alert(3)</script>.py"


@pytest.fixture(scope="module")
def hostile_report(captures):
    return shared_hostile_names(captures)  # the capture test_report_safety asserts on too


@pytest.fixture(scope="module")
def hostile_page(hostile_report, browser):
    """One load of the hostile report, shared by the assertions below."""
    with open_report_in(browser, hostile_report[0]) as opened:
        yield opened


def test_no_markup_from_names_becomes_elements_or_runs(hostile_page):
    page = hostile_page.page
    assert page.locator("img").count() == 0
    assert page.evaluate("document.getElementsByTagName('img').length") == 0
    assert page.evaluate("document.scripts.length") == 2  # the data block and the page script
    # give any injected handler a moment to fire, then check that none did
    page.wait_for_timeout(300)
    assert hostile_page.dialogs == []
    hostile_page.assert_clean()


def test_hostile_names_are_shown_as_visible_text(hostile_page, hostile_report):
    page = hostile_page.page
    report = typed(hostile_report[1])
    assert SCRIPT_THREAD_NAME in {t.name for t in report.threads}
    table_names = page.eval_on_selector_all("#threads tbody tr button",
                                            "els => els.map(e => e.textContent)")
    assert SCRIPT_THREAD_NAME in table_names
    assert SCRIPT_THREAD_NAME in page.inner_text("#threads")  # rendered, not hidden
    # control characters and the right-to-left override are visible markers, never raw
    control = next(t.name for t in report.threads if "\u202e" in t.name)
    shown = next(n for n in table_names if n.startswith("ctl"))
    assert "U+202E" in shown and "U+001B" in shown
    body_text = page.inner_text("body")
    for raw in ("\u202e", "\x1b", "\x07", "\x7f", "\u2028"):
        assert raw not in body_text
    assert control != shown
    # the thread select names it too, with markers instead of the characters
    options = page.eval_on_selector_all("#flame-thread option", "els => els.map(e => e.textContent)")
    assert any(o.startswith(SCRIPT_THREAD_NAME) for o in options)
    assert not any("\u202e" in o for o in options)


def test_hostile_frames_are_flame_nodes_with_their_names_as_data(hostile_page):
    page = hostile_page.page
    names = set(page.eval_on_selector_all("#flame .flame-node", "els => els.map(e => e.dataset.name)"))
    assert "<module>" in names
    page.fill("#flame-search", "onerror")
    page.press("#flame-search", "Enter")
    assert int(page.get_attribute("#flame-search-result", "data-matched-samples")) > 0
    files = set(page.eval_on_selector_all("#flame .flame-node", "els => els.map(e => e.dataset.file)"))
    names = set(page.eval_on_selector_all("#flame .flame-node", "els => els.map(e => e.dataset.name)"))
    assert IMG_FUNCTION_NAME in names
    assert SCRIPT_FILE_NAME in files
    labels = page.eval_on_selector_all(f'#flame .flame-node[data-name="{IMG_FUNCTION_NAME}"]',
                                       "els => els.map(e => e.textContent)")
    assert any(label == IMG_FUNCTION_NAME for label in labels if label)
    page.fill("#flame-search", "")
    page.press("#flame-search", "Enter")
    assert page.locator("img").count() == 0
    hostile_page.assert_clean()


def test_secrets_appear_nowhere_in_the_page(hostile_page, hostile_report):
    page = hostile_page.page
    html = page.content()
    source = hostile_report[0].read_text(encoding="utf-8")
    cmdline = page.text_content("#cmdline")
    assert "hostile_names.py" in cmdline and "***" in cmdline
    for secret in SECRETS:
        assert secret not in html
        assert secret not in source
        assert secret not in page.inner_text("body")
