"""The deadlock finding's `deadlocks` evidence (report/model/deadlocks.py): each kind of cycle is
written with the keys docs/report-data.md lists, in that order, and reads back as built."""

from __future__ import annotations

import json
from dataclasses import replace

from diagnose.checks.measurements import written
from diagnose.checks.deadlock import DeadlockEvidence
from diagnose.report.model.deadlocks import (CycleKind, DeadlockedThread, DeadlockVictim,
                                              ReportedDeadlock, ReportedLock, read_deadlocks)

LOCK = ReportedLock(name="self._lock", qualified="Cache._lock", file="/srv/app/cache.py", line=50,
                    function="Cache.get", taken="with")
THREAD = DeadlockedThread(thread="request-0", tid=11, holds=LOCK, waits_for=LOCK, held_by="request-1")
VICTIM = DeadlockVictim(thread="request-2", tid=13, waits_for=LOCK, held_by="request-0")

LOCKS = ReportedDeadlock(threads=(THREAD,), victims=(VICTIM,), lock_order=("Cache._lock",))
KNOT = ReportedDeadlock(threads=(replace(THREAD, pid=7),), victims=(replace(VICTIM, pid=7),),
                        kind=CycleKind.KNOT)
TASKS = ReportedDeadlock(threads=(replace(THREAD, tid=None),), victims=(DeadlockVictim(thread="task c"),),
                         kind=CycleKind.AWAIT_CYCLE)


def test_each_kind_of_cycle_is_written_with_its_own_keys_in_order():
    evidence = written(DeadlockEvidence(deadlocked_threads=1, victim_threads=1,
                                        deadlocks=(LOCKS, KNOT, TASKS)))
    locks, knot, tasks = evidence["deadlocks"]
    assert list(locks) == ["threads", "victims", "lock_order"]
    assert list(locks["threads"][0]) == ["thread", "tid", "holds", "waits_for", "held_by"]
    assert list(locks["threads"][0]["holds"]) == ["name", "qualified", "file", "line", "function", "taken"]
    assert list(locks["victims"][0]) == ["thread", "tid", "waits_for", "held_by"]
    assert list(knot) == ["threads", "victims", "lock_order", "kind"] and knot["kind"] == "knot"
    assert list(knot["threads"][0]) == ["thread", "tid", "pid", "holds", "waits_for", "held_by"]
    assert list(knot["victims"][0]) == ["thread", "tid", "pid", "waits_for", "held_by"]
    assert tasks["kind"] == "await_cycle" and tasks["lock_order"] == []
    assert tasks["threads"][0]["tid"] is None and tasks["victims"] == [{"thread": "task c", "tid": None}]


def test_the_evidence_reads_back_as_built():
    evidence = written(DeadlockEvidence(deadlocked_threads=1, victim_threads=1,
                                        deadlocks=(LOCKS, KNOT, TASKS)))
    assert read_deadlocks(json.loads(json.dumps(evidence["deadlocks"]))) == (LOCKS, KNOT, TASKS)
