"""Await cycles among asyncio tasks: a deadlock no thread's stack shows.

Task A awaits task B (`await b`, `await asyncio.gather(b)`, a future B resolves) while B awaits
A: both are suspended for good, the event loop idles, and every task that awaits either of them
waits with them. The reader (collect/asyncio_tasks) records, per snapshot, what each task
awaits; `AwaitTarget.awaited_task` names the awaited task for the TASK kind. A cycle counts when
the same tasks wait on each other, the same way, in every snapshot of the window that holds
them: one snapshot could have raced a task that was about to be woken.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnose.collect.task_recording import CoroFrame, TaskRecording, TaskState
from diagnose.vocab import AwaitKind

# A cycle seen in fewer snapshots than this (over less than MIN_SECONDS) is not yet a deadlock:
# tasks that await each other in turn (a ping-pong over two futures) pass through it.
MIN_SNAPSHOTS = 3
MIN_SECONDS = 1.0
MAX_TASKS = 100_000  # bound on the graph walked per snapshot (the reader bounds it too)


@dataclass(frozen=True)
class CycleTask:
    task_id: int
    name: str
    site: CoroFrame | None  # the innermost suspended frame: the await that never returns
    awaits: int             # task_id of the task it awaits (the next one in the cycle)


@dataclass(frozen=True)
class AwaitCycle:
    tasks: tuple[CycleTask, ...]  # in await order, starting from the lowest task_id
    victims: tuple[str, ...]      # names of tasks whose awaits lead into the cycle
    snapshots: int                # snapshots in which the whole cycle was seen
    seconds: float                # from the first to the last of them


def _edges(snapshot_tasks: tuple[TaskState, ...]) -> dict[int, int]:
    edges = {}
    for task in snapshot_tasks[:MAX_TASKS]:
        target = task.waits_on
        if (not task.done and target is not None and target.kind == AwaitKind.TASK
                and target.awaited_task is not None):
            edges[task.task_id] = target.awaited_task
    return edges


def _cycles(edges: dict[int, int]) -> set[tuple[int, ...]]:
    """Every cycle of a graph where each node has at most one outgoing edge, each as the tuple
    of its nodes rotated to start at the smallest id."""
    found: set[tuple[int, ...]] = set()
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    for start in edges:
        path: list[int] = []
        node: int | None = start
        while node is not None and node not in state and len(path) <= len(edges):
            state[node] = 1
            path.append(node)
            node = edges.get(node)
        if node is not None and state.get(node) == 1:
            cycle = path[path.index(node):]
            i = cycle.index(min(cycle))
            found.add(tuple(cycle[i:] + cycle[:i]))
        for visited in path:
            state[visited] = 2
    return found


def _reaches(task: TaskState, members: set[int], tasks: dict[int, TaskState]) -> bool:
    """Does `task`'s chain of awaited tasks lead into `members`? (bounded, cycle-guarded)"""
    seen: set[int] = set()
    current: TaskState | None = task
    while current is not None and current.task_id not in seen and len(seen) < MAX_TASKS:
        seen.add(current.task_id)
        target = current.waits_on
        if target is None or target.kind != AwaitKind.TASK or target.awaited_task is None:
            return False
        if target.awaited_task in members:
            return True
        current = tasks.get(target.awaited_task)
    return False


def await_cycles(recording: TaskRecording) -> tuple[AwaitCycle, ...]:
    """The await cycles present in every snapshot that holds their tasks, over at least
    MIN_SNAPSHOTS snapshots and MIN_SECONDS."""
    seen: dict[tuple[int, ...], list[float]] = {}
    broken: set[tuple[int, ...]] = set()
    last: dict[int, TaskState] = {}
    for snapshot in recording.snapshots:
        edges = _edges(snapshot.tasks)
        present = {t.task_id for t in snapshot.tasks}
        for cycle in _cycles(edges):
            seen.setdefault(cycle, []).append(snapshot.at)
        for cycle in seen:
            # all its tasks alive in this snapshot but not waiting on each other: it moved
            if all(t in present for t in cycle) and any(edges.get(a) != b for a, b in
                                                        zip(cycle, cycle[1:] + cycle[:1])):
                broken.add(cycle)
        for task in snapshot.tasks[:MAX_TASKS]:
            last[task.task_id] = task
    out = []
    for cycle, times in seen.items():
        if cycle in broken or len(times) < MIN_SNAPSHOTS or times[-1] - times[0] < MIN_SECONDS:
            continue
        members = set(cycle)
        tasks = tuple(CycleTask(t, last[t].name, last[t].frames[-1] if last[t].frames else None,
                                nxt) for t, nxt in zip(cycle, cycle[1:] + cycle[:1]))
        victims = sorted(task.name for task in last.values()
                         if task.task_id not in members and _reaches(task, members, last))
        out.append(AwaitCycle(tasks, tuple(victims), len(times), times[-1] - times[0]))
    return tuple(sorted(out, key=lambda c: (-len(c.victims), c.tasks[0].task_id)))
