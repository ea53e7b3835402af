"""Where the waits end (report.chains), printed by the page's own script in a real browser: one
line per chain, as text. The pages are rendered with the production renderer from
reports/dev_sample_data.json with chains added: request threads on a backend at its capacity,
a worker's threads on the GIL behind a lock, and a pipe whose other end is named with hostile
markup and control characters."""

from __future__ import annotations

from dataclasses import replace

import pytest

from diagnose.report.model.wait_chains import ChainEnd, ChainHop, ResourceKind, WaitChain
from tests.browser.conftest import dev_sample_data, render_page, requires_browser
from tests.browser.typed import report_of, with_report

pytestmark = requires_browser

HOSTILE = "</script><img src=x onerror=alert(1)>\x1b[31m\u202eevil"

BACKEND = WaitChain(
    pid=4341, threads=16, share=0.99, thread_seconds=64.55,
    hops=(ChainHop(ResourceKind.SOCKET, "socket to 127.0.0.1:8000", address="127.0.0.1:8000", pids=(4478,),
                   saturation=0.99),),
    end=ChainEnd.LOCAL_SERVER,
    line="16 threads, 99% of the time → socket to 127.0.0.1:8000 → pid 4478 (python backend.py --port 8000): "
         "busiest thread 0.98 cores → end: the server at capacity")
GIL = WaitChain(
    pid=4342, threads=8, share=0.18, thread_seconds=7.17,
    hops=(ChainHop(ResourceKind.GIL, "the GIL"), ChainHop(ResourceKind.LOCK, "lock at 0x55f7fa52a5e8", share=0.9,
                                                          thread=4346)),
    end=ChainEnd.LOCK_HOLDER,
    line="8 threads, 18% of the time → the GIL → lock at 0x55f7fa52a5e8 (90% of the time) → thread 4346 "
         "→ end: the lock's holder")
PIPE = WaitChain(
    pid=4343, threads=1, share=1.0, thread_seconds=3.09,
    hops=(ChainHop(ResourceKind.PIPE, f"pipe 88412 (other end: {HOSTILE} 4341)", pids=(4341,)),),
    end=ChainEnd.LOCAL_PEER,
    line=f"1 thread, 100% of the time → pipe 88412 (other end: {HOSTILE} 4341) → pid 4341 → end: a local "
         "process the window did not read (its load unknown)")


def with_chains(*chains: WaitChain) -> dict:
    data = dev_sample_data()
    return with_report(data, replace(report_of(data), chains=chains))


_ROWS_JS = """els => els.map(li => ({
  pid: li.dataset.pid, end: li.dataset.end, threads: li.dataset.threads, hops: li.dataset.hops,
  tag: li.querySelector('.chain-pid').textContent, line: li.querySelector('.chain-line').textContent,
  elements: li.querySelectorAll('*').length,
}))"""


@pytest.fixture
def chains_page(open_report, tmp_path):
    return open_report(render_page(with_chains(BACKEND, GIL, PIPE), tmp_path / "chains.html"))


def test_each_chain_is_one_line_in_the_reports_order(chains_page):
    page = chains_page.page
    assert page.is_visible("#wait-chains")
    assert page.text_content("#wait-chains-h") == "Where the waits end"
    rows = page.eval_on_selector_all("#wait-chains li.chain-row", _ROWS_JS)
    assert [r["pid"] for r in rows] == ["4341", "4342", "4343"]
    assert [r["end"] for r in rows] == ["local_server", "lock_holder", "local_peer"]
    assert [r["hops"] for r in rows] == ["1", "2", "1"]
    assert rows[0]["tag"] == "pid 4341" and rows[0]["line"] == BACKEND.line
    assert rows[1]["line"] == GIL.line
    # the section sits under the wait-for graph's place, above the flame graph
    ids = page.eval_on_selector_all("main > section", "els => els.map(e => e.id)")
    assert ids.index("structure") < ids.index("wait-chains") < ids.index("flame-section")
    chains_page.assert_clean()


def test_a_hostile_name_is_text_with_its_control_characters_shown(chains_page):
    page = chains_page.page
    row = page.eval_on_selector_all("#wait-chains li.chain-row", _ROWS_JS)[2]
    assert "</script><img src=x onerror=alert(1)>" in row["line"]
    assert "U+001B" in row["line"] and "U+202E" in row["line"]
    text = page.inner_text("#wait-chains")
    assert "\x1b" not in text and "\u202e" not in text
    assert page.locator("#wait-chains img, #wait-chains script").count() == 0
    assert page.evaluate("document.scripts.length") == 2  # the data block and the page script
    page.wait_for_timeout(200)  # time for a handler to fire, had one been made
    chains_page.assert_clean()


def test_no_chains_hide_the_section(open_report, tmp_path):
    opened = open_report(render_page(with_chains(), tmp_path / "none.html"))
    assert opened.page.locator("#wait-chains").is_hidden()
    assert opened.page.locator("#wait-chains li").count() == 0
    opened.assert_clean()
