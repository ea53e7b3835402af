"""The HTML report, generated offline from recorded profiles, works in a real browser.

Each report is made by the real CLI (`diagnose analyze` on fixtures/recorded/) and opened from
disk in headless Chromium with every other request blocked.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import fields, replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from diagnose.render.html import render_html
from diagnose.render.wording import observer_cpu_text
from diagnose.vocab import Confidence, Severity
from diagnose.report.model import Holder, Observer, Report
from tests.browser.conftest import analyze_recorded, page_data, render_page, requires_browser
from tests.browser.typed import evidence_keys, evidence_of, finding, report_of, shown, with_report

pytestmark = requires_browser

RECORDINGS = ["lock_contention", "preprocess_bound", "scheduler_overhead", "compute_bound",
              "underloaded"]
WAIT_STATES = ("gil", "lock", "io", "idle")
DEV_SAMPLE = Path(__file__).resolve().parents[2] / "reports" / "dev_sample_data.json"
OBSERVER_NUMBERS = ("paused_share", "pyspy_cpu_s", "pyspy_cpu_share_of_cores", "requested_rate_hz",
                    "achieved_rate_hz", "errors", "error_rate", "observer_cpu_s", "observer_cores",
                    "target_cores")


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
    assert int(attrs["total-samples"]) == report.sampling.thread_samples
    assert attrs["zoom-path"] == "" and attrs["zoom-depth"] == "0"
    # one timeline lane per thread of the JSON report
    assert int(page.get_attribute("#timeline", "data-lanes")) == len(report.threads)
    assert page.locator("#timeline-canvas").count() == 1
    # the page states the same verdict as the JSON report
    assert page.text_content("#verdict-headline") == report.verdict.headline
    assert page.text_content("#primary-finding") == report.verdict.primary
    # one threads-table row per thread, with its role
    rows = page.locator("#threads tbody tr[data-thread-index][data-role]")
    assert rows.count() == len(report.threads)
    roles = {int(r.get_attribute("data-thread-index")): r.get_attribute("data-role")
             for r in rows.all()}
    assert roles == {i: t.role for i, t in enumerate(report.threads)}
    # one expandable finding per finding of the JSON report
    ids = page.eval_on_selector_all("details.finding", "els => els.map(e => e.dataset.findingId)")
    assert sorted(ids) == sorted(f.id for f in report.findings)
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


def search(page, text: str) -> SimpleNamespace:
    page.fill("#flame-search", text)
    page.press("#flame-search", "Enter")
    return shown(page.eval_on_selector("#flame-search-result",
                                 "el => ({samples: el.dataset.matchedSamples,"
                                 " share: el.dataset.matchedShare, text: el.textContent})"))


def test_search_counts_the_samples_under_matching_frames(lock_report, open_report):
    opened = open_report(lock_report[0])
    page = opened.page
    found = search(page, "predict")
    assert int(found.samples) > 0
    assert 0 < float(found.share) <= 1
    assert page.locator("#flame .flame-node.match").count() > 0
    assert all("predict" in n.lower() for n in page.eval_on_selector_all(
        "#flame .flame-node.match", "els => els.map(e => e.dataset.name + ' ' + e.dataset.file)"))
    missing = search(page, "zq9xj-no-such-frame")
    assert missing.samples == "0" and float(missing.share) == 0
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
    assert waits == sum(t.states.get(s, 0) for t in report.threads for s in WAIT_STATES)
    assert page.get_attribute("#flame", "data-states") == "waits"

    page.select_option("#flame-state", "busy")
    busy = int(page.get_attribute("#flame", "data-total-samples"))
    assert busy == sum(t.states.get(s, 0) for t in report.threads for s in ("python", "native"))

    page.select_option("#flame-state", "all")
    index, thread = max(enumerate(report.threads), key=lambda p: p[1].samples)
    page.select_option("#flame-thread", str(index))
    assert int(page.get_attribute("#flame", "data-total-samples")) == thread.samples
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
    assert sorted(first) == sorted(before) == list(range(len(report.threads)))
    assert first == list(reversed(second))
    names = [report.threads[i].name for i in first]
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
    primary = report.verdict.primary
    selector = f'details.finding[data-finding-id="{primary}"]'
    page.eval_on_selector(selector, "d => { d.open = false; }")
    page.click("#primary-finding")
    assert page.eval_on_selector(selector, "d => d.open") is True
    # the wait-site table lists the lock_contention sites
    site = finding(report, "lock_contention").sites[0]
    assert site.function in page.text_content("#waits-body")
    opened.assert_clean()


def whole_percent(share: float) -> str:
    """The page's holder share: whole percent as Math.round gives it, "<1%" below one half."""
    p = share * 100
    return "<1%" if 0 < p < 0.5 else f"{math.floor(p + 0.5)}%"


