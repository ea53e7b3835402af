"""A deadlock as the report carries it: the deadlock finding's `deadlocks` evidence
(docs/report-data.md), one ReportedDeadlock per cycle, thread by thread.

checks/deadlock.py builds these and the evidence conversion (checks/measurements.written)
writes them with the report's codec; the renderers (render/deadlock_text.py, the Markdown
summary) read them back with `read_deadlocks`. The fields are declared in the order the keys
are written, and a key only some kinds of cycle have (a knot's `pid`, a cycle's `kind`) is left
out when None (OPTIONAL), so each kind is written with the keys it has always had.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TypeVar

from diagnose.report.model.codec import OPTIONAL, JsonValue, NotAReport, decode


class CycleKind(StrEnum):
    """What waits in the cycle, when not threads on locks (a lock deadlock writes no kind)."""

    AWAIT_CYCLE = "await_cycle"  # asyncio tasks awaiting each other
    KNOT = "knot"  # threads waiting on any resources: futures, queues, pipes, child processes


@dataclass(frozen=True, kw_only=True)
class ReportedLock:
    """What a thread holds or waits for, and the line where it took it or waits. An await
    cycle's task "holds" its own result; a knot's thread holds what the thread before it waits
    for (model/knots.py)."""

    name: str  # as the source writes it (`self._lock`)
    qualified: str  # as resolved (`FeatureCache._lock`): what tells locks apart
    file: str
    line: int
    function: str
    # "with" or "acquire" for a lock; "await" for a task; a knot's kind of wait (model/knots.Resource)
    taken: str

    @property
    def shown(self) -> str:
        """The name a reader is shown: as resolved, else as written ("" when it names nothing)."""
        return self.qualified or self.name


@dataclass(frozen=True, kw_only=True)
class DeadlockedThread:
    """A thread (or task) of the cycle: it holds what the one before it waits for and waits for
    what `held_by` holds."""

    thread: str
    tid: int | None  # None for an asyncio task
    pid: int | None = field(default=None, metadata=OPTIONAL)  # a knot's: the thread's process
    holds: ReportedLock
    waits_for: ReportedLock
    held_by: str


@dataclass(frozen=True, kw_only=True)
class DeadlockVictim:
    """A thread (or task) blocked behind the cycle, not part of it."""

    thread: str
    tid: int | None = None
    pid: int | None = field(default=None, metadata=OPTIONAL)  # a knot's, as its threads'
    # what it waits for and who holds that; a task awaiting the cycle has neither
    waits_for: ReportedLock | None = field(default=None, metadata=OPTIONAL)
    held_by: str | None = field(default=None, metadata=OPTIONAL)


@dataclass(frozen=True, kw_only=True)
class ReportedDeadlock:
    """One cycle: its threads (or tasks), each waiting for what the next holds, and those blocked
    behind it."""

    # defaulted: read_deadlocks decodes a cycle's own keys first, its entries one by one after
    threads: tuple[DeadlockedThread, ...] = ()
    victims: tuple[DeadlockVictim, ...] = ()
    lock_order: tuple[str, ...] = ()  # a lock deadlock's: the order its advice names; else empty
    kind: CycleKind | None = field(default=None, metadata=OPTIONAL)

    @property
    def among_tasks(self) -> bool:
        return self.kind == CycleKind.AWAIT_CYCLE


E = TypeVar("E")
# The entries read one by one (read_deadlocks): a malformed thread leaves the others printable.
_ONE_BY_ONE = ("threads", "victims")


def _each(cls: type[E], values: JsonValue) -> tuple[E, ...]:
    """Each value read as `cls`; one not of its shape is left out."""
    out = []
    for value in values if isinstance(values, list) else ():
        try:
            out.append(decode(cls, value))
        except NotAReport:
            continue
    return tuple(out)


def read_deadlocks(raw: JsonValue) -> tuple[ReportedDeadlock, ...]:
    """The `deadlocks` evidence of a report, which may be hand-edited or older: each thread and
    victim read on its own, so one not of its shape is left out and the rest of its cycle still
    prints; a cycle whose own keys are not of their shape is left out."""
    out = []
    for entry in raw if isinstance(raw, list) else ():
        if not isinstance(entry, dict):
            continue
        try:
            cycle = decode(ReportedDeadlock, {k: v for k, v in entry.items() if k not in _ONE_BY_ONE})
        except NotAReport:
            continue
        out.append(replace(cycle, threads=_each(DeadlockedThread, entry.get("threads")),
                           victims=_each(DeadlockVictim, entry.get("victims"))))
    return tuple(out)
