"""A finding's levers and gain are worded once (render/wording.py): the page's data carries the
words, and the no-JavaScript view and the Markdown summary print the same strings."""

from __future__ import annotations

import html
import json
import math
import re
from dataclasses import replace

from diagnose.render.html import render_html
from diagnose.render.html_data import page_data
from diagnose.render.markdown import render_markdown
from diagnose.render.wording import gain_words, levers_text, stated_levers
from diagnose.vocab import LeverKind
from diagnose.report.model import Lever
from tests.report_data import as_report

_DATA = re.compile(r'<script type="application/json" id="diagnose-data">(.*?)</script>', re.S)


def _report(levers=True, gain: float | None = 1.04):
    stated = [{"kind": "remove_work", "gain": 9.1, "label": "if checksum cost nothing",
               "basis": "estimate: b", "upper_bound": True},
              {"kind": "more_cores", "gain": 1.04, "label": "from more cores",
               "basis": "estimate: c", "upper_bound": False}] if levers else []
    return as_report({"verdict": {"headline": "h", "primary": "cpu_bound"},
                      "findings": [{"id": "cpu_bound", "title": "Busy threads",
                                    "severity": "critical", "score": 100, "summary": "s",
                                    "predicted_gain": gain, "gain_basis": "c", "levers": stated,
                                    "advice": ["vectorise it"]},
                                   {"id": "lock_contention", "title": "Locks", "severity": "ok",
                                    "score": 0, "summary": "0% waits on locks"}]})


def test_each_lever_is_worded_with_its_figure_and_estimate_tag():
    words = gain_words(_report().findings[0])
    assert words.text == ("\u00d79.10 if checksum cost nothing (estimate, upper bound) \u00b7 "
                          "\u00d71.04 from more cores (estimate)")
    assert words.tag == "\u00d79.10 \u00b7 \u00d71.04 est."
    assert words.figure is None
    assert [(w.figure, w.estimate) for w in words.levers] == [
        ("\u00d79.10", "(estimate, upper bound)"), ("\u00d71.04", "(estimate)")]
    assert " \u00b7 ".join(w.text for w in words.levers) == words.text


def test_without_levers_the_one_predicted_gain_and_without_it_nothing():
    words = gain_words(_report(levers=False).findings[0])
    assert (words.text, words.tag, words.figure) == ("\u00d71.04 (estimate)", "\u00d71.04 est.",
                                                     "\u00d71.04")
    assert words.levers == ()
    nothing = gain_words(_report(levers=False, gain=None).findings[0])
    assert (nothing.text, nothing.tag, nothing.figure) == ("", "", None)


def test_a_lever_without_words_or_a_finite_figure_is_not_stated():
    finding = _report().findings[0]
    odd = replace(finding, levers=(Lever(LeverKind.REMOVE_WORK, 2.0, ""),
                                   Lever(LeverKind.MORE_CORES, math.inf, "from more cores"),
                                   *finding.levers))
    assert stated_levers(odd) == finding.levers
    assert gain_words(odd) == gain_words(finding)
    assert levers_text(odd, str.upper) == ("\u00d79.10 IF CHECKSUM COST NOTHING (estimate, upper "
                                           "bound) \u00b7 \u00d71.04 FROM MORE CORES (estimate)")


def test_the_page_data_the_no_javascript_view_and_the_markdown_print_the_same_words():
    for report in (_report(), _report(levers=False)):
        page = render_html(page_data(report), report)
        data = json.loads(_DATA.search(page).group(1))
        assert data["gain_text"] == [gain_words(f).to_json() for f in report.findings]
        said = data["gain_text"][0]["text"]
        assert f"score 100, predicted gain {html.escape(said, quote=False)})</li>" in page
        assert data["gain_text"][1] == gain_words(report.findings[1]).to_json()
        assert "Locks (ok, score 0)</li>" in page  # no gain: no words
        summary = render_markdown(report)
        assert ("**Predicted gain:** " + said if report.findings[0].levers
                else "predicted gain " + said) in summary