def percent_value(text: str) -> float:
    assert text.endswith("%"), text
    return float(text.rstrip("%").lstrip("<"))


def assert_percent(text: str, share: float):
    """`text` is the page's percentage of the fraction `share` (one decimal, or "<0.1%")."""
    if text.startswith("<"):
        assert 0 < 100 * share < percent_value(text), (text, share)
    else:
        assert abs(percent_value(text) - 100 * share) <= 0.051, (text, share)


WAIT_ROWS = "#waits-body tr.wait-row"

_WAIT_ROWS_JS = """els => els.map(tr => {
  const next = tr.nextElementSibling;
  const holders = Array.from(tr.querySelectorAll('.holders .holder'));
  const more = tr.querySelector('details.more-holders');
  return {
    rank: Number(tr.dataset.waitRank), kind: tr.dataset.kind, share: Number(tr.dataset.share),
    threadSeconds: Number(tr.dataset.threadSeconds), maxConcurrent: Number(tr.dataset.maxConcurrent),
    cells: Array.from(tr.cells).map(td => td.textContent),
    kindText: tr.querySelector('.kind').textContent,
    fn: tr.querySelector('.site-fn').textContent,
    fileText: tr.querySelector('.site-file').textContent,
    fileTitle: tr.querySelector('.site-file').getAttribute('title'),
    holders: holders.map(h => h.textContent),
    moreOpen: more ? more.open : null,
    holderCell: tr.querySelector('.holders').textContent,
    summaryFor: next && next.matches('.wait-summary-row') ? Number(next.dataset.summaryFor) : null,
    summary: next && next.matches('.wait-summary-row') ? next.textContent : null,
  };
})"""


def wait_rows(page) -> list:
    """The wait-site rows as the page shows them, read by attribute."""
    return shown(page.eval_on_selector_all(WAIT_ROWS, _WAIT_ROWS_JS))


def holder_text(holder: Holder) -> str:
    return " \u2192 ".join(holder.stack) + f" ({whole_percent(holder.share)})"


def test_wait_sites_table_shows_every_wait_site_with_its_holders(lock_report, open_report):
    html, report = lock_report
    waits = report.waits
    assert len(waits) >= 2 and any(len(w.holders) > 1 for w in waits), "this recording has wait sites"
    opened = open_report(html)
    page = opened.page
    rows = wait_rows(page)
    assert len(rows) == len(waits)
    assert [r.rank for r in rows] == list(range(1, len(waits) + 1))  # the report's ranking
    for row, wait in zip(rows, waits):
        assert row.kind == wait.kind and row.kindText == wait.label
        assert row.fn == wait.function
        # the file is shortened to its name, the full path is in the title
        assert row.fileText == f"{wait.file.rsplit('/', 1)[-1]}:{wait.line}"
        assert row.fileTitle == f"{wait.file}:{wait.line}"
        assert row.threadSeconds == wait.thread_seconds
        assert row.share == wait.share and row.maxConcurrent == wait.max_concurrent
        assert str(wait.threads) in row.cells and str(wait.max_concurrent) in row.cells
        shown_share = next(c for c in row.cells if c.endswith("%") and "(" not in c)
        assert_percent(shown_share, wait.share)
        # the top holder as "A → B → C (34%)", the others folded away in a <details>
        assert row.holders == [holder_text(h) for h in wait.holders]
        if len(wait.holders) > 1:
            assert row.moreOpen is False
            assert f"{len(wait.holders) - 1} other holder" in row.holderCell
        elif not wait.holders:
            assert "no holder seen" in row.holderCell
        # the summary sentence is the line under its row
        assert row.summaryFor == row.rank and row.summary == wait.summary
    # every holder's path is on the page, the others once their <details> is opened
    top = next(w for w in waits if len(w.holders) > 1)
    rank = waits.index(top) + 1
    page.click(f'{WAIT_ROWS}[data-wait-rank="{rank}"] details.more-holders > summary')
    others = page.locator(f'{WAIT_ROWS}[data-wait-rank="{rank}"] details.more-holders li')
    assert others.count() == len(top.holders) - 1
    assert others.first.is_visible() and others.first.text_content() == holder_text(top.holders[1])
    # no raw JSON in any cell, and the section is a table, not a wall of text
    cells = page.eval_on_selector_all("#waits-body td", "els => els.map(e => e.textContent)")
    assert [c for c in cells if c.lstrip().startswith(("{", "[", '"'))] == []
    assert "holder_scope" not in page.text_content("#waits-body")
    height = page.evaluate("document.getElementById('waits').getBoundingClientRect().height")
    assert height < 1200
    opened.assert_clean()


