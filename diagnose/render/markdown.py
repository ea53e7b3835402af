"""The ticket summary: a report as GitHub-flavoured Markdown of under 4 KB.

`render_markdown(report)` writes the verdict, the top findings with their evidence, their levers
(each with its estimated gain) and first advice, one "also checked" line per check that found
nothing (no advice), the top wait sites with their holders, the wait-for graph's bottleneck in
one line, the asyncio tasks' top await site (read from memory, `attach`), the run facts and
what observing cost the target; under the verdict, the chain of waits with the most thread time
(where those waits end, every hop):
pipe tables and text only (no HTML), so it renders in GitHub, GitLab and Jira issues.

Names, files and command lines come from the profiled process: they pass through `md_text`,
`md_cell` or `md_code`, which keep them from making markup, links, HTML or extra table cells.
When the summary would exceed 4 KB it is rebuilt with fewer rows and shorter names (the first
budget of `_BUDGETS` that fits), so one report always gives the same summary.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from diagnose.vocab import Confidence, Severity
from diagnose.render import wording
from diagnose.render.cpu_account_words import account_words
from diagnose.render.deadlock_text import behind, deadlocks_in, heading, lock_where
from diagnose.render.evidence import (DASH, EvidenceRow, describe_evidence, fmt_number,
                                      fmt_percent, fmt_seconds)
from diagnose.render.text_safety import LINE_BREAKING, show_invisible
from diagnose.render.wording import gain_notes, gain_words
from diagnose.report.model import Finding, Report, Sampling, WaitSite

MAX_BYTES = 4096
ELLIPSIS = "\u2026"
PIPE_STAND_IN = "\u00a6"  # broken bar: a `|` in a table cell, which no renderer splits on

# ------------------------------------------------------------------ escaping untrusted text

# ASCII punctuation that can start markup somewhere in a line: emphasis (* _ ~), code (`), links
# and images ([ ] !), HTML and autolinks (< >), entities (&), headings (#), table cells (|),
# math ($ on GitHub), e-mail autolinks (@), Jira macros ({ }), and the escape character itself.
# CommonMark lets a backslash escape any ASCII punctuation, so each renders as itself.
#
# `<` and `>` are backslash-escaped, not written as `&lt;`: an entity is HTML, which GitHub and
# GitLab decode but Jira and plain-text notifications show as the five characters; a backslash
# escape is understood by every CommonMark renderer (GitHub, GitLab, Jira's Markdown import) and
# at worst leaves a visible backslash, never a tag.
_ESCAPED = frozenset("\\`*_~[]!<>&#|$@{}")
# A colon between a word and more text ("https:", "javascript:", ":emoji:"): the scheme of a bare
# URL, which GitHub would make a link. A colon before a space ("it: the") is left as it is.
# (GitLab links bare http(s) URLs after rendering, escapes or not: the link then shows its own
# address, never a disguise; a disguised link needs `[`, which is always escaped.)
_SCHEME_COLON = re.compile(r"(?<=[A-Za-z0-9]):(?=\S)")
# At the start of a line these make a list or a heading underline.
_LEADING_MARKERS = frozenset("-+=")
_ORDERED_MARKER = re.compile(r"\d+[.)](?= |$)")


def _one_line(text) -> str:
    """`text` as one line: line breaks, tabs and other control characters become spaces
    (a newline would end a table row or start a block), runs of spaces one space. The other
    invisible characters (bidi controls, zero-width ones: render/text_safety.py) are then shown
    as their code points, as every output shows them."""
    s = "" if text is None else str(text)
    s = "".join(" " if c in LINE_BREAKING else c for c in s)
    return " ".join(s.split())


def _shorten(text: str, limit: int | None, keep_tail: bool = False) -> str:
    """At most `limit` characters, the cut marked with an ellipsis; `keep_tail` keeps the end
    (of a file path, whose last part names the file)."""
    if limit is None or len(text) <= limit:
        return text
    if keep_tail:
        return ELLIPSIS + text[len(text) - (limit - 1):]
    return text[:limit - 1].rstrip() + ELLIPSIS


def md_text(text, limit: int | None = None, keep_tail: bool = False,
            line_start: bool = True) -> str:
    """Untrusted `text` as Markdown that renders as exactly that text, on one line, shortened to
    `limit` characters before escaping (so no escape is ever cut in two). `line_start`: the
    text may begin a line, where "- ", "+ ", "1. " would start a list."""
    s = show_invisible(_shorten(_one_line(text), limit, keep_tail))
    colons = {m.start() for m in _SCHEME_COLON.finditer(s)}
    out = []
    for i, c in enumerate(s):
        if c in _ESCAPED or i in colons:
            out.append("\\" + c)
        elif c == "." and s[max(0, i - 3):i].lower() == "www":
            out.append("\\.")  # "www." starts a GitHub autolink
        else:
            out.append(c)
    if line_start and out and out[0] in _LEADING_MARKERS:
        out[0] = "\\" + out[0]
    ordered = _ORDERED_MARKER.match(s) if line_start else None
    if ordered:
        out[ordered.end() - 1] = "\\" + out[ordered.end() - 1]
    return "".join(out)


def md_cell(text, limit: int | None = None, keep_tail: bool = False) -> str:
    """`md_text` for a table cell: a `|` becomes a broken bar, since renderers split rows on
    pipes before they read escapes (and some do so even inside code spans)."""
    if text is None or _one_line(text) == "":
        return DASH
    return md_text(str(text).replace("|", PIPE_STAND_IN), limit, keep_tail, line_start=False)


def md_code(text, limit: int | None = None, keep_tail: bool = False) -> str:
    """Untrusted `text` as a code span: nothing inside it is markup or a link. Backticks are
    replaced (one would close the span) and so are pipes (they split table cells even here)."""
    raw = "" if text is None else str(text)
    s = _one_line(raw.replace("`", "'").replace("|", PIPE_STAND_IN))
    s = show_invisible(_shorten(s, limit, keep_tail))
    return f"`{s}`" if s else DASH


# ------------------------------------------------------------------ values


def finite_number(value) -> float | int | None:
    """A finite number, or None for anything else (a hand-edited or older report)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def as_dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def as_list(value) -> list:
    return value if isinstance(value, list) else []


