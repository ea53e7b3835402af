"""Opens generated reports in Debian's headless Chromium through Playwright, with no network.

The browser is the system one (`/usr/bin/chromium`, or $DIAGNOSE_CHROMIUM): Playwright is only
the driver, and `playwright install` is never needed. Every request the page makes is routed:
the report's own file:// URL goes through, anything else is recorded and aborted, and tests
assert that nothing else was asked for.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from diagnose.report.model import Report
from tests.browser.typed import read_report
from tests.conftest import RECORDED, invoke_cli

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
VIEWPORT = {"width": 1400, "height": 1000}
READY = 'html[data-ready="true"]'


def chromium_path() -> str | None:
    """The system Chromium, or None. $DIAGNOSE_CHROMIUM overrides the Debian path."""
    for candidate in (os.environ.get("DIAGNOSE_CHROMIUM"), "/usr/bin/chromium",
                      shutil.which("chromium")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def browser_unavailable() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the 'playwright' Python package is not installed (pip install -e '.[test]')"
    if chromium_path() is None:
        return ("no system Chromium at /usr/bin/chromium (bash scripts/install-test-tools.sh, "
                "or set DIAGNOSE_CHROMIUM)")
    return None


_UNAVAILABLE = browser_unavailable()
requires_browser = pytest.mark.skipif(_UNAVAILABLE is not None,
                                      reason=f"browser tests skipped: {_UNAVAILABLE}")


@pytest.fixture(scope="session")
def browser():
    reason = browser_unavailable()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


# Installed before any page script: records every CSP violation event, including ones the console
# might not show. Injected by the driver, so the page's own CSP does not block it.
_INIT_SCRIPT = """
window.__diagnoseTest = {csp: []};
document.addEventListener('securitypolicyviolation', (e) => {
  window.__diagnoseTest.csp.push(e.violatedDirective + ' ' + e.blockedURI);
});
"""


@dataclass
class OpenedReport:
    """A report loaded in a fresh browser context, with everything it tried recorded."""

    page: object
    url: str
    console: list = field(default_factory=list)  # (type, text)
    page_errors: list = field(default_factory=list)
    other_requests: list = field(default_factory=list)  # URLs routed and aborted
    seen_requests: list = field(default_factory=list)  # every request event, for diagnostics
    dialogs: list = field(default_factory=list)

    @property
    def console_errors(self) -> list[str]:
        return [text for kind, text in self.console if kind == "error"]

    def csp_messages(self) -> list[str]:
        logged = [text for _, text in self.console if "Content Security Policy" in text]
        fired = self.page.evaluate("window.__diagnoseTest ? window.__diagnoseTest.csp : ['no hook']")
        return logged + list(fired)

    def assert_clean(self):
        """No console errors, no uncaught exceptions, no CSP violations, no other requests."""
        assert self.console_errors == [], self.console_errors
        assert self.page_errors == [], self.page_errors
        assert self.csp_messages() == []
        assert self.other_requests == [], self.other_requests
        assert self.dialogs == [], self.dialogs


@contextmanager
def open_report_in(browser, html: Path, viewport: dict | None = None,
                   wait_ready: bool = True):
    """Loads `html` in a fresh context of `browser`; yields the OpenedReport; closes the context."""
    context = browser.new_context(viewport=viewport or VIEWPORT, service_workers="block")
    try:
        url = Path(html).resolve().as_uri()
        page = context.new_page()
        opened = OpenedReport(page, url)

        def route(r):
            if r.request.url == url:
                r.continue_()
            else:
                opened.other_requests.append(r.request.url)
                r.abort()

        def on_dialog(d):
            opened.dialogs.append((d.type, d.message))
            d.dismiss()

        context.route("**/*", route)
        page.add_init_script(_INIT_SCRIPT)
        page.on("console", lambda m: opened.console.append((m.type, m.text)))
        page.on("pageerror", lambda e: opened.page_errors.append(str(e)))
        page.on("request", lambda r: opened.seen_requests.append(r.url))
        page.on("dialog", on_dialog)
        page.goto(url, wait_until="load")
        if wait_ready:
            page.wait_for_selector(READY, state="attached", timeout=15000)
        yield opened
    finally:
        context.close()


@pytest.fixture
def open_report(browser):
    """open_report(html, viewport=None, wait_ready=True) -> OpenedReport, closed after the test."""
    with ExitStack() as stack:
        yield lambda html, viewport=None, wait_ready=True: stack.enter_context(
            open_report_in(browser, html, viewport, wait_ready))


def analyze_recorded(name: str, out_dir: Path) -> tuple[Path, Report]:
    """Runs the CLI in-process (click's runner) offline on fixtures/recorded/NAME.*; returns
    (html path, the report its .json holds)."""
    native = RECORDED / f"{name}.native.speedscope.json"
    calibration = ("--native-profile", native) if native.exists() else ()
    proc, _ = invoke_cli("analyze", RECORDED / f"{name}.speedscope.json",
                         "--procfs", RECORDED / f"{name}.procfs.json", *calibration,
                         "--output-dir", out_dir, check_json=False)
    assert proc.returncode == 0, proc.stderr
    html = next(out_dir.glob("*.html"))
    return html, read_report(next(p for p in out_dir.glob("*.json")
                                  if not p.name.endswith(".speedscope.json")))


_DATA_BLOCK = re.compile(r'<script type="application/json" id="diagnose-data">(.*?)</script>', re.S)


def page_data(html: Path) -> dict:
    """The data a generated page carries (report JSON plus flame/timeline), parsed back."""
    match = _DATA_BLOCK.search(Path(html).read_text(encoding="utf-8"))
    assert match, f"no data block in {html}"
    return json.loads(match.group(1))


DEV_SAMPLE = Path(__file__).resolve().parents[2] / "reports" / "dev_sample_data.json"


def dev_sample_data() -> dict:
    """A fresh copy of reports/dev_sample_data.json: attach-mode values, a master with three
    workers, two event loops (one blocked), hostile names. Change the copy freely."""
    return json.loads(DEV_SAMPLE.read_text(encoding="utf-8"))


def _model_of(report: dict):
    """The report model the no-JavaScript view reads. Pages built here to test the script feed it
    values no report has (hostile names where a list or number belongs): their no-JavaScript
    view then shows the verdict alone, which is all those tests leave valid."""
    from diagnose.report.model.codec import NotAReport
    from tests.report_data import as_report

    try:
        return as_report(report)
    except NotAReport:
        verdict = report.get("verdict")
        return as_report({"verdict": verdict if isinstance(verdict, dict) else {}})


def render_page(data: dict, path: Path, deadlock_lines: tuple[str, ...] = ()) -> Path:
    """Writes the page for `data` with the production renderer (`deadlock_lines`: the
    no-JavaScript view's thread dump, as the pipeline renders it from the report model);
    returns its path."""
    from diagnose.render.html import render_html

    path = Path(path)
    path.write_text(render_html(data, _model_of(data["report"]), deadlock_lines), encoding="utf-8")
    return path