def test_wait_sites_table_sorts_and_keeps_summaries_under_their_rows(lock_report, open_report):
    html, report = lock_report
    waits = report.waits
    opened = open_report(html)
    page = opened.page

    def click(label):
        page.locator("#waits-body thead .sort-btn", has_text=label).click()
        rows = wait_rows(page)
        assert all(r.summaryFor == r.rank for r in rows)  # summaries move with their rows
        return rows

    def holder_key(rank):
        holders = waits[rank - 1].holders
        return holders[0].share if holders else None

    # a reader's opened holder list stays open through sorting
    folded = next(i + 1 for i, w in enumerate(waits) if len(w.holders) > 1)
    page.click(f'{WAIT_ROWS}[data-wait-rank="{folded}"] details.more-holders > summary')
    rows = click("Max waiting")  # numbers sort largest first
    most = sorted((w.max_concurrent for w in waits), reverse=True)
    assert [r.maxConcurrent for r in rows] == most
    header = "#waits-body th:has(button:text-is('Max waiting'))"
    assert page.get_attribute(header, "aria-sort") == "descending"
    rows = click("Max waiting")
    assert [r.maxConcurrent for r in rows] == sorted(w.max_concurrent for w in waits)
    # by the top holder's share: sites without a holder always last
    rows = click("Holder")
    keys = [holder_key(r.rank) for r in rows]
    known = [k for k in keys if k is not None]
    assert known == sorted(known, reverse=True) and keys == known + [None] * (len(keys) - len(known))
    rows = click("Holder")
    keys = [holder_key(r.rank) for r in rows]
    known = [k for k in keys if k is not None]
    assert known == sorted(known) and keys == known + [None] * (len(keys) - len(known))
    # back to the report's own ranking
    rows = click("#")
    assert [r.rank for r in rows] == list(range(1, len(waits) + 1))
    assert len(rows) == len(waits)
    assert rows[folded - 1].moreOpen is True
    opened.assert_clean()


def test_report_without_wait_sites_says_so(recorded_reports, open_report):
    html, report = recorded_reports("underloaded")
    assert report.waits == ()
    opened = open_report(html)
    page = opened.page
    assert page.locator(WAIT_ROWS).count() == 0
    assert page.locator("#waits-empty").count() == 1
    opened.assert_clean()


_EVIDENCE_JS = """(root) => Array.from(root.querySelectorAll('table.evidence > tbody > tr')).map(tr => ({
  key: tr.dataset.key,
  text: tr.cells[1].textContent,
  nested: Array.from(tr.cells[1].querySelectorAll(':scope > dl.kv-nested > dt')).map(dt =>
    [dt.textContent, dt.nextElementSibling.textContent]),
}))"""


def by_key(rows: list) -> SimpleNamespace:
    """Evidence rows as the page shows them, by their evidence key: `shown.lock_wait_share.text`."""
    return SimpleNamespace(**{r.key: r for r in rows})


def evidence(page, finding_id: str) -> SimpleNamespace:
    return by_key(shown(page.eval_on_selector(f'details.finding[data-finding-id="{finding_id}"]',
                                              _EVIDENCE_JS)))


def page_number(value: float) -> str:
    """A plain number as page/core.js's fmtNum writes it."""
    if float(value).is_integer():
        return f"{int(value):,}"
    a = abs(value)
    if a >= 1000:
        return f"{round(value):,}"
    if a >= 100:
        return f"{value:.1f}"
    if a >= 1:
        return f"{round(value, 2):g}"
    return repr(float(f"{value:.3g}"))


