"""The asyncio task reader against live child interpreters whose tasks the test knows (names,
await lines, primitives, permits, waiters, who awaits whom), and against garbage: a process
that is not Python, one that exits mid-read, one that never imported asyncio, torn memory."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from diagnose.collect.asyncio_tasks import layout_probe, read_tasks_once
from diagnose.collect.asyncio_tasks.layout import generated_layout
from diagnose.collect.asyncio_tasks.linetable import line_of
from diagnose.collect.asyncio_tasks.objects import ObjectReader
from diagnose.collect.asyncio_tasks.remote import RemoteMemory, RemoteReadError
from diagnose.collect.asyncio_tasks.sampler import AsyncioTaskSampler
from diagnose.collect.task_recording import TaskRecording, TaskState
from diagnose.vocab import AwaitKind
from tests.integration import pythons
from tests.ready import parse_ready

# The known program. Marker comments name the await sites the test expects to see.
TARGET = r'''
import asyncio, json, os, sys

async def hold(sem, ev):
    async with sem:
        await ev.wait()  # SITE-EVENT

async def on_sem(sem):
    async with sem:  # SITE-SEM
        pass

async def on_lock(lock):
    async with lock:  # SITE-LOCK
        pass

async def on_queue(queue):
    return await queue.get()  # SITE-QUEUE

async def on_task(other):
    await other  # SITE-TASK

async def on_future(fut):
    await fut  # SITE-FUTURE

async def on_condition(cond):
    async with cond:
        await cond.wait()  # SITE-CONDITION

async def on_stream(reader):
    return await reader.read(100)  # SITE-IO

async def main():
    sem, lock, queue, ev = asyncio.Semaphore(2), asyncio.Lock(), asyncio.Queue(), asyncio.Event()
    fut = asyncio.get_running_loop().create_future()
    await lock.acquire()
    for _ in range(64):  # warm: 3.11 quickens RESUME in place once a code object runs often
        await on_sem(asyncio.Semaphore(1))
    keep = [asyncio.create_task(hold(sem, ev), name=f"holder-{i}") for i in range(2)]
    keep += [asyncio.create_task(on_sem(sem), name=f"sem-waiter-{i}") for i in range(3)]
    keep.append(asyncio.create_task(on_lock(lock), name="lock-waiter"))
    keep.append(asyncio.create_task(on_queue(queue), name="queue-getter"))
    sleeper = asyncio.create_task(asyncio.sleep(3600), name="sleeper")
    keep.append(asyncio.create_task(on_task(sleeper), name="task-awaiter"))
    keep.append(asyncio.create_task(on_future(fut), name="future-awaiter"))
    cond = asyncio.Condition()
    keep.append(asyncio.create_task(on_condition(cond), name="condition-waiter"))
    peers = []  # the server side of the connection, kept open and silent
    server = await asyncio.start_server(lambda r, w: peers.append(w), "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
    keep.append(asyncio.create_task(on_stream(reader), name="stream-reader"))
    asyncio.current_task().set_name("main-task")
    await asyncio.sleep(0.05)
    print("IDS " + json.dumps({"sem": id(sem), "lock": id(lock), "queue": id(queue),
                               "event": id(ev), "future": id(fut), "sleeper": id(sleeper),
                               "condition": id(cond)}))
    # READY once this task is suspended too: a read must not race its last lines
    asyncio.get_running_loop().call_soon(print, f"READY pid={os.getpid()}")
    sys.stdout.flush()
    await asyncio.sleep(3600)

sys.stdout.reconfigure(line_buffering=True)
asyncio.run(main())
'''
SITES = {marker: number for number, text in enumerate(TARGET.splitlines(), start=1)
         for marker in ["SITE-EVENT", "SITE-SEM", "SITE-LOCK", "SITE-QUEUE", "SITE-TASK",
                        "SITE-FUTURE", "SITE-CONDITION", "SITE-IO"] if f"# {marker}" in text}
VERSIONS = ["3.11", "3.12", "3.13"]
QUIET = "import os, time; print(f'READY pid={os.getpid()}', flush=True); time.sleep(300)"


def _python(minor: str) -> str:
    found = pythons.find_python(minor)
    if found is None:
        pytest.skip(f"CPython {minor} is not installed here (pyenv versions/{minor}.*)")
    return found.executable


def _start(python: str, source: str) -> tuple[subprocess.Popen, str]:
    """The child, once READY; and the JSON of its IDS line, if it printed one."""
    proc = subprocess.Popen([python, "-c", source], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ids = "{}"
    for line in proc.stdout:
        if line.startswith("IDS "):
            ids = line[4:]
        elif parse_ready(line.strip()) is not None:
            return proc, ids
    proc.kill()
    proc.wait()
    raise AssertionError("the child exited before READY")


def _stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


@pytest.fixture(scope="module", params=VERSIONS)
def known(request) -> tuple[str, TaskRecording, dict]:
    """One read of the known program on each CPython: (minor, recording, ids it printed)."""
    proc, ids = _start(_python(request.param), TARGET)
    try:
        return request.param, read_tasks_once(proc.pid), json.loads(ids)
    finally:
        _stop(proc)


def _by_name(recording: TaskRecording) -> dict[str, TaskState]:
    assert len(recording.snapshots) == 1, recording
    return {task.name: task for task in recording.snapshots[0].tasks}


def test_every_task_of_the_known_program_is_read_by_name(known):
    minor, recording, _ = known
    assert recording.python == minor
    assert recording.unreadable == "" and recording.failed_reads == 0 and recording.reads == 1
    assert not recording.snapshots[0].torn
    assert set(_by_name(recording)) == {
        "holder-0", "holder-1", "sem-waiter-0", "sem-waiter-1", "sem-waiter-2", "lock-waiter",
        "queue-getter", "sleeper", "task-awaiter", "future-awaiter", "main-task",
        "condition-waiter", "stream-reader"}


def test_semaphore_waiters_show_the_semaphore_its_free_permits_and_queue_at_the_await_site(known):
    _, recording, ids = known
    for i in range(3):
        task = _by_name(recording)[f"sem-waiter-{i}"]
        assert task.waits_on is not None and task.waits_on.kind is AwaitKind.SEMAPHORE
        assert task.waits_on.identity == ids["sem"]
        assert task.waits_on.permits == 0   # Semaphore(2), both held
        assert task.waits_on.waiters == 3   # the three sem-waiters
        assert (task.frames[0].function, task.frames[0].line) == ("on_sem", SITES["SITE-SEM"])
        assert task.frames[-1].function == "Semaphore.acquire"
        assert task.frames[-1].file.endswith("asyncio/locks.py")
        assert task.task_id != 0 and not task.done


def test_lock_queue_and_event_waits_are_named_with_their_primitive(known):
    _, recording, ids = known
    tasks = _by_name(recording)
    expected = {"lock-waiter": (AwaitKind.LOCK, "lock", 1, "on_lock", "SITE-LOCK"),
                "queue-getter": (AwaitKind.QUEUE_GET, "queue", 1, "on_queue", "SITE-QUEUE"),
                "holder-0": (AwaitKind.EVENT, "event", 2, "hold", "SITE-EVENT"),
                "condition-waiter": (AwaitKind.CONDITION, "condition", 1, "on_condition",
                                     "SITE-CONDITION")}
    for name, (kind, primitive, waiters, function, site) in expected.items():
        task = tasks[name]
        assert task.waits_on is not None, name
        assert (task.waits_on.kind, task.waits_on.identity, task.waits_on.waiters) == (
            kind, ids[primitive], waiters), name
        assert task.waits_on.permits is None
        assert (task.frames[0].function, task.frames[0].line) == (function, SITES[site])


def test_a_task_awaiting_another_names_that_task_and_a_plain_future_is_a_future(known):
    _, recording, ids = known
    tasks = _by_name(recording)
    awaiter = tasks["task-awaiter"]
    assert awaiter.waits_on is not None and awaiter.waits_on.kind is AwaitKind.TASK
    assert awaiter.waits_on.awaited_task == ids["sleeper"] == tasks["sleeper"].task_id
    assert (awaiter.frames[-1].function, awaiter.frames[-1].line) == ("on_task",
                                                                       SITES["SITE-TASK"])
    fut = tasks["future-awaiter"]
    assert fut.waits_on is not None and fut.waits_on.kind is AwaitKind.FUTURE
    assert fut.waits_on.identity == ids["future"]
    assert (fut.frames[-1].function, fut.frames[-1].line) == ("on_future", SITES["SITE-FUTURE"])


def test_a_task_reading_a_stream_waits_on_io(known):
    _, recording, _ = known
    task = _by_name(recording)["stream-reader"]
    assert task.waits_on is not None and task.waits_on.kind is AwaitKind.IO
    assert (task.frames[0].function, task.frames[0].line) == ("on_stream", SITES["SITE-IO"])
    assert task.frames[-1].file.endswith("asyncio/streams.py")


def test_sleeping_tasks_are_sleep_down_to_asyncio_sleep(known):
    _, recording, _ = known
    tasks = _by_name(recording)
    for name in ("sleeper", "main-task"):
        assert tasks[name].waits_on is not None and tasks[name].waits_on.kind is AwaitKind.SLEEP
        assert tasks[name].frames[-1].function == "sleep"
        assert tasks[name].frames[-1].file.endswith("asyncio/tasks.py")
    assert tasks["main-task"].frames[0].function == "main"


def test_the_sampler_reads_a_few_times_a_second_and_counts_its_own_cost():
    proc, _ = _start(_python("3.12"), TARGET)
    try:
        began = time.monotonic()
        sampler = AsyncioTaskSampler(proc.pid, rate=10).start()
        while sampler.recording().reads < 3 and time.monotonic() - began < 120:  # a busy box
            time.sleep(0.1)
        recording = sampler.stop()
        wall = time.monotonic() - began
    finally:
        _stop(proc)
    assert recording.reads >= 3 and len(recording.snapshots) == recording.reads
    assert all(len(s.tasks) == 13 for s in recording.snapshots)
    assert [s.at for s in recording.snapshots] == sorted(s.at for s in recording.snapshots)
    assert 0 < recording.read_seconds < wall


def test_a_process_that_is_not_python_is_a_note_not_an_error():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.1)
        recording = read_tasks_once(proc.pid)
    finally:
        _stop(proc)
    assert recording.unreadable.startswith("asyncio tasks not readable on this interpreter: ")
    assert "_PyRuntime" in recording.unreadable
    assert recording.snapshots == () and recording.python == ""


def test_an_unsupported_cpython_is_named_in_the_note():
    proc, _ = _start(_python("3.10"), QUIET)
    try:
        recording = read_tasks_once(proc.pid)
    finally:
        _stop(proc)
    assert recording.python == "3.10", recording
    assert recording.unreadable.startswith("asyncio tasks not readable on CPython 3.10: ")


def test_a_python_process_without_asyncio_has_no_tasks_and_says_so():
    proc, _ = _start(_python("3.12"), QUIET)
    try:
        recording = read_tasks_once(proc.pid)
    finally:
        _stop(proc)
    assert recording.unreadable == "" and recording.snapshots == ()
    assert any("has not imported asyncio" in note for note in recording.notes)


def test_a_process_that_exits_mid_window_ends_the_recording_with_a_note():
    proc, _ = _start(_python("3.13"), TARGET)
    sampler = AsyncioTaskSampler(proc.pid, rate=20).start()
    deadline = time.monotonic() + 120  # a loaded machine
    while len(sampler.recording().snapshots) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(0.3)
    recording = sampler.stop()
    assert len(recording.snapshots) >= 2  # the reads before the exit are kept
    assert recording.failed_reads >= 1
    assert any("exited" in note for note in recording.notes), recording.notes


def test_reads_of_a_dead_process_or_a_garbage_address_raise_only_remote_read_errors():
    proc, _ = _start(_python("3.12"), QUIET)
    mem = RemoteMemory(proc.pid)
    reader = ObjectReader(mem, generated_layout(12))
    with pytest.raises(RemoteReadError):
        reader.read_str(0x10)                  # the null page
    with pytest.raises(RemoteReadError):
        reader.type_name_of(0x7FFF_FFFF_0000)  # unmapped
    with pytest.raises(RemoteReadError):
        mem.read(0x600000, 1 << 30)            # a garbage length is refused, not attempted
    _stop(proc)
    with pytest.raises(RemoteReadError):
        mem.read(0x600000, 8)                  # gone
    mem.close()


class _FakeMemory(RemoteMemory):
    """Memory that holds only the given bytes, as a torn target would show them."""

    def __init__(self, blocks: dict[int, bytes]):
        self.pid, self.reads, self._fd, self.blocks = 0, 0, -1, blocks

    def read(self, address: int, size: int) -> bytes:
        for start, data in self.blocks.items():
            if start <= address and address + size <= start + len(data):
                return data[address - start:address - start + size]
        raise RemoteReadError(f"unmapped {address:#x}")


def test_a_torn_set_or_dict_with_a_huge_size_is_refused_before_any_loop():
    lay = generated_layout(12)
    header = bytearray(64)
    header[lay.set_mask:lay.set_mask + 8] = (1 << 40).to_bytes(8, "little")  # garbage mask
    reader = ObjectReader(_FakeMemory({0x10000: bytes(header)}), lay)
    with pytest.raises(RemoteReadError, match="too large"):
        list(reader.set_items(0x10000, 100))
    keys = bytearray(64)
    keys[lay.dictkeys_nentries:lay.dictkeys_nentries + 8] = (1 << 40).to_bytes(8, "little")
    dict_head = bytearray(64)
    dict_head[lay.dict_ma_keys:lay.dict_ma_keys + 8] = (0x20000).to_bytes(8, "little")
    reader = ObjectReader(_FakeMemory({0x10000: bytes(dict_head), 0x20000: bytes(keys)}), lay)
    with pytest.raises(RemoteReadError, match="too large"):
        list(reader.dict_items(0x10000))


def test_the_location_table_decoder_agrees_with_co_lines():
    import asyncio.locks
    import json as some_module
    checked = 0
    for module in (asyncio.locks, some_module.decoder):
        for value in vars(module).values():
            functions = [value] + [v for v in vars(value).values()] if isinstance(value, type) \
                else [value]
            for function in functions:
                code = getattr(function, "__code__", None)
                if code is None:
                    continue
                for start, end, line in code.co_lines():
                    for offset in range(start, end, 2):
                        assert line_of(code.co_linetable, code.co_firstlineno, offset // 2) == (
                            -1 if line is None else line)
                        checked += 1
    assert checked > 1000


def test_the_task_layout_is_calibrated_once_per_interpreter_then_read_from_the_cache(
        tmp_path, monkeypatch):
    from diagnose.collect.asyncio_tasks.binary import find_interpreter
    monkeypatch.setattr(layout_probe, "CACHE_FILE", tmp_path / "layout.json")
    monkeypatch.setattr(layout_probe, "_memo", {})
    proc, _ = _start(_python("3.12"), QUIET)
    try:
        interp = find_interpreter(proc.pid)
        first = layout_probe.task_layout(interp, proc.pid)
        assert (tmp_path / "layout.json").exists()
        monkeypatch.setattr(layout_probe, "_memo", {})

        def no_probe(*_args):
            raise AssertionError("calibrated again despite the cache")
        monkeypatch.setattr(layout_probe, "_calibrate", no_probe)
        assert layout_probe.task_layout(interp, proc.pid) == first
    finally:
        _stop(proc)
    # the fields are distinct pointers after the future's head, the state an int before them
    assert len({first.fut_waiter, first.task_coro, first.task_name}) == 3
    assert 16 <= first.fut_state < first.fut_waiter


def test_the_attach_option_is_on_by_default_and_documented():
    from click.testing import CliRunner

    from diagnose.cli.attach import attach
    from diagnose.collect.capture import AttachOptions
    assert AttachOptions().async_tasks is True
    help_text = CliRunner().invoke(attach, ["--help"]).output
    assert "--no-async-tasks" in help_text


def test_generated_offsets_come_with_the_script_that_generated_them():
    script = Path(__file__).resolve().parents[2] / "scripts" / "gen_cpython_offsets.py"
    assert script.exists()
    for minor in (11, 12, 13):
        lay = generated_layout(minor)
        assert lay.gen_iframe > lay.gen_frame_state  # the frame is embedded after the state


EAGER = r'''
import asyncio, os, sys

async def on_sem(sem):
    async with sem:
        await asyncio.sleep(3600)

async def main():
    asyncio.get_running_loop().set_task_factory(asyncio.eager_task_factory)
    sem = asyncio.Semaphore(1)
    keep = [asyncio.create_task(on_sem(sem), name=f"eager-{i}") for i in range(3)]
    await asyncio.sleep(0.05)
    asyncio.get_running_loop().call_soon(print, f"READY pid={os.getpid()}")
    await asyncio.sleep(3600)

sys.stdout.reconfigure(line_buffering=True)
asyncio.run(main())
'''


@pytest.mark.parametrize("minor", ["3.12", "3.13"])
def test_eager_tasks_are_read_and_the_eager_sets_deleted_slots_are_not_tasks(minor):
    proc, _ = _start(_python(minor), EAGER)
    try:
        recording = read_tasks_once(proc.pid)
    finally:
        _stop(proc)
    tasks = _by_name(recording)
    assert set(tasks) == {"eager-0", "eager-1", "eager-2", "Task-1"}
    kinds = sorted(t.waits_on.kind for t in tasks.values() if t.waits_on is not None)
    assert kinds == [AwaitKind.SEMAPHORE, AwaitKind.SEMAPHORE, AwaitKind.SLEEP, AwaitKind.SLEEP]


def _static_python() -> str:
    """A statically linked CPython 3.11-3.13 (the distribution's), or skip."""
    import glob
    for path in sorted(glob.glob("/usr/bin/python3.1[123]")):
        libs = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        if "libpython" not in libs:
            return path
    pytest.skip("no statically linked CPython 3.11-3.13 under /usr/bin here")


def test_a_static_build_is_read_from_the_executables_own_symbols():
    from diagnose.collect.asyncio_tasks.binary import find_interpreter
    proc, ids = _start(_static_python(), TARGET)
    try:
        assert find_interpreter(proc.pid).binary == find_interpreter(proc.pid).exe
        recording = read_tasks_once(proc.pid)
    finally:
        _stop(proc)
    tasks = _by_name(recording)
    waiter = tasks["sem-waiter-0"].waits_on
    assert waiter is not None and waiter.kind is AwaitKind.SEMAPHORE
    assert (waiter.identity, waiter.permits, waiter.waiters) == (json.loads(ids)["sem"], 0, 3)


def test_a_process_without_asyncio_is_asked_ever_more_rarely_and_a_live_loop_at_the_rate():
    from diagnose.collect.asyncio_tasks.sampler import NOT_LOADED_MAX_WAIT_S, pause_after
    waits = [pause_after(0.25, 0.001, streak) for streak in range(1, 8)]
    assert waits == sorted(waits) and waits[0] >= 0.5
    assert waits[-1] == NOT_LOADED_MAX_WAIT_S
    assert pause_after(0.25, 0.001, 0) < 0.25  # tasks were found: the rate holds
    assert pause_after(0.25, 0.2, 0) >= 0.8  # an expensive read still waits 4x its cost


def test_a_sampler_on_a_process_without_asyncio_reads_it_a_few_times_not_at_the_rate():
    proc, _ = _start(_python("3.12"), QUIET)
    try:
        sampler = AsyncioTaskSampler(proc.pid, rate=10).start()
        time.sleep(3.0)
        recording = sampler.stop()
    finally:
        _stop(proc)
    # at the rate that would be ~30 reads; doubling waits from 0.2 s leave at most 5 in 3 s
    assert 1 <= recording.reads <= 5, recording
    assert any("has not imported asyncio" in note for note in recording.notes)
