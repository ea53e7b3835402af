"""Stacks of a forked process tree, read from py-spy's chrometrace recording.

Forked processes share their threads' pthread ids, and py-spy's chrometrace writer diffs each
trace against the previous trace of the same pthread id in *any* process: the "E" events of one
process's trace close frames another process opened (readers/chrometrace.py `_changes`). Read per
(pid, thread), those frames were never closed and stacks grew hundreds of frames deep.

The recorded fixture (fixtures/recorded/fork_tree.chrometrace.json and its /proc record) is 1 s
at 20 Hz of fixtures/workloads/fork_tree.py (a parent and 2 forked workers, child processes
sampled), re-made by `python fixtures/record.py fork_tree`.
"""

from __future__ import annotations

import json

import pytest

from diagnose.collect.procfs import ProcRecord, TreeRecord
from diagnose.readers.chrometrace import (
    close_exited_threads, hold_through_torn_last_reads, load_chrometrace)
from diagnose.readers.loaders import load_profile, load_speedscope
from diagnose.render.speedscope_out import profile_to_speedscope
from tests.conftest import RECORDED, REPO, WORKLOADS
from tests.replay import replay

PROGRAM = WORKLOADS / "fork_tree.py"
# a chrometrace event's keys (the Trace Event Format's)
EVENT_PHASE, EVENT_PID, EVENT_TID, EVENT_NAME = "ph", "pid", "tid", "name"


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    text = (RECORDED / "fork_tree.chrometrace.json").read_text()
    path = tmp_path_factory.mktemp("recorded") / "fork_tree.chrometrace.json"
    path.write_text(text.replace("$REPO", str(REPO)))
    return path


@pytest.fixture(scope="module")
def tree() -> TreeRecord:
    return TreeRecord.from_dict(json.loads((RECORDED / "fork_tree.procfs.json").read_text()))


def functions(profile, stack_id) -> list[str]:
    return [profile.frames[f].function for f in profile.stacks[int(stack_id)]]


def program_depths() -> dict[str, int]:
    """The deepest stack each role of the program can have, counted from its source: frames
    of the program itself plus the standard library calls between them (multiprocessing's
    fork start-up for a worker, the selector wait for the parent)."""
    return {"parent": len(["<module>", "main", "supervise", "wait", "select"]) + 2,
            "worker": len(["<module>", "main", "start", "_Popen", "__init__", "_launch",
                           "_bootstrap", "run", "serve", "handle", "checksum"]) + 2}


def test_the_recorded_tree_shares_one_pthread_id_across_its_processes(recording):
    events = json.loads(recording.read_text())
    assert len({e[EVENT_PID] for e in events}) == 3
    assert len({e[EVENT_TID] for e in events}) == 1  # the case the writer keys wrongly


def test_each_process_of_a_forked_tree_has_its_own_shallow_stacks(recording, tree):
    profile = load_profile(recording, rate_hz=20)
    parent = tree.roots[0]
    assert set(profile.pids) == set(tree.records) and len(profile.pids) == 3
    limits = program_depths()
    for track in profile.threads:
        assert len(track.stack_ids) >= 10
        role = "parent" if track.pid == parent else "worker"
        for sid in set(track.stack_ids.tolist()):
            names = functions(profile, sid)
            assert names[0] == "<module>"  # the program's entry, once: no tower of stacks
            assert names.count("<module>") == 1 and names.count("main") == 1
            assert len(names) <= limits[role]
            if role == "parent":
                assert "supervise" in names and "serve" not in names
            else:
                assert "serve" in names and "supervise" not in names
                assert profile.frames[profile.stacks[int(sid)][0]].file.endswith("fork_tree.py")


def test_the_speedscope_output_of_a_forked_tree_keeps_the_shallow_stacks(recording):
    profile = load_profile(recording, rate_hz=20)
    again = load_speedscope(json.loads(json.dumps(profile_to_speedscope(profile, "tree"))))
    stacks = [functions(again, sid) for track in again.threads
              for sid in set(track.stack_ids.tolist())]
    assert stacks and max(len(names) for names in stacks) <= max(program_depths().values())
    assert all(names.count("<module>") == 1 for names in stacks)