_LABELLED_JS = """(root) => Array.from(root.querySelectorAll('table.evidence > tbody > tr')).map(tr => ({
  key: tr.dataset.key, label: tr.cells[0].textContent, text: tr.cells[1].textContent,
  title: tr.cells[1].getAttribute('title'),
  nested: Array.from(tr.cells[1].querySelectorAll(':scope > dl.kv-nested > dt')).map(dt =>
    [dt.textContent, dt.nextElementSibling.textContent]),
}))"""


def labelled_evidence(page, finding_id: str) -> list:
    return shown(page.eval_on_selector(f'details.finding[data-finding-id="{finding_id}"]', _LABELLED_JS))


def test_evidence_rows_are_labelled_in_words_with_units(lock_report, open_report):
    html, report = lock_report
    data = page_data(html)
    evidence_text = shown(data["evidence_text"])  # the page's data: diagnose's wording per finding
    assert len(evidence_text) == len(report.findings)
    opened = open_report(html)
    page = opened.page
    for f, rows in zip(report.findings, evidence_text):
        on_page = labelled_evidence(page, f.id)
        # the page shows diagnose's labels and texts, row for row, with the raw key kept as data
        assert [(r.key, r.label) for r in on_page] == [(r.key, r.label) for r in rows]
        assert [r.key for r in on_page] == [k for k in evidence_keys(f) if k != "fix"]
        for row, made in zip(on_page, rows):
            assert row.label != row.key and "_" not in row.label, row
            if getattr(made, "items", None):
                assert row.nested == [list(item) for item in made.items]
            else:
                assert row.text == made.text
    lock = by_key(labelled_evidence(page, "lock_contention"))
    share = lock.lock_wait_share
    assert share.label == "share of request-thread time waiting on locks"
    interval = finding(report, "lock_contention").intervals["lock_wait_share"]
    assert re.fullmatch(r"\d+% \(\d+(\.\d)?\u2013\d+(\.\d)?%\), [\d,]+ samples", share.text), share
    assert share.text.endswith(f"{interval.samples:,} samples")
    assert share.title == f"range: 95% Wilson interval over {interval.samples:,} samples"
    assert lock.estimated.text == "no"
    assert lock.lock_wait_thread_seconds.text.endswith(" s")
    sched = by_key(labelled_evidence(page, "scheduler_overhead"))
    assert sched.cgroup_cpu_quota_cores.text == "no quota"
    assert sched.involuntary_ctx_per_s.text.endswith(" /s")
    gil = by_key(labelled_evidence(page, "gil_contention"))
    per_thread = evidence_of(finding(report, "gil_contention"), "gil_wait_share_per_thread")
    assert [name for name, _ in gil.gil_wait_share_per_thread.nested] == list(per_thread)
    assert all(text.endswith("%") for _, text in gil.gil_wait_share_per_thread.nested)
    for selector in ("#findings-body", "#facts-body"):
        text = page.text_content(selector)
        assert '{"' not in text and '":' not in text and "null" not in text, selector
    opened.assert_clean()


