"""Names from the profiled process are untrusted: they reach the report as inert text only."""

from __future__ import annotations

import json
import re

import pytest

from diagnose.report.model import Report
from tests.integration.conftest import SECRETS, requires_ptrace, shared_hostile_names
from tests.integration.typed import as_report

pytestmark = [pytest.mark.integration, requires_ptrace]



@pytest.fixture(scope="module")
def hostile_report(captures):
    html_path, report = shared_hostile_names(captures)  # shared with the browser's tests
    html = html_path.read_text(encoding="utf-8")
    saved = next(html_path.parent.glob("*[0-9].json")).read_text(encoding="utf-8")
    return report, html, saved


def test_hostile_thread_and_function_names_are_in_the_data_but_never_markup(hostile_report):
    report, html, _ = hostile_report
    names = {t.name for t in as_report(report).threads}
    assert "</script><img src=x onerror=alert(1)>" in names
    assert "<img src" not in html and "</script><img" not in html
    # exactly the page's own script elements: the data block and the inline code
    assert len(re.findall(r"<script\b", html)) == 2
    data = re.search(r'<script type="application/json" id="diagnose-data">(.*?)</script>', html, re.S)
    decoded = Report.from_json(json.loads(data.group(1))["report"])  # each table once: the report's
    assert "</script><img src=x onerror=alert(1)>" in {t.name for t in decoded.threads}
    functions = {f.function for f in decoded.stacks.frames}
    assert "<module>" in functions and "<img src=x onerror=alert(2)>" in functions


def test_secrets_on_the_command_line_reach_no_output(hostile_report):
    report, html, saved = hostile_report
    assert "***" in as_report(report).target.cmdline
    for secret in SECRETS:
        assert secret not in html
        assert secret not in saved
        assert secret not in json.dumps(report)