def md_table(header: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


# ------------------------------------------------------------------ sections


# The top finding's advice lines a summary states, as the page's first screen does
# (reports/static/page/verdict.js FIRST_SCREEN_ADVICE): its first lines say what limits the
# service and the first change to make.
FIRST_ADVICE = 2


@dataclass(frozen=True)
class _Budget:
    findings: int  # findings shown
    evidence: int  # evidence rows per finding
    waits: int  # wait sites shown
    name: int  # characters of a function, file or command line
    text: int  # characters of a sentence (headline, summary, advice)
    checked: int  # "also checked" lines (checks that found nothing)


# From the full summary to the smallest; the first that fits in MAX_BYTES is used.
_BUDGETS = (
    _Budget(3, 3, 5, 80, 300, 12),
    _Budget(3, 3, 5, 80, 300, 4),  # fewer "also checked" lines before shorter names
    _Budget(3, 3, 5, 80, 300, 0),  # ...and none: three findings in full say more than the checks that found nothing
    _Budget(3, 2, 4, 60, 200, 12),
    _Budget(3, 2, 4, 60, 200, 4),
    _Budget(3, 2, 3, 44, 150, 4),
    _Budget(2, 2, 2, 36, 110, 4),
    _Budget(1, 1, 1, 28, 80, 0),
    _Budget(0, 0, 0, 20, 60, 0),
)


def _verdict_lines(report: Report, budget: _Budget) -> list[str]:
    verdict = report.verdict
    severity = md_text(verdict.severity or "unknown", 12)
    headline = md_text(verdict.headline or "no verdict", budget.text)
    lines = [f"## diagnose: {severity} {DASH} {headline}", ""]
    confidence = md_text(verdict.confidence or "unknown", 12)
    samples = finite_number(verdict.samples)
    on = f" ({fmt_number(samples)} samples)" if samples is not None else ""
    co = verdict.co_primary
    also = f" \u00b7 **co-primary:** {md_code(co, budget.name)}" if co else ""
    lines.append(f"**Primary finding:** {md_code(verdict.primary, budget.name)}{also} "
                 f"\u00b7 **severity:** {severity} \u00b7 **confidence:** {confidence}{on}")
    lines += _chain_line(report, budget)
    if co and budget.findings:
        # Two findings within the noise of each other: why, and the first step for each (the
        # smallest budget, for text of the worst kind, names the co-primary only).
        lines += ["", f"**Within the noise of each other:** "
                      f"{md_text(verdict.co_primary_reason or '', budget.text)}"]
        for name, text in zip(verdict.named, verdict.first_advice):
            if text:
                lines += ["", f"**First advice for {md_code(name, budget.name)}:** "
                              f"{md_text(text, budget.text)}"]
    if verdict.also and budget.findings:
        # Findings folded into the verdict (one cause seen from another side), not named.
        lines += ["", "**The same cause, also seen as:** "
                      + ", ".join(md_code(f, budget.name) for f in verdict.also)]
    if verdict.confidence == Confidence.LOW:
        lines += ["", f"**Low confidence:** the verdict rests on "
                      f"{fmt_number(samples) if samples is not None else 'too few'} samples; "
                      f"sample longer before acting on it."]
    warning = report.sampling.observer.warning
    if warning:
        lines += ["", f"**Observer effect:** {md_text(warning, budget.text)}"]
    return lines


def _chain_line(report: Report, budget: _Budget) -> list[str]:
    """Under the verdict, where the most waited-on chain of waits ends (report.chains, most
    thread-time first), every hop in one line; none without chains, or in the smallest budget
    (the verdict alone, for text of the worst kind)."""
    if not report.chains or not budget.findings:
        return []
    chain = report.chains[0]
    pid = f"pid {chain.pid}: " if chain.pid is not None else ""
    return ["", f"**Where the waits end:** {pid}{md_text(chain.line, budget.text, line_start=False)}"]


def _observer_text(sampling: Sampling) -> str:
    observer = sampling.observer
    parts = []
    paused = finite_number(observer.paused_share)
    parts.append(f"target paused {fmt_percent(paused)}" if paused is not None
                 else "pause not measured")
    cpu_s = finite_number(observer.pyspy_cpu_s)
    cpu_share = finite_number(observer.pyspy_cpu_share_of_cores)
    if cpu_s is not None:
        share = f" ({fmt_percent(cpu_share)} of the cores)" if cpu_share is not None else ""
        parts.append(f"py-spy CPU {fmt_seconds(cpu_s)}{share}")
    errors, error_rate = finite_number(observer.errors), finite_number(observer.error_rate)
    if errors is not None:
        rate = f" ({fmt_percent(error_rate)})" if errors and error_rate is not None else ""
        parts.append(f"{fmt_number(errors)} sampling errors{rate}")
    if observer.torn_stacks_possible:
        parts.append("stacks may be torn (non-blocking sampling)")
    return " \u00b7 ".join(parts)


def _rate_text(sampling: Sampling) -> str:
    asked = finite_number(sampling.observer.requested_rate_hz)
    got = finite_number(sampling.observer.achieved_rate_hz)
    if asked and got is not None:
        return f"{fmt_number(got)} of {fmt_number(asked)} Hz"
    if got is not None:
        return f"{fmt_number(got)} Hz"
    return f"{fmt_number(asked)} Hz asked" if asked else "not measured"


def _run_facts(report: Report, budget: _Budget) -> list[str]:
    target, sampling = report.target, report.sampling
    pids = [p for p in target.pids or () if p is not None]
    who = (f"pids {md_cell(', '.join(map(str, pids)), budget.name)}" if len(pids) > 1
           else f"pid {md_cell(target.pid, 12)}")
    for value, unit, noun in ((target.python, "Python ", ""), (target.cores, "", " cores"),
                              (target.threads, "", " threads")):
        if value is not None:
            who += f" \u00b7 {unit}{md_cell(value, 16)}{noun}"
    window = finite_number(sampling.duration_s)
    at_least = finite_number(sampling.duration_at_least_s)
    window_text = (fmt_seconds(window) if window is not None
                   else f"at least {fmt_seconds(at_least)}" if at_least is not None else "unknown")
    samples = finite_number(sampling.samples)
    thread_samples = finite_number(sampling.thread_samples)
    sample_text = fmt_number(samples) if samples is not None else DASH
    if thread_samples is not None and thread_samples != samples:
        sample_text += f" ({fmt_number(thread_samples)} thread-samples)"
    rows = [["Target", who],
            ["Command line", md_code(target.cmdline, budget.name + 20)],
            ["Window", window_text],
            ["Samples", sample_text],
            ["Rate (achieved of asked)", _rate_text(sampling)],
            ["Mode", md_cell(sampling.mode, budget.name)],
            ["Observer cost", _observer_text(sampling)]]
    observer_cpu = wording.observer_cpu_text(sampling.observer)
    if observer_cpu:  # measured by `attach` only
        rows.append(["Observer CPU", md_cell(observer_cpu)])
    account = account_words(report.cpu_account)
    if account.measured:  # the kernel's process-level counters: `attach` of this version
        rows.append(["CPU account", md_cell(account.summary)])
    rows.append(["Partial", "**yes**, the target exited during the window" if sampling.partial
                 else "no"])
    return ["### Run facts", "", *md_table(("Run fact", "Value"), rows)]


# Flags that qualify other rows (`estimated` is already said on the rows it concerns).
_QUIET_EVIDENCE = frozenset({"estimated", "calibrated"})


def _says_nothing(value: object) -> bool:
    """Zero or empty: a value that says what did not happen."""
    if value is None:
        return True
    if isinstance(value, (int, float)):
        return value == 0
    try:  # a string, list, dict or array: empty says nothing
        return len(value) == 0  # type: ignore[arg-type]
    except TypeError:
        return False


def _telling_rows(finding: Finding, count: int) -> list[EvidenceRow]:
    """The `count` evidence rows that say most: in the check's own order (each check lists the
    measurement it stands on first), with zero or empty values last (they say what did not
    happen)."""
    values = {v.key: v.value for v in finding.evidence}
    rows = [r for r in describe_evidence(finding) if r.key not in _QUIET_EVIDENCE]
    rows.sort(key=lambda row: _says_nothing(values.get(row.key)))  # stable: the check's order
    return rows[:count]


def _finding_heading(rank: int, finding: Finding, budget: _Budget) -> str:
    parts = [md_text(finding.severity or "unknown", 12)]
    score = finite_number(finding.score)
    if score is not None:
        parts.append(f"score {fmt_number(score)}")
    gain = gain_words(finding)
    if gain.figure is not None:  # levers: their own line, each with its figure
        parts.append(f"predicted gain {gain.text}")
    if finding.low_confidence:
        samples = finite_number(finding.samples)
        parts.append("low confidence" + (f": {fmt_number(samples)} samples" if samples is not None
                                         else ""))
    title = md_text(finding.title or finding.id or "finding", budget.text)
    return f"#### {rank}. {title} ({', '.join(parts)})"


def levers_text(finding: Finding, limit: int | None = None) -> str:
    """Each lever with its figure, all estimates: "×4.17 if checksum cost nothing (estimate,
    upper bound) · ×1.00 from more cores (estimate)"; "" when the finding has none. The words
    are the page's (render/wording.py), each label escaped and shortened to `limit`."""
    return wording.levers_text(finding, lambda label: md_text(label, limit, line_start=False))


def _also_checked(findings: list[Finding], budget: _Budget) -> list[str]:
    """One line per check that found nothing: what it checked and the figure that cleared it
    (its summary), never its advice. Paragraphs, not a list: no line of the summary is markup."""
    lines = []
    for finding in findings[:budget.checked]:
        title = md_text(finding.title or finding.id or "check", budget.name, line_start=False)
        figure = (f" {DASH} {md_text(finding.summary, min(budget.text, 160), line_start=False)}"
                  if finding.summary else "")
        lines += [f"**Also checked:** {title}{figure}", ""]
    hidden = len(findings) - min(len(findings), budget.checked)
    if hidden and budget.checked:
        lines += [f"{hidden} more check{'s' if hidden > 1 else ''} found nothing (in the full "
                  f"report).", ""]
    return lines[:-1] if lines else lines


def _findings(report: Report, budget: _Budget) -> list[str]:
    # A finding of severity "ok" says a check found nothing: one "also checked" line each.
    # ...unless the verdict names it as possible (its score interval reaches the info line)
    named = report.verdict.primary

    def found_something(f: Finding) -> bool:
        return f.severity != Severity.OK or f.id == named

    found = [f for f in report.findings if found_something(f)]
    cleared = [f for f in report.findings if not found_something(f)]
    lines = ["### Top findings", ""]
    if not found:
        lines += ["No check found a problem."]
        checked = _also_checked(cleared, budget)
        return lines + (["", *checked] if checked else [])
    for rank, finding in enumerate(found[:budget.findings], start=1):
        lines += [_finding_heading(rank, finding, budget), ""]
        if finding.summary:
            lines += [md_text(finding.summary, budget.text), ""]
        levers = levers_text(finding, budget.text)
        if levers:
            lines += [f"**Predicted gain:** {levers}", ""]
        # the page states how such predictions fared; a summary keeps the bounds and blind spots
        lines += [line for note in gain_notes(finding, fared=False)
                  for line in (f"**Note:** {md_text(note, budget.text)}", "")]
        rows = [[md_cell(r.label, budget.text), md_cell(r.text, budget.text)]
                for r in _telling_rows(finding, budget.evidence)]
        if rows:
            lines += [*md_table(("Evidence", "Value"), rows), ""]
        # the top finding's first lines (as on the page), each a paragraph: no line is markup
        advice = [a for a in finding.advice if a][:FIRST_ADVICE if rank == 1 else 1]
        for i, text in enumerate(advice):
            lines += [f"**{'Then' if i else 'What to do'}:** {md_text(text, budget.text)}", ""]
    hidden = len(found) - min(len(found), budget.findings)
    if hidden:
        lines += [f"{hidden} more finding{'s' if hidden > 1 else ''} in the full report.", ""]
    lines += _also_checked(cleared, budget)
    return lines[:-1] if lines[-1] == "" else lines


def _where(wait: WaitSite, budget: _Budget) -> str:
    at = f"{wait.file or '?'}:{wait.line}"
    return f"{md_code(wait.function, budget.name)} at {md_code(at, budget.name, True)}"


def _holder(wait: WaitSite, budget: _Budget) -> str:
    holders = [h for h in wait.holders if h.function]
    if not holders:
        return DASH
    share = finite_number(holders[0].share)
    return md_code(holders[0].function, budget.name) + (
        f" ({fmt_percent(share)} of the time)" if share is not None else "")


def _waits(report: Report, budget: _Budget) -> list[str]:
    waits = list(report.waits)
    if not waits or budget.waits == 0:
        return []
    # The sites that cost the most thread time first; the report lists them by process.
    waits.sort(key=lambda w: -(finite_number(w.thread_seconds) or 0))
    several_processes = len({w.pid for w in waits}) > 1
    rows = []
    for wait in waits[:budget.waits]:
        kind = md_cell(wait.label or wait.kind, budget.name)
        if several_processes:
            kind += f" (pid {md_cell(wait.pid, 12)})"
        share, seconds = finite_number(wait.share), finite_number(wait.thread_seconds)
        threads, at_once = finite_number(wait.threads), finite_number(wait.max_concurrent)
        rows.append([kind, _where(wait, budget),
                     fmt_percent(share) if share is not None else DASH,
                     fmt_seconds(seconds) if seconds is not None else DASH,
                     (fmt_number(threads) if threads is not None else DASH)
                     + (f" ({fmt_number(at_once)} at once)" if at_once is not None else ""),
                     _holder(wait, budget)])
    lines = ["### Wait sites", "",
             *md_table(("Wait", "Where", "Share", "Thread time", "Threads", "Top holder"), rows)]
    if len(waits) > budget.waits:
        lines += ["", f"{len(waits) - budget.waits} more wait sites in the full report."]
    return lines


_AWAIT_KINDS = {"semaphore": "asyncio.Semaphore", "lock": "asyncio.Lock",
                "condition": "asyncio.Condition", "event": "asyncio.Event",
                "queue_get": "Queue get", "queue_put": "Queue put", "future": "a future",
                "sleep": "sleep", "io": "I/O"}


def _tasks(report: Report, budget: _Budget) -> list[str]:
    """One line: where the asyncio request tasks waited most (report.tasks), read from memory."""
    if budget.waits == 0:
        return []
    found = [(process, site) for process in report.tasks for site in process.sites
             if math.isfinite(site.share)]
    if not found:
        return []
    process, site = max(found, key=lambda pair: pair[1].share)
    what = md_text(_AWAIT_KINDS.get(site.kind, site.kind) or "?", budget.name, line_start=False)
    name = f" {md_code(site.name, budget.name)}" if site.name else ""
    where = "" if site.local else " (a call outside the process)"
    at = f"{site.file or '?'}:{site.line}"
    return [f"**Asyncio tasks by await site:** {fmt_percent(site.share)} of request-task time on "
            f"{what}{name}{where} at {md_code(site.function, budget.name)} at "
            f"{md_code(at, budget.name, True)}"
            + f", {fmt_number(site.waiting_avg)} tasks waiting on average"
            + f" ({fmt_number(site.waiting_max)} at most)"
            + (f", {fmt_number(site.capacity)} permits" if site.capacity is not None else "")
            + (f"; {fmt_number(process.snapshots)} reads of the tasks (pid {process.pid})"
               if process.snapshots else "") + "."]


def _wait_graph(report: Report, budget: _Budget) -> list[str]:
    """One line: the wait-for graph's bottleneck in words (report.wait_graph), when it has one."""
    graph = report.wait_graph
    if graph is None or not graph.summary or not graph.edges or budget.waits == 0:
        return []
    knots = len(graph.knots)
    hang = (f" A hang: {knots} knot{'s' if knots > 1 else ''} (waiting only on each other, none "
            "running)." if knots else "")
    return [f"**Wait-for graph:** {md_text(graph.summary, budget.text, line_start=False)}{hang}"]


def _footer(files: tuple[str, ...], budget: _Budget) -> list[str]:
    names = [md_code(name, budget.name + 30, True) for name in files[:3]]
    if not names:
        return ["Generated by diagnose; the HTML report beside it has the flame graph, threads "
                "and timeline."]
    rest = f" (the report's data: {', '.join(names[1:])})" if len(names) > 1 else ""
    return [f"Generated by diagnose. Open {names[0]} in a browser for the flame graph, threads "
            f"and timeline{rest}."]


def _deadlock_lines(report: Report, budget: _Budget) -> list[str]:
    """The deadlocks thread by thread, as a thread dump prints them ("Found one deadlock:")."""
    deadlocks = deadlocks_in(report)
    if not deadlocks or not budget.findings:
        return []
    lines = [f"**{heading(len(deadlocks))}**", ""]
    for deadlock in deadlocks[:budget.findings]:
        for t in deadlock.threads:
            lines.append(f"- {md_code(t.thread, budget.name)} holds {md_code(t.holds.shown, budget.name)} "
                         f"({md_code(lock_where(t.holds), budget.name, keep_tail=True)}), waits for "
                         f"{md_code(t.waits_for.shown, budget.name)} "
                         f"({md_code(lock_where(t.waits_for), budget.name, keep_tail=True)}), held by "
                         f"{md_code(t.held_by, budget.name)}")
        if deadlock.victims:
            shown = deadlock.victims[:budget.waits]
            named = ", ".join(md_code(v.thread, budget.name) for v in shown)
            more = f" and {len(deadlock.victims) - len(shown)} more" if len(shown) < len(deadlock.victims) else ""
            lines.append(f"- {behind(len(deadlock.victims), deadlock.among_tasks)}"
                         + (f": {named}{more}" if shown else ""))
    return lines


def _render(report: Report, files: tuple[str, ...], budget: _Budget) -> str:
    sections = [_verdict_lines(report, budget), _deadlock_lines(report, budget),
                _findings(report, budget), _waits(report, budget), _wait_graph(report, budget),
                _tasks(report, budget), _run_facts(report, budget), _footer(files, budget)]
    return "\n\n".join("\n".join(s) for s in sections if s) + "\n"


def _fits(text: str) -> bool:
    return len(text.encode("utf-8")) < MAX_BYTES


def render_markdown(report: Report, files: tuple[str, ...] | list[str] = ()) -> str:
    """The ticket summary of `report`, under MAX_BYTES of UTF-8. `files`: the names of the
    report's other files (the HTML first), named in the last line."""
    files = tuple(str(f) for f in files)
    for budget in _BUDGETS:
        text = _render(report, files, budget)
        if _fits(text):
            return text
    # Untrusted text of the worst kind (every character escaped or shown as a code point) in
    # every field: the verdict alone, which fits whatever the report holds.
    smallest = _BUDGETS[-1]
    return "\n\n".join("\n".join(s) for s in (_verdict_lines(report, smallest),
                                              _footer(files, smallest))) + "\n"