# -- the writer, re-enacted ---------------------------------------------------------------------

def pyspy_chrometrace(samples: list[list[tuple[int, int, list[str]]]], gap_us: int = 10_000):
    """Events as py-spy's writer (src/chrometrace.rs, 0.4.x) makes them: per sampling instant,
    each (pid, pthread id, stack root→leaf) trace is diffed against `prev_traces[thread_id]`,
    the previous trace of that pthread id in any process; "E" for the frames that left
    (innermost first) and "B" for the new ones, all stamped with this trace's pid and instant.
    At the end every open trace is closed."""
    events, prev = [], {}
    now = 0
    for instant, traces in enumerate(samples):
        for k, (pid, tid, stack) in enumerate(traces):
            now = instant * gap_us + 20 * k  # a few µs between the traces of one instant
            old = prev.pop(tid, (pid, []))[1]
            same = 0
            while same < min(len(old), len(stack)) and old[same] == stack[same]:
                same += 1
            for name in reversed(old[same:]):
                events.append({"ph": "E", "ts": now, "pid": pid, "tid": tid, "name": name,
                               "args": {"filename": "" if " " in name else "app.py", "line": 1}})
            for name in stack[same:]:
                events.append({"ph": "B", "ts": now, "pid": pid, "tid": tid, "name": name,
                               "args": {"filename": "" if " " in name else "app.py", "line": 1}})
            prev[tid] = (pid, stack)
    end = now + gap_us
    for tid, (pid, stack) in prev.items():
        for name in reversed(stack):
            events.append({"ph": "E", "ts": end, "pid": pid, "tid": tid, "name": name,
                           "args": {"filename": "" if " " in name else "app.py", "line": 1}})
    return events


TID = 140_000_000_000_000  # one pthread id, shared by the forked processes


def tree_stack(pid: int, *frames: str, parent: int = 100) -> list[str]:
    roots = [f'process {parent}:"master"'] + ([f'process {pid}:"worker"'] if pid != parent else [])
    return roots + [f"thread ({pid}): MainThread"] + list(frames)


def test_frames_closed_under_another_pid_are_replayed_as_the_writer_keyed_them():
    master = ["run", "sleep"]
    worker = {1: ["run", "handle", "tokenize"], 2: ["run", "handle", "predict"]}
    samples = []
    for i in range(6):
        leaf = ["tokenize", "predict"][i % 2]
        samples.append([(100, TID, tree_stack(100, *master)),
                        (101, TID, tree_stack(101, "run", "handle", leaf)),
                        (102, TID, tree_stack(102, *worker[1 + i % 2]))])
    events = pyspy_chrometrace(samples)
    assert any(e[EVENT_PHASE] == "E" and e[EVENT_PID] == 100 and e[EVENT_NAME] == "tokenize" for e in events)
    profile = load_chrometrace(events, rate_hz=100)
    # the stacks each process was seen to change to, in order
    seen = {t.pid: [functions(profile, s) for s in t.changes[1]] for t in profile.threads}
    assert set(seen) == {100, 101, 102}
    assert seen[100] == [master]
    assert [s[-1] for s in seen[101]] == ["tokenize", "predict"] * 3
    assert [s[-1] for s in seen[102]] == ["tokenize", "predict"] * 3
    assert all(s[:2] == ["run", "handle"] and len(s) == 3 for pid in (101, 102) for s in seen[pid])
    assert {t.tid for t in profile.threads} == {100, 101, 102}  # OS thread ids, per process


def test_a_pthread_id_unique_to_one_process_keeps_its_unchanged_stack_between_changes():
    """Only the shared ids are rewritten at every instant; a thread whose id no other process
    has writes nothing while its stack holds, and keeps it."""
    other = TID + 1
    samples = [[(100, TID, tree_stack(100, "run")),
                (101, TID, tree_stack(101, "serve", "work")),
                (101, other, tree_stack(101, "pool", "wait"))] for _ in range(5)]
    for later in samples[3:]:
        later[2] = (101, other, tree_stack(101, "pool", "run_task"))
    profile = load_chrometrace(pyspy_chrometrace(samples), rate_hz=100)
    pool = next(t for t in profile.threads if functions(profile, t.stack_ids[0])[0] == "pool")
    assert pool.pid == 101
    assert [functions(profile, s)[-1] for s in pool.changes[1]] == ["wait", "run_task"]
    assert list(pool.changes[0]) == pytest.approx([0.0, 0.03])
    assert max(len(functions(profile, s)) for t in profile.threads for s in t.stack_ids) == 2


