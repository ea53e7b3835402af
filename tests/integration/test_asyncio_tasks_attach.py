"""`diagnose attach`'s capture reads the asyncio tasks of the process it samples, beside py-spy,
and leaves them out when asked (--no-async-tasks)."""

from __future__ import annotations

import sys

import pytest

from diagnose.collect.capture import AttachOptions, capture
from diagnose.vocab import AwaitKind
from tests.integration.conftest import requires_ptrace, running

SERVICE = r'''
import asyncio, os

async def request(sem):
    async with sem:  # the guarded call
        await asyncio.sleep(3600)

async def main():
    sem = asyncio.Semaphore(2)
    keep = [asyncio.create_task(request(sem), name=f"request-{i}") for i in range(6)]
    await asyncio.sleep(0.05)
    print(f"READY pid={os.getpid()}", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
'''


@requires_ptrace
@pytest.mark.parametrize("on", [True, False])
def test_attach_records_the_tasks_of_the_sampled_process_unless_turned_off(tmp_path, on):
    with running([sys.executable, "-c", SERVICE]) as pid:
        cap = capture(pid, tmp_path, AttachOptions(duration=2.0, async_tasks=on))
        cap.cleanup()
    if not on:
        assert cap.task_recordings == {}
        return
    recording = cap.task_recordings[pid]
    assert recording.unreadable == "" and recording.reads >= 2, recording
    last = recording.snapshots[-1]
    waiting = [t for t in last.tasks if t.waits_on and t.waits_on.kind is AwaitKind.SEMAPHORE]
    assert len(waiting) == 4
    assert {t.waits_on.permits for t in waiting if t.waits_on} == {0}
    assert {t.waits_on.waiters for t in waiting if t.waits_on} == {4}
    assert recording.read_seconds < cap.sampling.duration_s
