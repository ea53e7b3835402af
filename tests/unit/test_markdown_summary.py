"""The ticket summary (diagnose/render/markdown.py): under 4 KB, tables that render, and names
from the profiled process that can never become markup, links, HTML or extra table cells."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from markdown_it import MarkdownIt

from diagnose.run import pipeline
from diagnose.render.evidence import describe_evidence as _describe_evidence
from diagnose.render.markdown import render_markdown as _render_markdown
from diagnose.render.markdown import MAX_BYTES, PIPE_STAND_IN, md_cell, md_code, md_text
from diagnose.report.model import Holder, Interval, Report, WaitSite
from tests.conftest import RECORDED
from tests.report_data import as_finding, as_report


def render_markdown(data, files=()):
    """The summary of a report given as the model or as a (partial, edited) report dict."""
    return _render_markdown(as_report(data), files)


def describe_evidence(finding):
    """The rows as the page shows them (label, text)."""
    return _describe_evidence(as_finding(finding))


RECORDINGS = ["lock_contention", "underloaded", "scheduler_overhead"]

HOSTILE = [
    "a | b || c",
    "`tick` and ``double``",
    "<script>alert(1)</script>",
    "[x](javascript:alert(1))",
    "![img](http://example.invalid/x.png)",
    "see <http://example.invalid> or https://example.invalid or www.example.invalid",
    "line one\nline two\r\n- line three\u2028four",
    "*star* _under_ **bold** ~~gone~~",
    "# not a heading",
    "1. not a list",
    "- not a list either",
    "&lt;b&gt; &amp; &#60;script&#62;",
    "back\\slash at the end \\",
    "[ref]: http://example.invalid",
    "\u202eevil bidi",
    "$x^2$ @someone :smile:",
]


def parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


def to_html(text: str) -> str:
    return parser().render(text)


def inline_tokens(text: str) -> list:
    return [child for token in parser().parse(text) if token.type == "inline"
            for child in token.children]


def plain(text: str) -> str:
    """What the renderer shows of `text`: the text of every inline token, joined."""
    return "".join(t.content for t in inline_tokens(text) if t.type in ("text", "code_inline"))


def tables(text: str) -> list[list[list[str]]]:
    """Each rendered table as rows of cell texts (header row first)."""
    out, rows, cells, in_cell = [], None, None, False
    for token in parser().parse(text):
        if token.type == "table_open":
            rows = []
        elif token.type == "tr_open":
            cells = []
        elif token.type in ("th_open", "td_open"):
            in_cell = True
        elif token.type == "inline" and in_cell:
            cells.append("".join(c.content for c in token.children
                                 if c.type in ("text", "code_inline")))
            in_cell = False
        elif token.type in ("th_close", "td_close") and in_cell:
            cells.append("")  # an empty cell has no inline token
            in_cell = False
        elif token.type == "tr_close":
            rows.append(cells)
        elif token.type == "table_close":
            out.append(rows)
    return out


def table_headed(text: str, first_header: str) -> list[list[str]]:
    return next(rows for rows in tables(text) if rows[0][0] == first_header)


def assert_tables_intact(text: str) -> list[list[list[str]]]:
    """Every table line of the source splits into the header's cells (the renderer silently
    drops extra cells, so the source is checked too), and every line became a rendered row."""
    blocks = re.findall(r"(?:^\|.*\|$\n?)+", text, flags=re.M)
    rendered = tables(text)
    assert len(rendered) == len(blocks), text
    for block, rows in zip(blocks, rendered):
        lines = block.strip("\n").split("\n")
        columns = len(re.split(r"(?<!\\)\|", lines[0])) - 2
        for line in lines:
            assert len(re.split(r"(?<!\\)\|", line)) - 2 == columns, line
        assert len(rows) == len(lines) - 1  # all but the delimiter row
        assert all(len(row) == columns for row in rows), rows
    return rendered


def assert_safe(text: str) -> None:
    assert len(text.encode("utf-8")) < MAX_BYTES
    html = to_html(text)
    for element in ("<script", "<a ", "<img", "<em>", "<del", "<h1", "<ol", "<blockquote"):
        assert element not in html, element
    kinds = {t.type for t in inline_tokens(text)}
    assert not kinds & {"link_open", "image", "html_inline", "em_open"}, kinds
    assert not {t.type for t in parser().parse(text)} & {"html_block", "bullet_list_open"}
    assert_tables_intact(text)


@pytest.fixture(scope="module")
def recorded_reports(tmp_path_factory) -> dict[str, pipeline.Outputs]:
    out = tmp_path_factory.mktemp("reports")
    return {name: pipeline.from_file(RECORDED / f"{name}.speedscope.json", out / name, None,
                                     RECORDED / f"{name}.procfs.json")
            for name in RECORDINGS}


def hostile_report(base: Report, name: str) -> Report:
    """`base` with `name` in every field that comes from the profiled process."""
    evidence = as_finding({"evidence": {"lock_wait_share": 0.5, "holder": name}}).evidence
    finding = replace(base.findings[0], title=f"Queue at {name}", summary=f"most in {name}",
                      advice=(f"fix {name}",), severity="critical", evidence=evidence,
                      intervals={"lock_wait_share": Interval(0.4, 0.6, 300)})
    wait = WaitSite(kind="lock", label=name, function=name, file=f"{name}.py", line=7, samples=10,
                    thread_seconds=3.5, threads=4, max_concurrent=2, share=0.25,
                    holders=(Holder(stack=(name,), function=name, share=0.9),), pid=1)
    return replace(base,
                   verdict=replace(base.verdict, headline=f"Request threads queue on {name}"),
                   target=replace(base.target, cmdline=f"python serve.py --name {name}",
                                  python=name),
                   sampling=replace(base.sampling, mode=name),
                   findings=(finding, *base.findings[1:]), waits=(wait,))


# ------------------------------------------------------------------ escaping


@pytest.mark.parametrize("name", HOSTILE)
def test_md_text_renders_exactly_the_text_and_nothing_else(name):
    paragraph = "Seen: " + md_text(name)
    assert {t.type for t in inline_tokens(paragraph)} <= {"text"}
    assert plain(paragraph) == "Seen: " + " ".join(name.split()).replace("\u202e", "[U+202E]")


@pytest.mark.parametrize("name", HOSTILE)
def test_md_text_at_the_start_of_a_line_stays_a_paragraph(name):
    tokens = parser().parse(md_text(name) + "\n")
    assert [t.type for t in tokens] == ["paragraph_open", "inline", "paragraph_close"]


@pytest.mark.parametrize("name", HOSTILE)
def test_md_cell_and_md_code_keep_a_table_row_to_its_cells(name):
    row = f"| {md_cell(name)} | {md_code(name)} |"
    rows = tables("| a | b |\n|---|---|\n" + row + "\n")[0]
    assert len(rows) == 2 and len(rows[1]) == 2
    shown = " ".join(name.split()).replace("\u202e", "[U+202E]").replace("|", PIPE_STAND_IN)
    assert rows[1][0] == shown
    assert rows[1][1] == shown.replace("`", "'")


def test_md_code_never_holds_a_backtick():
    assert md_code("a`b``c") == "`a'b''c`"
    assert md_code("") == md_code(None) == "\u2014"


def test_shortened_text_ends_in_an_ellipsis_and_never_splits_an_escape():
    text = md_text("*" * 50, limit=10)
    assert text == "\\*" * 9 + "\u2026"
    assert md_code("/very/long/path/to/the/file.py", limit=12, keep_tail=True) == "`\u2026the/file.py`"


# ------------------------------------------------------------------ recorded reports


@pytest.mark.parametrize("name", RECORDINGS)
def test_summary_of_a_recorded_profile_renders_its_verdict_findings_and_facts(
        recorded_reports, name):
    outputs = recorded_reports[name]
    report = outputs.report
    text = outputs.markdown.read_text(encoding="utf-8")
    assert outputs.markdown == outputs.json.with_suffix(".md")
    assert_safe(text)
    shown = plain(text)
    assert report.verdict.headline in shown
    assert f"Primary finding: {report.verdict.primary}" in shown
    found = [f for f in report.findings if f.severity != "ok"]
    for finding in found[:3]:
        assert finding.title in shown and finding.advice[0] in shown
    facts = {row[0]: row[1] for row in table_headed(text, "Run fact")[1:]}
    assert facts["Target"].startswith(f"pid {report.target.pid}")
    assert facts["Partial"] == "no"
    assert "target paused" in facts["Observer cost"]
    last = plain(text.splitlines()[-1])
    assert last.startswith(f"Generated by diagnose. Open {outputs.html.name} in a browser")
    assert outputs.json.name in last and outputs.speedscope.name in last


def test_evidence_rows_say_what_the_html_page_says(recorded_reports):
    report = recorded_reports["lock_contention"].report
    top = next(f for f in report.findings if f.severity != "ok")
    text = render_markdown(report)
    evidence = table_headed(text, "Evidence")
    page = {row.label: row.text for row in describe_evidence(top)}
    assert 2 <= len(evidence[1:]) <= 3
    for label, value in evidence[1:]:
        assert page[label] == value
    # The measurement the check stands on (its first key, a share with its interval) leads.
    assert evidence[1][0] == describe_evidence(top)[0].label
    assert "samples" in evidence[1][1]


def test_evidence_that_is_zero_comes_after_what_was_measured():
    finding = {"title": "t", "severity": "critical",
               "evidence": {"native_mutex_wait_share": 0, "estimated": True,
                            "runqueue_wait_s": 766.0, "cpu_s": 16.7, "threads": 65},
               "intervals": {"native_mutex_wait_share": {"low": 0, "high": 0.005, "samples": 700}}}
    rows = table_headed(render_markdown({"findings": [finding]}), "Evidence")
    assert [label for label, _ in rows[1:]] == [
        "time waiting for a core (run queue), summed over threads", "CPU time used",
        "threads in the process (most at once)"]


def test_the_last_line_names_the_report_files():
    text = render_markdown({"verdict": {"headline": "h"}}, ["r.html", "r.json", "r.speedscope.json"])
    assert plain(text.splitlines()[-1]) == (
        "Generated by diagnose. Open r.html in a browser for the flame graph, threads and "
        "timeline (the report's data: r.json, r.speedscope.json).")


# ------------------------------------------------------------------ hostile and huge reports


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_cannot_inject_markup_links_html_or_cells(recorded_reports, name):
    report = hostile_report(recorded_reports["lock_contention"].report, name)
    text = render_markdown(report, ["r.html", "r.json", "r.speedscope.json"])
    assert_safe(text)
    one_line = " ".join(name.split()).replace("\u202e", "[U+202E]")
    assert f"Request threads queue on {one_line}" in plain(text)
    wait_rows = table_headed(text, "Wait")
    assert len(wait_rows) == 2
    assert wait_rows[1][0] == one_line.replace("|", PIPE_STAND_IN)


def test_huge_names_and_many_findings_are_shortened_to_fit(recorded_reports):
    base = recorded_reports["lock_contention"].report
    report = hostile_report(base, "Model.predict_" + "x" * 20_000)
    report = replace(
        report,
        findings=tuple(replace(report.findings[0], title=f"finding {i} " + "y" * 5000)
                       for i in range(60)),
        waits=report.waits * 40,
        target=replace(report.target, cmdline="python " + "--flag " * 5000))
    text = render_markdown(report, ["r.html", "r.json", "r.speedscope.json"])
    assert_safe(text)
    assert text == render_markdown(report, ["r.html", "r.json", "r.speedscope.json"])
    assert "\u2026" in text
    assert re.search(r"^\d+ more findings in the full report\.$", text, flags=re.M)
    assert re.search(r"^\d+ more wait sites in the full report\.$", text, flags=re.M)
    assert report.verdict.headline[:40] in plain(text)


@pytest.mark.parametrize("worst", ["\u202e", "\U0001f600", "|", "`", "*"])
def test_every_field_full_of_the_most_expensive_character_still_fits(recorded_reports, worst):
    def fill(value):
        if isinstance(value, str):
            return worst * 3000
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value] * 3
        return value

    report = as_report(fill(hostile_report(recorded_reports["lock_contention"].report, "n").to_json()))
    report = replace(report, verdict=replace(report.verdict, severity="critical"))
    text = render_markdown(report, [worst * 500 + ".html"] * 3)
    assert_safe(text)
    assert "diagnose: critical" in plain(text)


# ------------------------------------------------------------------ what the summary says


def test_low_confidence_is_said_plainly(recorded_reports):
    base = recorded_reports["underloaded"].report
    report = replace(base, verdict=replace(base.verdict, confidence="low", samples=41))
    shown = plain(render_markdown(report))
    assert "Low confidence: the verdict rests on 41 samples; sample longer before acting on it." \
        in shown
    assert "Low confidence" not in plain(render_markdown(base))


def test_observer_cost_and_partial_run_are_in_the_facts(recorded_reports):
    base = recorded_reports["underloaded"].report
    observer = replace(
        base.sampling.observer, paused_share=0.12, pyspy_cpu_s=1.5, pyspy_cpu_share_of_cores=0.2,
        errors=3, error_rate=0.01,
        warning="py-spy kept the target's threads stopped 12% of the time")
    report = replace(base, sampling=replace(base.sampling, partial=True, observer=observer))
    text = render_markdown(report)
    facts = {row[0]: row[1] for row in table_headed(text, "Run fact")[1:]}
    assert facts["Observer cost"] == ("target paused 12% \u00b7 py-spy CPU 1.5 s (20% of the "
                                      "cores) \u00b7 3 sampling errors (1.0%)")
    assert facts["Partial"] == "yes, the target exited during the window"
    assert "Observer effect: py-spy kept the target's threads stopped 12% of the time" in plain(text)


def test_findings_that_found_nothing_are_one_also_checked_line_each(recorded_reports):
    base = recorded_reports["underloaded"].report
    report = replace(base, findings=tuple(replace(f, severity="ok") for f in base.findings),
                     verdict=replace(base.verdict, primary="none"))
    text = render_markdown(report)
    assert "No check found a problem." in plain(text)
    findings = text[text.index("### Top findings"):text.index("### Run facts")]
    assert "####" not in findings and "Evidence" not in findings
    assert "What to do" not in findings
    checked = [line for line in findings.splitlines() if line.startswith("**Also checked:**")]
    assert [plain(line) for line in checked] == [
        f"Also checked: {f.title} \u2014 {f.summary}" for f in report.findings]
    for finding in report.findings:
        assert not any(advice in plain(findings) for advice in finding.advice)


def test_a_finding_the_verdict_names_as_possible_is_shown_as_a_finding_not_as_found_nothing(
        recorded_reports):
    # its score under the info line, its interval reaching it (engine.verdict_for): the headline
    # is about it, so the summary shows its evidence and advice, not "also checked"
    base = recorded_reports["underloaded"].report
    named = base.findings[0]
    report = replace(base, findings=tuple(replace(f, severity="ok") for f in base.findings),
                     verdict=replace(base.verdict, primary=named.id))
    findings = render_markdown(report)
    findings = findings[findings.index("### Top findings"):findings.index("### Run facts")]
    heading = next(line for line in findings.splitlines() if line.startswith("#### 1."))
    assert plain(heading).startswith(f"1. {named.title}"), heading
    assert "No check found a problem." not in plain(findings)
    checked = [plain(line) for line in findings.splitlines() if line.startswith("**Also checked:**")]
    assert not any(named.title in line for line in checked)


def lever_report(label: str = "checksum") -> Report:
    levers = [{"kind": "remove_work", "gain": 9.1, "label": f"if {label} cost nothing",
               "basis": "estimate: b", "upper_bound": True},
              {"kind": "more_cores", "gain": 1.04, "label": "from more cores",
               "basis": "estimate: c", "upper_bound": False}]
    return as_report({"verdict": {"headline": "h", "primary": "cpu_bound"},
            "findings": [{"id": "cpu_bound", "title": "Busy threads", "severity": "critical",
                          "score": 100, "summary": "s", "predicted_gain": 1.04, "gain_basis": "c",
                          "levers": levers, "advice": ["vectorise it", "cache the checksums", "run it in processes"]},
                         {"id": "lock_contention", "title": "Request threads queue on a lock",
                          "severity": "ok", "score": 0,
                          "summary": "0% of request-thread time waits on locks",
                          "advice": ["shrink the critical section"]},
                         {"id": "pool_wait", "title": "Request threads wait for a pooled resource",
                          "severity": "ok", "score": 0,
                          "summary": "0% of request-thread time waits for a pooled resource",
                          "advice": ["size the pool"]}]})


def test_a_finding_with_levers_states_each_instead_of_one_bare_gain():
    text = render_markdown(lever_report())
    shown = plain(text)
    assert ("Predicted gain: \u00d79.10 if checksum cost nothing (estimate, upper bound) \u00b7 "
            "\u00d71.04 from more cores (estimate)") in shown
    heading = next(line for line in text.splitlines() if line.startswith("#### 1."))
    assert "predicted gain" not in heading and "1.04" not in heading
    assert "What to do: vectorise it" in shown
    # the top finding's first two advice lines, as on the page's first screen; not its third
    assert "Then: cache the checksums" in shown and "run it in processes" not in shown
    assert "Also checked: Request threads queue on a lock \u2014 0% of request-thread time waits on locks" in shown
    assert "Also checked: Request threads wait for a pooled resource" in shown
    assert "shrink the critical section" not in shown and "size the pool" not in shown
    # without levers: the one figure, worded as the page words it (render/wording.py)
    report = lever_report()
    report = replace(report, findings=(replace(report.findings[0], levers=()),
                                       *report.findings[1:]))
    heading = next(line for line in render_markdown(report).splitlines() if line.startswith("#### 1."))
    assert "predicted gain \u00d71.04 (estimate)" in heading


@pytest.mark.parametrize("name", HOSTILE)
def test_a_lever_label_from_the_profiled_process_stays_text(name):
    text = render_markdown(lever_report(name))
    assert_safe(text)
    one_line = " ".join(name.split()).replace("\u202e", "[U+202E]")
    assert f"\u00d79.10 if {one_line} cost nothing (estimate, upper bound)" in plain(text)


def test_wait_sites_are_ranked_by_thread_time_with_their_top_holder(recorded_reports):
    report = hostile_report(recorded_reports["lock_contention"].report, "small")
    big = replace(report.waits[0], label="Lock", function="Pool.get", file="/srv/pool.py",
                  line=12, thread_seconds=40.0, share=0.8, threads=6, max_concurrent=6,
                  holders=(Holder(function="Pool.refill", share=0.75),))
    report = replace(report, waits=(*report.waits, big))
    rows = table_headed(render_markdown(report), "Wait")
    assert rows[1] == ["Lock", "Pool.get at /srv/pool.py:12", "80%", "40 s", "6 (6 at once)",
                       "Pool.refill (75% of the time)"]
    assert rows[2][0] == "small"


def test_evidence_holding_arrays_or_empty_collections_still_renders():
    # A report dict still in memory (before JSON) can carry numpy arrays in a finding's
    # evidence; an empty one says nothing and sorts last, a full one is a value like any other.
    import numpy as np

    report = {"verdict": {"primary": "event_loop_blocked", "headline": "h", "severity": "critical"},
              "findings": [{"id": "event_loop_blocked", "title": "t", "severity": "critical",
                            "score": 90, "summary": "s",
                            "evidence": {"gaps": np.array([]), "sizes": np.array([1.0, 2.0]),
                                         "names": [], "share": 0.5}}]}
    text = render_markdown(report)
    assert "event\\_loop\\_blocked" in text or "event_loop_blocked" in text
    assert_tables_intact(text)