def test_without_process_frames_the_event_pid_names_the_process():
    samples = [[(7, TID, ["thread (7): MainThread", "main", "work"])] for _ in range(3)]
    profile = load_chrometrace(pyspy_chrometrace(samples), rate_hz=100)
    assert [(t.pid, t.tid) for t in profile.threads] == [(7, 7)]
    assert functions(profile, profile.threads[0].stack_ids[0]) == ["main", "work"]


def test_a_new_thread_reusing_a_shared_pthread_id_ends_the_old_one_in_its_own_process():
    """Process 101's thread with OS id 101 exits and a new one (OS id 555) gets the same
    pthread id, which the parent's thread also has: 101 shows two threads one after the other,
    the parent one throughout."""
    def worker(os_tid: int, leaf: str) -> list[str]:
        return ['process 100:"master"', 'process 101:"worker"', f"thread ({os_tid}): T", leaf]

    samples = [[(100, TID, tree_stack(100, "run")),
                (101, TID, worker(101 if i < 3 else 555, "old" if i < 3 else "new"))]
               for i in range(6)]
    profile = load_chrometrace(pyspy_chrometrace(samples), rate_hz=100)
    by_pid = {t.pid: t for t in profile.threads}
    assert set(by_pid) == {100, 101}
    segments = by_pid[101].segments
    assert [s[0] for s in segments] == [101, 555]
    assert segments[0][2] == pytest.approx(0.03) == segments[1][1]  # ended as the new one began
    assert [s[0] for s in by_pid[100].segments] == [100]
    assert [functions(profile, s) for s in by_pid[101].changes[1]] == [["old"], ["new"]]


def _recorded(stacks: list[tuple[str, ...]], thread: str | None = "thread (7): MainThread") -> list[dict]:
    """py-spy's events for one thread holding `stacks` in turn, 10 ms apart, each read led by
    the thread's pseudo-frame (`--threads`), or by nothing where `thread` is None."""
    def frame(name):
        file = "" if name == thread else "app.py"
        return {"name": name, "args": {"filename": file, "line": 0 if name == thread else 1}}

    events, held = [], ()
    for k, read in enumerate(stacks):
        stack = read if thread is None else (thread, *read)
        ts = 10_000.0 * k
        common = 0
        while common < min(len(held), len(stack)) and held[common] == stack[common]:
            common += 1
        events += [dict(frame(n), ph="E", ts=ts, pid=7, tid=1) for n in reversed(held[common:])]
        events += [dict(frame(n), ph="B", ts=ts, pid=7, tid=1) for n in stack[common:]]
        held = stack
    end = 10_000.0 * len(stacks)
    events += [dict(frame(n), ph="E", ts=end, pid=7, tid=1) for n in reversed(held)]
    return events


def test_a_torn_non_blocking_read_that_lost_the_threads_root_frames_is_dropped():
    stacks = [("<module>", "serve", "work"), ("work",), ("<module>", "serve", "parse"),
              ("<module>", "serve", "work"), ("<module>", "serve", "parse")]
    profile = load_chrometrace(_recorded(stacks, thread=None), rate_hz=100)
    roots = {profile.frames[profile.stacks[sid][0]].function
             for track in profile.threads for sid in track.stack_ids}
    assert roots == {"<module>"}


def test_an_empty_read_of_a_thread_still_in_its_module_body_is_dropped():
    # Replayed from a forked pool worker's recording: its main thread read with no frame once
    # mid-window, then whole again; the report drew a main-thread stack with no frames.
    stacks = [("<module>", "serve", "work"), ("<module>", "serve", "parse"), (),
              ("<module>", "serve", "work"), ("<module>", "serve", "parse")]
    profile = load_chrometrace(_recorded(stacks), rate_hz=100)
    read = [functions(profile, sid) for track in profile.threads for sid in track.stack_ids]
    assert read and all(stack[:2] == ["<module>", "serve"] for stack in read), read


