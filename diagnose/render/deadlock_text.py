"""A report's deadlocks read back, and printed like a JVM thread dump ("Found one deadlock:").

`deadlocks_in(report)` reads the deadlock finding's `deadlocks` evidence (checks/deadlock.py) of
a JSON report into frozen types, tolerating a hand-edited or older report (anything malformed is
left out). `dump_lines(report)` prints them for a terminal; the Markdown summary and the report
page print the same fields in their own markup. Thread names, lock names and files come from the
profiled process: here control and bidirectional characters are shown as code points, so a name
cannot move the terminal's cursor or reorder the line.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from diagnose.report.model import Report

_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
MAX_NAME = 120
MAX_VICTIMS_NAMED = 8


@dataclass(frozen=True)
class LockRef:
    name: str  # as resolved (`FeatureCache._lock`), else as written
    file: str
    line: int

    @property
    def where(self) -> str:
        parts = self.file.replace("\\", "/").split("/")
        return f"{'/'.join(parts[-2:]) if len(parts) > 1 else self.file}:{self.line}"


@dataclass(frozen=True)
class DeadlockedThread:
    thread: str
    tid: int | None
    holds: LockRef
    waits_for: LockRef
    held_by: str


@dataclass(frozen=True)
class ReportedDeadlock:
    threads: tuple[DeadlockedThread, ...]
    victims: tuple[str, ...]
    among_tasks: bool = False  # an await cycle among asyncio tasks, not threads and locks


def _lock(value) -> LockRef | None:
    if not isinstance(value, dict):
        return None
    name = value.get("qualified") or value.get("name")
    line = value.get("line")
    if not isinstance(name, str) or not isinstance(line, int) or isinstance(line, bool):
        return None
    return LockRef(name, str(value.get("file") or ""), line)


def _raw_deadlocks(report: Report | dict) -> object:
    """The deadlock finding's `deadlocks` evidence: of the report model, or of the JSON the page
    carries (the no-JavaScript view renders from it)."""
    if isinstance(report, Report):
        found = report.finding("deadlock")
        value = found.value("deadlocks") if found is not None else None
        return value.value if value is not None else None
    findings = report.get("findings") if isinstance(report, dict) else None
    finding = next((f for f in findings or [] if isinstance(f, dict) and f.get("id") == "deadlock"), None)
    evidence = finding.get("evidence") if isinstance(finding, dict) else None
    return evidence.get("deadlocks") if isinstance(evidence, dict) else None


def deadlocks_in(report: Report | dict) -> tuple[ReportedDeadlock, ...]:
    raw = _raw_deadlocks(report)
    out = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        threads = []
        for t in item.get("threads") or []:
            if not isinstance(t, dict):
                continue
            holds, waits = _lock(t.get("holds")), _lock(t.get("waits_for"))
            if holds is None or waits is None:
                continue
            tid = t.get("tid")
            threads.append(DeadlockedThread(str(t.get("thread") or "?"),
                                            tid if isinstance(tid, int) and not isinstance(tid, bool) else None,
                                            holds, waits, str(t.get("held_by") or "?")))
        victims = tuple(str(v.get("thread") or "?") for v in item.get("victims") or []
                        if isinstance(v, dict))
        if len(threads) >= 2:
            out.append(ReportedDeadlock(tuple(threads), victims, item.get("kind") == "await_cycle"))
    return tuple(out)


def safe(text, limit: int = MAX_NAME) -> str:
    """Untrusted text for a terminal: one line, control and bidi characters as code points."""
    s = "".join(f"[U+{ord(c):04X}]" if c in _BIDI or unicodedata.category(c) in ("Cc", "Zl", "Zp")
                else c for c in str(text))
    return s if len(s) <= limit else s[:limit - 1] + "\u2026"


def behind(count: int, among_tasks: bool = False) -> str:
    noun = "task" if among_tasks else "thread"
    return f"1 more {noun} waits behind it" if count == 1 else f"{count} more {noun}s wait behind it"


def heading(count: int) -> str:
    return "Found one deadlock:" if count == 1 else f"Found {count} deadlocks:"


def dump_lines(report: Report | dict) -> list[str]:
    """The deadlocks as a thread dump prints them; [] when the report has none."""
    deadlocks = deadlocks_in(report)
    if not deadlocks:
        return []
    lines = [heading(len(deadlocks))]
    for n, deadlock in enumerate(deadlocks):
        if n:
            lines.append("")
        for t in deadlock.threads:
            tid = f" (tid {t.tid})" if t.tid is not None else ""
            lines.append(f'  "{safe(t.thread)}"{tid}')
            lines.append(f"      holds {safe(t.holds.name)} ({safe(t.holds.where)})")
            lines.append(f"      waits for {safe(t.waits_for.name)} ({safe(t.waits_for.where)}), "
                         f'held by "{safe(t.held_by)}"')
        if deadlock.victims:
            named = ", ".join(safe(v, 40) for v in deadlock.victims[:MAX_VICTIMS_NAMED])
            more = "" if len(deadlock.victims) <= MAX_VICTIMS_NAMED else \
                f" and {len(deadlock.victims) - MAX_VICTIMS_NAMED} more"
            lines.append(f"  {behind(len(deadlock.victims), deadlock.among_tasks)}: {named}{more}")
    return lines