def test_older_pages_without_labels_show_evidence_objects_as_lists_with_percentages(lock_report, open_report, tmp_path):
    html, report = lock_report
    data = page_data(html)
    # evidence labels that do not fit the findings (re-ordered) are not used: never mislabelled
    # rotated, not reversed: with an odd count, reversing leaves the middle finding in place
    on_page = report_of(data)
    moved = on_page.findings[1:] + on_page.findings[:1]
    shuffled = with_report(data, replace(on_page, findings=moved))
    opened = open_report(render_page(shuffled, tmp_path / "shuffled.html"))
    keys = opened.page.eval_on_selector_all("table.evidence th", "els => els.map(e => e.textContent)")
    assert keys and set(keys) <= {k for f in report.findings for k in evidence_keys(f)}
    opened.assert_clean()
    del data["evidence_text"]
    opened = open_report(render_page(data, tmp_path / "older.html"))
    page = opened.page
    gil = evidence(page, "gil_contention")
    for key in ("gil_wait_share_per_thread", "holder_phase_shares"):
        value = evidence_of(finding(report, "gil_contention"), key)
        assert isinstance(value, dict) and value
        nested = getattr(gil, key).nested
        assert [k for k, _ in nested] == list(value)  # same names, same order
        for name, text in nested:
            assert_percent(text, value[name])
    # shares are percentages, other numbers rounded, booleans and null in words
    lock = evidence(page, "lock_contention")
    lock_finding = finding(report, "lock_contention")
    assert_percent(lock.lock_wait_share.text, evidence_of(lock_finding, "lock_wait_share"))
    assert lock.estimated.text == "no"
    assert lock.lock_wait_thread_seconds.text == page_number(
        evidence_of(lock_finding, "lock_wait_thread_seconds"))
    sched = evidence(page, "scheduler_overhead")
    sched_finding = finding(report, "scheduler_overhead")
    assert evidence_of(sched_finding, "cgroup_cpu_quota_cores") is None
    assert sched.cgroup_cpu_quota_cores.text == "\u2014"
    assert sched.involuntary_ctx_per_s.text == page_number(
        evidence_of(sched_finding, "involuntary_ctx_per_s"))
    compute = evidence(page, "compute_bound")
    assert_percent(compute.core_utilization_from_samples.text,
                   evidence_of(finding(report, "compute_bound"), "core_utilization_from_samples"))
    # no JSON text anywhere in the findings or the run facts
    for selector in ("#findings-body", "#facts-body"):
        text = page.text_content(selector)
        assert '{"' not in text and '":' not in text and "null" not in text, selector
    opened.assert_clean()


def observer_attrs(page) -> SimpleNamespace:
    """#observer-cost's data attributes, read by attribute (data-paused-share as .paused_share)."""
    return shown(page.eval_on_selector("#observer-cost", "el => Object.fromEntries(Array.from(el.attributes)"
                                                         ".filter(a => a.name.startsWith('data-'))"
                                                         ".map(a => [a.name.slice(5), a.value]))"))


def check_observer_section(page, observer: Observer):
    """#observer-cost carries the report's numbers and shows each as text."""
    assert page.locator("#facts #observer-cost").count() == 1
    assert page.text_content("#observer-cost h3") == "What sampling cost the target"
    attrs = observer_attrs(page)
    for key in OBSERVER_NUMBERS:
        attr = getattr(attrs, key, None)
        if getattr(observer, key) is None:
            assert attr is None, key
        else:
            assert float(attr) == getattr(observer, key), key
    torn = observer.torn_stacks_possible
    assert getattr(attrs, "torn_stacks_possible", None) == (None if torn is None else str(torn).lower())
    assert attrs.warning == ("true" if observer.warning else "false")
    # each line's text by its data-observer name ("pyspy-cpu" read as on_page.pyspy_cpu)
    on_page = SimpleNamespace(**{
        k.replace("-", "_"): page.text_content(f'#observer-cost [data-observer="{k}"] dd')
        for k in ("paused", "pyspy-cpu", "rate", "errors", "torn")})
    if observer.paused_share is None:
        assert on_page.paused == "not measured"
    else:
        assert_percent(on_page.paused, observer.paused_share)
    if observer.pyspy_cpu_s is None:
        assert on_page.pyspy_cpu == "not measured"
    else:
        assert on_page.pyspy_cpu.startswith(f"{observer.pyspy_cpu_s:g} s")
    # the observer's CPU beside the target's: the words every output prints (render/wording.py)
    assert page.text_content('#observer-cost [data-observer="observer-cpu"] dd') == (
        observer_cpu_text(observer) or "not measured")
    if observer.achieved_rate_hz is not None:
        assert on_page.rate.startswith(f"{observer.achieved_rate_hz:g}")
    if observer.requested_rate_hz:
        assert f"of {observer.requested_rate_hz:g} Hz" in on_page.rate
    if observer.errors is not None:
        assert on_page.errors.startswith(f"{observer.errors:,}")
    assert on_page.torn == {True: "possible (non-blocking sampling)", False: "no",
                            None: "not measured"}[torn]
    plan = page.text_content("#observer-plan")
    assert plan.startswith("Sampling plan: ")
    assert plan.endswith(observer.plan if observer.plan else "not recorded for this run")


