"""A report's deadlocks read back, and printed like a JVM thread dump ("Found one deadlock:").

`deadlocks_in(report)` reads the deadlock finding's `deadlocks` evidence (checks/deadlock.py) of
the report model into frozen types, with the report's codec, tolerating a hand-edited or older
report (any entry not of the evidence's shape is left out). `dump_lines(report)` prints them for
a terminal and for the report page's no-JavaScript view (render/html.py is given the lines); the
Markdown summary and the page's script print the same fields in their own markup. Thread names,
lock names and files come from the profiled process: here control and bidirectional characters
are shown as code points, so a name cannot move the terminal's cursor or reorder the line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from diagnose.render.text_safety import show_invisible
from diagnose.report.model import Report
from diagnose.report.model.codec import JsonValue, NotAReport, decode

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


# The evidence as checks/deadlock.py writes it (deadlock_data, await_cycle_data): the shape the
# codec reads each entry against. Keys the printout does not need are not declared.

@dataclass(frozen=True)
class _LockEvidence:
    line: int
    name: str | None = None
    qualified: str | None = None  # `FeatureCache._lock`: preferred to the name as written
    file: str | None = None


@dataclass(frozen=True)
class _ThreadEvidence:
    holds: _LockEvidence
    waits_for: _LockEvidence
    thread: str | None = None
    tid: int | None = None
    held_by: str | None = None


@dataclass(frozen=True)
class _VictimEvidence:
    thread: str | None = None


@dataclass(frozen=True)
class _DeadlockEvidence:
    # Entries decoded one by one (_each): a malformed thread leaves the others printable.
    threads: tuple[JsonValue, ...] | None = None
    victims: tuple[JsonValue, ...] | None = None
    kind: str | None = None  # "await_cycle": asyncio tasks, not threads and locks


AWAIT_CYCLE = "await_cycle"
E = TypeVar("E")


def _each(cls: type[E], values: Iterable[JsonValue]) -> list[E]:
    """Each value read as `cls`; one not of its shape is left out."""
    out = []
    for value in values:
        try:
            out.append(decode(cls, value))
        except NotAReport:
            continue
    return out


def _lock(lock: _LockEvidence) -> LockRef | None:
    name = lock.qualified or lock.name
    return LockRef(name, lock.file or "", lock.line) if name else None


def _thread(t: _ThreadEvidence) -> DeadlockedThread | None:
    holds, waits = _lock(t.holds), _lock(t.waits_for)
    if holds is None or waits is None:
        return None
    return DeadlockedThread(t.thread or "?", t.tid, holds, waits, t.held_by or "?")


def deadlocks_in(report: Report) -> tuple[ReportedDeadlock, ...]:
    found = report.finding("deadlock")
    value = found.value("deadlocks") if found is not None else None
    raw = value.value if value is not None else None
    out = []
    for item in _each(_DeadlockEvidence, raw if isinstance(raw, list) else ()):
        threads = tuple(t for t in map(_thread, _each(_ThreadEvidence, item.threads or ()))
                        if t is not None)
        victims = tuple(v.thread or "?" for v in _each(_VictimEvidence, item.victims or ()))
        if len(threads) >= 2:
            out.append(ReportedDeadlock(threads, victims, item.kind == AWAIT_CYCLE))
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
            lines.append(f"      holds {safe(t.holds.name)} ({safe(t.holds.where)})")
            lines.append(f"      waits for {safe(t.waits_for.name)} ({safe(t.waits_for.where)}), "
                         f'held by "{safe(t.held_by)}"')
        if deadlock.victims:
            named = ", ".join(safe(v, 40) for v in deadlock.victims[:MAX_VICTIMS_NAMED])
            more = "" if len(deadlock.victims) <= MAX_VICTIMS_NAMED else \
                f" and {len(deadlock.victims) - MAX_VICTIMS_NAMED} more"
            lines.append(f"  {behind(len(deadlock.victims), deadlock.among_tasks)}: {named}{more}")
    return lines