def test_a_callback_threads_empty_reads_between_calls_are_kept():
    # A thread a native library runs Python on is empty between callbacks: idle, not torn.
    stacks = [("on_message", "parse"), (), ("on_message", "parse"), (), ("on_message", "parse"),
              ("on_message", "parse")]
    profile = load_chrometrace(_recorded(stacks, "thread (7): poller"), rate_hz=100)
    read = [functions(profile, sid) for track in profile.threads for sid in track.stack_ids]
    assert [] in read and ["on_message", "parse"] in read, read


def _listed(tid: int, ticks: list[float]) -> TreeRecord:
    """A /proc record of process 7 that lists thread `tid` at `ticks` (another thread beside it
    at every tick of the window, so that the ticks after `tid` left are still there)."""
    proc = ProcRecord(pid=7, cores=2, cpu_quota_cores=None, started_at=0.0)
    proc.state_samples = ([(t, tid, "R") for t in ticks]
                          + [(k / 50, 8, "S") for k in range(8)])
    return TreeRecord(roots=[7], records={7: proc})


def _trailing_empty_read() -> list[tuple[str, ...]]:
    # whole reads of a thread in its module body, then py-spy reads it with no frame to the end
    return [("<module>", "serve", "work"), ("<module>", "serve", "parse"),
            ("<module>", "serve", "work")] + [()] * 11


def test_a_last_read_with_no_frame_of_a_thread_proc_still_lists_holds_its_last_stack():
    # Replayed from a forked pool worker (fixtures/recorded/torn_reads): its main thread's last
    # reads had no frame for 170 ms while /proc listed it running; the report drew a
    # main-thread stack with no frames.
    profile = load_chrometrace(_recorded(_trailing_empty_read()), rate_hz=100)
    tree = _listed(7, [k / 50 for k in range(8)])
    assert close_exited_threads(profile, tree, margin_s=0) == 0
    assert hold_through_torn_last_reads(profile, tree, margin_s=0) == 1
    read = [functions(profile, sid) for track in profile.threads for sid in track.stack_ids]
    assert len(read) == 14 and read[-1] == ["<module>", "serve", "work"], read
    assert all(stack[:2] == ["<module>", "serve"] for stack in read), read


def test_a_last_read_with_no_frame_of_a_thread_that_ended_is_not_held():
    # /proc stopped listing the thread after 0.04 s: it ended (its interpreter finalising),
    # and the empty reads before its exit are its true state.
    profile = load_chrometrace(_recorded(_trailing_empty_read()), rate_hz=100)
    tree = _listed(7, [0.0, 0.02, 0.04])
    close_exited_threads(profile, tree, margin_s=0)
    assert hold_through_torn_last_reads(profile, tree, margin_s=0) == 0
    read = [functions(profile, sid) for track in profile.threads for sid in track.stack_ids]
    assert read[-1] == [], read


def test_a_callback_threads_last_empty_read_is_kept_while_it_lives():
    stacks = [("on_message", "parse"), ("on_message", "parse", "decode")] + [()] * 11
    profile = load_chrometrace(_recorded(stacks, "thread (7): poller"), rate_hz=100)
    tree = _listed(7, [k / 50 for k in range(8)])
    assert hold_through_torn_last_reads(profile, tree, margin_s=0) == 0


def test_the_recorded_pool_workers_main_threads_open_with_the_trees_root(tmp_path):
    report = replay("torn_reads", "pool_worker_last_read_empty", tmp_path)
    frames = report.stacks.frames
    main_stacks = [[frames[i].function for i in row.stack] for row in report.stacks.samples
                   if row.thread == "MainThread"]
    assert len({row.pid for row in report.stacks.samples}) == 3
    assert main_stacks and all(stack[:2] == ["<module>", "main"] for stack in main_stacks), \
        [s for s in main_stacks if s[:2] != ["<module>", "main"]]