@pytest.mark.parametrize("name", RECORDINGS)
def test_every_report_states_what_sampling_cost_the_target(recorded_reports, open_report, name):
    html, report = recorded_reports(name)
    observer = report.sampling.observer
    assert {f.name for f in fields(observer)} >= (set(OBSERVER_NUMBERS)
                                                  | {"torn_stacks_possible", "plan", "warning"})
    opened = open_report(html)
    page = opened.page
    check_observer_section(page, observer)
    if observer.warning:
        assert page.locator("#sampling-banner #observer-warning").count() == 1
        assert observer.warning in page.text_content("#observer-warning")
    else:
        assert page.locator("#observer-warning").count() == 0
    opened.assert_clean()


def with_warning(report: Report, warning: str | None) -> Report:
    """`report` whose observer warns `warning` (None: does not warn)."""
    sampling = report.sampling
    return replace(report, sampling=replace(
        sampling, observer=replace(sampling.observer, warning=warning)))


def test_observer_warning_banner_follows_the_report(lock_report, open_report, tmp_path):
    data = page_data(lock_report[0])
    quiet_report = with_warning(report_of(data), None)
    assert not quiet_report.sampling.notes and not quiet_report.sampling.partial
    quiet = with_report(data, quiet_report)
    opened = open_report(render_page(quiet, tmp_path / "quiet.html"))
    page = opened.page
    assert page.locator("#observer-warning").count() == 0
    assert page.locator("#sampling-banner").count() == 0
    assert page.get_attribute("#observer-cost", "data-warning") == "false"
    opened.assert_clean()

    warning = "<b>py-spy</b> used 40% of the cores the target runs on: the verdict may be distorted"
    loud = with_report(data, with_warning(report_of(data), warning))
    opened = open_report(render_page(loud, tmp_path / "loud.html"))
    page = opened.page
    banner = page.locator("#sampling-banner")
    assert banner.count() == 1 and banner.is_visible()
    # right under the verdict, before the findings
    assert page.evaluate("document.getElementById('sampling-banner').getBoundingClientRect().bottom"
                         " <= document.getElementById('findings').getBoundingClientRect().top")
    assert page.text_content("#observer-warning .warning-text") == warning  # as text, not markup
    assert page.locator("#sampling-banner b").count() == 0
    assert page.get_attribute("#observer-cost", "data-warning") == "true"
    page.click("#sampling-banner button")  # the link to the observer block
    assert page.evaluate("(() => { const r = document.getElementById('observer-cost')"
                         ".getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; })()")
    opened.assert_clean()


def test_dev_sample_data_renders_with_the_current_shapes(open_report, tmp_path):
    """reports/dev_sample_data.json (attach-mode values, hostile names) uses the current shapes."""
    data = json.loads(DEV_SAMPLE.read_text(encoding="utf-8"))
    report = report_of(data)  # decodes: every section has its current shape
    observer = report.sampling.observer
    assert observer.pyspy_cpu_s is not None and observer.plan
    assert report.waits and all(w.holders is not None for w in report.waits)
    opened = open_report(render_page(data, tmp_path / "dev.html"))
    page = opened.page
    check_observer_section(page, observer)
    rows = wait_rows(page)
    assert len(rows) == len(report.waits)
    for row, wait in zip(rows, report.waits):
        assert row.holders[:1] == [holder_text(h) for h in wait.holders[:1]]
    # hostile names in wait sites and nested evidence stay text
    assert page.locator("img").count() == 0 and page.locator("#waits-body script").count() == 0
    assert "<img src=x onerror=alert(2)>" in page.text_content("#waits-body")
    nested = evidence(page, "gil_contention").gil_wait_share_per_thread.nested
    gil = finding(report, "gil_contention")
    assert [k for k, _ in nested] == list(evidence_of(gil, "gil_wait_share_per_thread"))
    assert "</script><img src=x onerror=alert(1)>" in dict(nested)
    page.wait_for_timeout(200)
    assert opened.dialogs == []
    opened.assert_clean()


def test_without_javascript_the_fallback_names_the_observer_warning_and_wait_sites(lock_report, browser, tmp_path):
    html, _ = lock_report
    # a report whose sampling cost was high enough to warn (rendered from the real data)
    data = page_data(html)
    report = with_warning(report_of(data), "py-spy kept the target's threads stopped 30% of the time")
    data = with_report(data, report)
    html = tmp_path / "warned.html"
    html.write_text(render_html(data, report), encoding="utf-8")
    context = browser.new_context(java_script_enabled=False, service_workers="block")
    try:
        blocked = []
        context.route("**/*", lambda r: r.continue_() if r.request.url == html.resolve().as_uri()
                      else (blocked.append(r.request.url), r.abort()))
        page = context.new_page()
        page.goto(html.resolve().as_uri(), wait_until="load")
        text = page.inner_text("body")
        assert "did not run" in text
        assert report.sampling.observer.warning in text
        for wait in report.waits:
            assert wait.summary in text
        assert blocked == []
    finally:
        context.close()


