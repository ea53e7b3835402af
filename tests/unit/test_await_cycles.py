"""Await cycles among asyncio tasks, found from the recorded snapshots of what each task awaits."""

from __future__ import annotations

from diagnose.collect.task_recording import (AwaitTarget, CoroFrame, TaskRecording,
                                        TaskSnapshot, TaskState)
from diagnose.vocab import AwaitKind
from diagnose.model.await_graph import await_cycles


def task(task_id: int, name: str, awaits: int | None = None, kind: AwaitKind = AwaitKind.TASK,
         line: int = 10) -> TaskState:
    target = None if kind is None else AwaitTarget(kind, awaited_task=awaits)
    return TaskState(task_id, name, (CoroFrame("handler", "app.py", line),), target)


def recording(*snapshots: tuple[TaskState, ...], step: float = 0.25) -> TaskRecording:
    return TaskRecording(pid=1, python="3.12",
                         snapshots=tuple(TaskSnapshot(i * step, s) for i, s in enumerate(snapshots)))


def test_two_tasks_awaiting_each_other_all_window_are_a_cycle_with_their_victims():
    tasks = (task(0x20, "loader", awaits=0x10, line=31), task(0x10, "refresher", awaits=0x20, line=47),
             task(0x30, "request-1", awaits=0x20), task(0x40, "request-2", awaits=0x30),
             task(0x50, "sleeper", kind=AwaitKind.SLEEP))
    cycles = await_cycles(recording(*[tasks] * 8))
    assert len(cycles) == 1
    cycle = cycles[0]
    assert [(t.name, t.site.line, t.awaits) for t in cycle.tasks] == [("refresher", 47, 0x20),
                                                                        ("loader", 31, 0x10)]
    assert cycle.victims == ("request-1", "request-2")  # request-2 waits through request-1
    assert cycle.snapshots == 8 and cycle.seconds == 1.75


def test_tasks_that_await_each_other_in_turn_are_no_deadlock():
    a_waits = (task(1, "a", awaits=2), task(2, "b", kind=AwaitKind.FUTURE))
    b_waits = (task(1, "a", kind=AwaitKind.FUTURE), task(2, "b", awaits=1))
    both = (task(1, "a", awaits=2), task(2, "b", awaits=1))  # one snapshot raced them
    assert await_cycles(recording(a_waits, b_waits, both, a_waits, b_waits, both, a_waits)) == ()


def test_a_cycle_seen_too_briefly_is_not_yet_a_deadlock():
    both = (task(1, "a", awaits=2), task(2, "b", awaits=1))
    assert await_cycles(recording(both, both)) == ()  # two snapshots, a quarter second
    assert len(await_cycles(recording(both, both, both, both, both))) == 1


def test_a_self_await_and_a_three_task_ring_are_cycles_and_a_chain_is_not():
    ring = (task(3, "c", awaits=1), task(1, "a", awaits=2), task(2, "b", awaits=3))
    chain = (task(1, "a", awaits=2), task(2, "b", awaits=3), task(3, "c", kind=AwaitKind.SLEEP))
    selfish = (task(9, "self", awaits=9),)
    assert [[t.name for t in c.tasks] for c in await_cycles(recording(*[ring] * 6))] == [["a", "b", "c"]]
    assert await_cycles(recording(*[chain] * 6)) == ()
    assert len(await_cycles(recording(*[selfish] * 6))) == 1


def test_a_recording_without_snapshots_has_no_cycles():
    assert await_cycles(TaskRecording(pid=1, python="", unreadable="asyncio tasks not readable")) == ()


def test_the_deadlock_check_reports_an_await_cycle_thread_dump_style_with_its_victims():
    from types import SimpleNamespace
    from diagnose.checks import deadlock
    from diagnose.render.deadlock_text import deadlocks_in, dump_lines
    from tests.report_data import as_report
    tasks = (task(0x20, "loader", awaits=0x10, line=31), task(0x10, "refresh", awaits=0x20, line=47),
             task(0x30, "request-1", awaits=0x10))
    analysis = SimpleNamespace(deadlocks=(), tasks=recording(*[tasks] * 8))
    finding = deadlock.run(analysis, deadlock.Settings(title="Deadlock"))
    assert finding.score == 100 and finding.predicted_gain is None
    assert "await each other" in finding.summary and "hung" in finding.summary
    assert finding.evidence["deadlocked_tasks"] == 2 and finding.evidence["victim_tasks"] == 1
    assert "task loader must not await task refresh at app.py:31" in finding.advice[0]
    report = as_report({"findings": [{"id": "deadlock", "evidence": finding.evidence}]})
    (found,) = deadlocks_in(report)
    assert [t.thread for t in found.threads] == ["task refresh", "task loader"]
    assert [v.thread for v in found.victims] == ["task request-1"]
    text = "\n".join(dump_lines(report))
    assert "task refresh" in text and "app.py:47" in text


def test_the_await_cycle_finding_names_the_await_to_remove_as_its_fix_knob():
    from types import SimpleNamespace
    from diagnose.checks import deadlock
    ring = (task(0x1, "a", awaits=0x2, line=5), task(0x2, "b", awaits=0x3, line=6),
            task(0x3, "c", awaits=0x1, line=7))
    finding = deadlock.run(SimpleNamespace(deadlocks=(), tasks=recording(*[ring] * 6)),
                           deadlock.Settings(title="Deadlock"))
    [fix] = finding.fixes
    assert fix.knob == "break_await" and isinstance(fix.value, str)
    # The same await the first advice tells to remove: "task X must not await task Y".
    waiter, awaited = fix.value.split(" -> ")
    assert f"{waiter} must not await {awaited}" in finding.advice[0]
