"""Reading back a diagnose report a user names: the .json written beside it, or the .html page,
whose data block carries the same report, as the frozen model (report/model/). Anything else is
BadProfile (exit 6), one line naming what is missing.

A report written before reports carried their evidence labels is labelled by `older_labels`,
the checks' declared labels (checks/registry.evidence_labels), which the caller hands in: the
report package imports nothing above it (docs/architecture.md)."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from diagnose.bounded_read import read_bounded
from diagnose.errors import BadProfile
from diagnose.report.model import Evidence, Finding, NotAReport, Report
from diagnose.report.model.codec import decode

# A report of a long window over many threads is a few MiB; its page a little more.
MAX_REPORT_BYTES = 256 << 20
WHAT = "diagnose report (.json or .html)"

# The page's data block (reports/report.html.j2): JSON whose "<", ">" and "&" are escaped, so
# its first "</script" is its end.
_DATA_BLOCK = re.compile(r'<script type="application/json" id="diagnose-data">(.*?)</script',
                         re.S | re.I)
# Pages of the other commands: said by name rather than "no report in it".
_OTHER_PAGES = {"sweep-data": "a sweep report", "experiment-data": "an experiment report",
                "diff-data": "a diff report"}


OlderLabels = Callable[[], Mapping[str, Evidence]]


def read_report(path: str | Path, need_stacks: bool = True,
                older_labels: OlderLabels | None = None) -> Report:
    """The report in the .json or .html report at `path` (this schema version or the previous
    one), with its stacks table (diff and export read it) unless not `need_stacks` (render).
    `older_labels`: the evidence labels of a report written before reports carried their own
    (Report.from_json); without it such a report's keys are labelled from the keys."""
    path = Path(path)
    return _check(_read(path), path, need_stacks, older_labels)


def read_findings(path: str | Path) -> tuple[Finding, ...]:
    """The findings of the .json or .html report at `path`, in its order: all `experiment
    --from-report` reads, so a report written by hand with only its findings will do."""
    path = Path(path)
    data = _read(path)
    if not isinstance(data, dict):
        raise BadProfile(f"{path}: JSON but not an object, not a {WHAT}")
    findings = data.get("findings") or []
    if not isinstance(findings, list):
        raise BadProfile(f"{path}: findings is not a list, not a {WHAT}")
    try:
        return tuple(decode(Finding, f, f"findings[{i}]") for i, f in enumerate(findings))
    except NotAReport as exc:
        raise BadProfile(f"{path}: {exc.path} is {exc.what}, not a {WHAT}") from None


def _read(path: Path) -> Any:
    """The JSON of the report file: the .json itself, or the page's data block's report."""
    raw = read_bounded(path, WHAT, MAX_REPORT_BYTES, BadProfile)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadProfile(f"{path}: not UTF-8 text, not a {WHAT}") from None
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped.startswith("{"):
        data = _parse(stripped, path)
    elif stripped[:200].lower().startswith(("<!doctype html", "<html")):
        data = _from_page(text, path)
    else:
        raise BadProfile(f"{path}: neither JSON nor an HTML page, not a {WHAT}")
    return data


def _parse(text: str, path: Path) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise BadProfile(f"{path}: not a {WHAT} (nested too deeply)") from None
    except ValueError as exc:
        raise BadProfile(f"{path}: not valid JSON ({exc}), not a {WHAT}") from None


def _from_page(text: str, path: Path) -> Any:
    match = _DATA_BLOCK.search(text)
    if match is None:
        for block_id, name in _OTHER_PAGES.items():
            if f'id="{block_id}"' in text:
                raise BadProfile(f"{path}: is {name} page, not a {WHAT}")
        raise BadProfile(f"{path}: an HTML page without a diagnose data block, not a {WHAT}")
    # The block is raw text to the HTML parser (never entity-decoded); unescape defensively
    # only when a tool re-saved the page with entities.
    body = match.group(1)
    data = _parse(body if "&quot;" not in body else html.unescape(body), path)
    if not isinstance(data, dict) or not isinstance(data.get("report"), dict):
        raise BadProfile(f"{path}: the page's data block holds no report, not a {WHAT}")
    return data["report"]


def _check(data: Any, path: Path, need_stacks: bool = True,
           older_labels: OlderLabels | None = None) -> Report:
    if not isinstance(data, dict):
        raise BadProfile(f"{path}: JSON but not an object, not a {WHAT}")
    if data.get("kind") == "diagnose-diff":
        raise BadProfile(f"{path}: is a diff report, not a {WHAT}")
    if "verdict" not in data and ("steps" in data or "decision" in data):
        raise BadProfile(f"{path}: is a sweep or experiment report, not a {WHAT}")
    try:
        report = Report.from_json(data, older_labels=older_labels)
    except NotAReport as exc:
        detail = (f"JSON {exc.what}" if not exc.path
                  else f"{exc.what}: {exc.path}" if exc.what == "missing"
                  else f"{exc.path} is {exc.what}")
        raise BadProfile(f"{path}: {detail}, not a {WHAT}") from None
    if need_stacks and not report.stacks.frames:
        raise BadProfile(f"{path}: the report carries no stacks (written by an older diagnose?): "
                         f"analyze its .speedscope.json again to get one that can be compared")
    return report