def low_confidence(data: dict, samples: int = 41) -> dict:
    """`data` with its verdict and top finding resting on `samples` samples, as diagnose writes
    such a verdict (engine.verdict_for)."""
    report = report_of(data)
    verdict = report.verdict
    findings = tuple(replace(f, low_confidence=True, samples=samples) if f.id == verdict.primary
                     else f for f in report.findings)
    verdict = replace(verdict, confidence=Confidence.LOW, samples=samples, severity=Severity.WARNING,
                      headline=f"low confidence: {samples} samples; sample longer \u2014 "
                               + verdict.headline)
    return with_report(data, replace(report, verdict=verdict, findings=findings))


def test_a_low_confidence_verdict_and_finding_carry_a_badge(lock_report, open_report, browser, tmp_path):
    html, report = lock_report
    # a verdict on enough samples has no badge, nor has any finding that shows a problem (one
    # that shows none may rest on a loosely known share: compute_bound here, whose running
    # samples were calibrated by a few native ones; its row carries no badge either)
    assert report.verdict.confidence == "ok"
    assert not any(f.low_confidence for f in report.findings if f.severity != "ok")
    opened = open_report(html)
    assert opened.page.locator(".conf-low").count() == 0
    opened.assert_clean()

    data = low_confidence(page_data(html))
    primary = report_of(data).verdict.primary
    low = render_page(data, tmp_path / "low.html")
    opened = open_report(low)
    page = opened.page
    badge = page.locator("#verdict .verdict-top #verdict-confidence")
    assert badge.count() == 1 and badge.is_visible()
    assert badge.text_content() == "low confidence: 41 samples"
    assert page.text_content("#verdict-headline").startswith("low confidence: 41 samples; sample longer")
    # the finding's summary row says it too; the findings on enough samples do not
    marked = page.eval_on_selector_all(
        "details.finding > summary .conf-low",
        "els => els.map(e => [e.closest('details').dataset.findingId, e.textContent])")
    assert marked == [[primary, "low confidence: 41 samples"]]
    assert page.locator(f'details.finding[data-finding-id="{primary}"] > summary .conf-low').is_visible()
    opened.assert_clean()

    # without JavaScript, the fallback states the confidence
    context = browser.new_context(java_script_enabled=False, service_workers="block")
    try:
        page = context.new_page()
        context.route("**/*", lambda r: r.continue_() if r.request.url == low.resolve().as_uri() else r.abort())
        page.goto(low.resolve().as_uri(), wait_until="load")
        text = page.inner_text("body")
        assert "confidence: low (41 samples)" in text
        assert "Low confidence: the primary finding rests on 41 samples" in text
        assert "low confidence: 41 samples)" in text  # its line in the findings list
    finally:
        context.close()


def test_a_co_primary_verdict_shows_both_findings_the_reason_and_each_first_advice(
        lock_report, open_report, tmp_path):
    html, _ = lock_report
    data = page_data(html)
    report = report_of(data)
    first, second = report.findings[0], report.findings[1]
    verdict = replace(report.verdict, co_primary=second.id, co_primary_reason="<b>scores</b> overlap",
                      first_advice=(first.advice[0], "<img src=x> advice"))
    data = with_report(data, replace(report, verdict=verdict))
    opened = open_report(render_page(data, tmp_path / "co.html"))
    co = opened.page.locator("#verdict #verdict-co-primary")
    assert co.count() == 1 and co.is_visible()
    text = co.inner_text()
    assert f"Co-primary finding: {second.id} \u2014 <b>scores</b> overlap" in text
    assert f"First advice for {first.id}: {first.advice[0]}" in text
    assert f"First advice for {second.id}: <img src=x> advice" in text
    assert opened.page.locator("#verdict-co-primary img").count() == 0
    # each one's first advice is there already: no "What to do" of the primary's alone
    assert opened.page.locator("#verdict-advice").count() == 0
    opened.assert_clean()
