"""A report's deadlocks read back, and printed like a JVM thread dump ("Found one deadlock:").

`deadlocks_in(report)` reads the deadlock finding's `deadlocks` evidence (checks/deadlock.py) of
the report model into the types the check builds (report/model/deadlocks.py), tolerating a
hand-edited or older report (any entry not of the evidence's shape is left out).
`dump_lines(report)` prints them for a terminal and for the report page's no-JavaScript view
(render/html.py is given the lines); the Markdown summary and the page's script print the same
fields in their own markup. Thread names, lock names and files come from the profiled process:
here control and bidirectional characters are shown as code points, so a name cannot move the
terminal's cursor or reorder the line.
"""

from __future__ import annotations

from dataclasses import replace

from diagnose.render.text_safety import show_invisible
from diagnose.report.model import Report
from diagnose.report.model.deadlocks import DeadlockedThread, ReportedDeadlock, ReportedLock, read_deadlocks

MAX_NAME = 120
MAX_VICTIMS_NAMED = 8


def lock_where(lock: ReportedLock) -> str:
    """`dir/file.py:line`: the file's last two parts, enough to find it in the service's tree."""
    parts = lock.file.replace("\\", "/").split("/")
    return f"{'/'.join(parts[-2:]) if len(parts) > 1 else lock.file}:{lock.line}"


def _printable(thread: DeadlockedThread) -> bool:
    # a knot's thread that holds nothing nameable (model/knots.py) has no line to print
    return bool(thread.holds.shown and thread.waits_for.shown)


def deadlocks_in(report: Report) -> tuple[ReportedDeadlock, ...]:
    """The report's deadlocks with the threads a dump can print, each a cycle of two or more."""
    found = report.finding("deadlock")
    value = found.value("deadlocks") if found is not None else None
    out = []
    for cycle in read_deadlocks(value.value if value is not None else None):
        threads = tuple(filter(_printable, cycle.threads))
        if len(threads) >= 2:
            out.append(replace(cycle, threads=threads))
    return tuple(out)


def safe(text: object, limit: int = MAX_NAME) -> str:
    """Untrusted text for a terminal: one line, control, bidi and invisible characters as code
    points (render/text_safety.py)."""
    s = show_invisible(text)
    return s if len(s) <= limit else s[:limit - 1] + "\u2026"


def behind(count: int, among_tasks: bool = False) -> str:
    noun = "task" if among_tasks else "thread"
    return f"1 more {noun} waits behind it" if count == 1 else f"{count} more {noun}s wait behind it"


def heading(count: int) -> str:
    return "Found one deadlock:" if count == 1 else f"Found {count} deadlocks:"


def dump_lines(report: Report) -> list[str]:
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
            lines.append(f"      holds {safe(t.holds.shown)} ({safe(lock_where(t.holds))})")
            lines.append(f"      waits for {safe(t.waits_for.shown)} ({safe(lock_where(t.waits_for))}), "
                         f'held by "{safe(t.held_by)}"')
        if deadlock.victims:
            named = ", ".join(safe(v.thread, 40) for v in deadlock.victims[:MAX_VICTIMS_NAMED])
            more = "" if len(deadlock.victims) <= MAX_VICTIMS_NAMED else \
                f" and {len(deadlock.victims) - MAX_VICTIMS_NAMED} more"
            lines.append(f"  {behind(len(deadlock.victims), deadlock.among_tasks)}: {named}{more}")
    return lines
