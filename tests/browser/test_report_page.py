"""The HTML report, generated offline from recorded profiles, works in a real browser.

Each report is made by the real CLI (`diagnose analyze` on fixtures/recorded/) and opened from
disk in headless Chromium with every other request blocked.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import analyze_recorded, requires_browser

pytestmark = requires_browser

RECORDINGS = ["lock_contention", "preprocess_bound", "scheduler_overhead", "compute_bound",
              "underloaded"]
WAIT_STATES = ("gil", "lock", "io", "idle")


@pytest.fixture(scope="module")
def recorded_reports(tmp_path_factory):
    """name -> (html path, JSON report), one CLI run per recording, made on first use."""
    made = {}

    def get(name):
        if name not in made:
            made[name] = analyze_recorded(name, tmp_path_factory.mktemp(name))
        return made[name]

    return get


@pytest.fixture(scope="module")
def lock_report(recorded_reports):
    return recorded_reports("lock_contention")


def flame_attrs(page) -> dict:
    return page.eval_on_selector("#flame", "el => Object.fromEntries(Array.from(el.attributes)"
                                           ".filter(a => a.name.startsWith('data-'))"
                                           ".map(a => [a.name.slice(5), a.value]))")


@pytest.mark.parametrize("name", RECORDINGS)
def test_every_recorded_report_renders_offline_without_errors(recorded_reports, open_report, name):
    html, report = recorded_reports(name)
    opened = open_report(html)
    page = opened.page
    opened.assert_clean()
    assert page.get_attribute("html", "class") in ("", None)  # the no-js fallback is gone
    # the flame graph drew a real tree
    attrs = flame_attrs(page)
    assert int(attrs["drawn-count"]) > 10
    assert int(attrs["drawn-count"]) == page.locator("#flame .flame-node").count()
    assert int(attrs["total-samples"]) == report["sampling"]["thread_samples"]
    assert attrs["zoom-path"] == "" and attrs["zoom-depth"] == "0"
    # one timeline lane per thread of the JSON report
    assert int(page.get_attribute("#timeline", "data-lanes")) == len(report["threads"])
    assert page.locator("#timeline-canvas").count() == 1
    # the page states the same verdict as the JSON report
    assert page.text_content("#verdict-headline") == report["verdict"]["headline"]
    assert page.text_content("#primary-finding") == report["verdict"]["primary"]
    # one threads-table row per thread, with its role
    rows = page.locator("#threads tbody tr[data-thread-index][data-role]")
    assert rows.count() == len(report["threads"])
    roles = {int(r.get_attribute("data-thread-index")): r.get_attribute("data-role")
             for r in rows.all()}
    assert roles == {i: t["role"] for i, t in enumerate(report["threads"])}
    # one expandable finding per finding of the JSON report
    ids = page.eval_on_selector_all("details.finding", "els => els.map(e => e.dataset.findingId)")
    assert sorted(ids) == sorted(f["id"] for f in report["findings"])
    assert opened.other_requests == []


def test_clicking_a_deeper_frame_zooms_and_reset_goes_back(lock_report, open_report):
    opened = open_report(lock_report[0])
    page = opened.page
    # the widest frame three levels down: a real mouse click on it
    nodes = page.locator('#flame .flame-node[data-depth="3"]')
    assert nodes.count() > 0
    widest = max(nodes.all(), key=lambda n: int(n.get_attribute("data-samples")))
    name, samples = widest.get_attribute("data-name"), int(widest.get_attribute("data-samples"))
    widest.click()
    attrs = flame_attrs(page)
    path = attrs["zoom-path"].split(" > ")
    assert len(path) == 3 and path[-1] == name
    assert attrs["zoom-depth"] == "3"
    assert int(attrs["view-samples"]) == samples
    assert int(attrs["drawn-count"]) == page.locator("#flame .flame-node").count()
    # a frame below the zoomed one zooms further
    deeper = page.locator('#flame .flame-node[data-depth="5"]').first
    deeper_name = deeper.get_attribute("data-name")
    deeper.click()
    attrs = flame_attrs(page)
    assert attrs["zoom-depth"] == "5" and attrs["zoom-path"].split(" > ")[-1] == deeper_name
    assert attrs["zoom-path"].startswith(" > ".join(path) + " > ")
    page.click("#flame-reset")
    attrs = flame_attrs(page)
    assert attrs["zoom-path"] == "" and attrs["zoom-depth"] == "0"
    assert attrs["view-samples"] == attrs["total-samples"]
    assert page.is_disabled("#flame-reset")
    opened.assert_clean()


def search(page, text: str) -> dict:
    page.fill("#flame-search", text)
    page.press("#flame-search", "Enter")
    return page.eval_on_selector("#flame-search-result",
                                 "el => ({samples: el.dataset.matchedSamples,"
                                 " share: el.dataset.matchedShare, text: el.textContent})")


def test_search_counts_the_samples_under_matching_frames(lock_report, open_report):
    opened = open_report(lock_report[0])
    page = opened.page
    found = search(page, "predict")
    assert int(found["samples"]) > 0
    assert 0 < float(found["share"]) <= 1
    assert page.locator("#flame .flame-node.match").count() > 0
    assert all("predict" in n.lower() for n in page.eval_on_selector_all(
        "#flame .flame-node.match", "els => els.map(e => e.dataset.name + ' ' + e.dataset.file)"))
    missing = search(page, "zq9xj-no-such-frame")
    assert missing["samples"] == "0" and float(missing["share"]) == 0
    assert page.locator("#flame .flame-node.match").count() == 0
    search(page, "")
    assert page.get_attribute("#flame-search-result", "data-matched-samples") is None
    opened.assert_clean()


def test_state_and_thread_views_filter_the_samples(lock_report, open_report):
    html, report = lock_report
    opened = open_report(html)
    page = opened.page
    everything = int(page.get_attribute("#flame", "data-total-samples"))

    page.select_option("#flame-state", "waits")  # sets the value and dispatches change
    waits = int(page.get_attribute("#flame", "data-total-samples"))
    assert waits != everything
    assert waits == sum(t["states"].get(s, 0) for t in report["threads"] for s in WAIT_STATES)
    assert page.get_attribute("#flame", "data-states") == "waits"

    page.select_option("#flame-state", "busy")
    busy = int(page.get_attribute("#flame", "data-total-samples"))
    assert busy == sum(t["states"].get(s, 0) for t in report["threads"]
                       for s in ("python", "native"))

    page.select_option("#flame-state", "all")
    index, thread = max(enumerate(report["threads"]), key=lambda p: p[1]["samples"])
    page.select_option("#flame-thread", str(index))
    assert int(page.get_attribute("#flame", "data-total-samples")) == thread["samples"]
    assert int(page.get_attribute("#flame", "data-drawn-count")) > 0
    opened.assert_clean()


def test_thread_table_sorts_and_links_to_the_flame_graph(lock_report, open_report):
    html, report = lock_report
    opened = open_report(html)
    page = opened.page
    rows = "#threads tbody tr[data-thread-index]"

    def order():
        return page.eval_on_selector_all(rows, "els => els.map(e => Number(e.dataset.threadIndex))")

    before = order()
    name_button = page.locator("#threads thead .sort-btn").first
    name_button.click()
    first = order()
    name_button.click()
    second = order()
    assert sorted(first) == sorted(before) == list(range(len(report["threads"])))
    assert first == list(reversed(second))
    names = [report["threads"][i]["name"] for i in first]
    assert names in (sorted(names), sorted(names, reverse=True))
    # a thread's name in the table shows that thread in the flame graph
    index = first[-1]
    page.locator(f'{rows}[data-thread-index="{index}"] button').first.click()
    assert page.get_attribute("#flame", "data-thread") == str(index)
    assert page.input_value("#flame-thread") == str(index)
    opened.assert_clean()


def test_primary_finding_link_opens_its_details(lock_report, open_report):
    html, report = lock_report
    opened = open_report(html)
    page = opened.page
    primary = report["verdict"]["primary"]
    selector = f'details.finding[data-finding-id="{primary}"]'
    page.eval_on_selector(selector, "d => { d.open = false; }")
    page.click("#primary-finding")
    assert page.eval_on_selector(selector, "d => d.open") is True
    # the wait-site table lists the lock_contention sites
    site = next(f for f in report["findings"] if f["id"] == "lock_contention")["sites"][0]
    assert site["function"] in page.text_content("#waits-body")
    opened.assert_clean()


@pytest.mark.xfail(reason="report.js renders report.waits generically: each wait site's `holders` "
                          "list lands in one cell as raw JSON, making the table thousands of px "
                          "tall; the page needs a renderer that knows the wait-site fields",
                   strict=False)
def test_wait_sites_table_shows_no_raw_json(lock_report, open_report):
    html, report = lock_report
    assert report.get("waits"), "this recording has wait sites"
    opened = open_report(html)
    page = opened.page
    cells = page.eval_on_selector_all("#waits-body td", "els => els.map(e => e.textContent)")
    raw = [c for c in cells if c.lstrip().startswith(("{", "[{", '["'))]
    assert raw == []
    height = page.evaluate("document.getElementById('waits').getBoundingClientRect().height")
    assert height < 1200
