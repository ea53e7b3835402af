"""Measured sample instants: py-spy's chrometrace recording, read into timestamped samples.

The recorded fixture (fixtures/recorded/late_thread.chrometrace.json and its /proc record) is a
3 s window of fixtures/workloads/late_thread.py at 50 Hz, re-made by
`python fixtures/record.py late_thread`: three `late-N` threads start ~1 s into the window (and
`early` exits then); after that, they wait for a lock that a thread inside `serve` holds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from diagnose.checks.service_verdict import run_service_checks
from diagnose.classify.categories import Categorizer
from diagnose.collect import pyspy
from diagnose.collect.procfs import ProcRecord, TreeRecord
from diagnose.errors import BadProfile
from diagnose.readers.chrometrace import close_exited_threads, load_chrometrace, settle_rate
from diagnose.readers.loaders import load_profile, load_speedscope
from diagnose.model.service import build_service
from diagnose.render.page_tables import timeline
from diagnose.run.build_report import build_report
from diagnose.render.speedscope_out import profile_to_speedscope
from tests.conftest import RECORDED, REPO, WORKLOADS, marker_line

RATE = 50  # the fixture's recording rate (fixtures/record.py CHROMETRACE)
LATE_START_S = 1.0  # when the late threads were started, seconds into the window (~0.9-1.1)
HOLDER = "holder"  # the workload's thread that holds the lock from the start


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Path:
    """The fixture with its `$REPO` placeholder resolved, so the workload's source lines (the
    `with LOCK:` line) are read as they were when it was recorded."""
    text = (RECORDED / "late_thread.chrometrace.json").read_text()
    path = tmp_path_factory.mktemp("recorded") / "late_thread.chrometrace.json"
    path.write_text(text.replace("$REPO", str(REPO)))
    return path


@pytest.fixture(scope="module")
def tree() -> TreeRecord:
    return TreeRecord.from_dict(json.loads((RECORDED / "late_thread.procfs.json").read_text()))


def by_name(profile) -> dict:
    return {t.name: t for t in profile.threads}


def since_start(profile, seconds: float) -> float:
    return seconds - profile.origin_s


def test_the_recorder_writes_chrometrace_and_the_native_calibration_stays_speedscope():
    main = pyspy.record_command(7, "out.json", 3, 50, native=False)
    assert main[main.index("--format") + 1] == "chrometrace"
    assert {"--idle", "--threads"} <= set(main)
    native = pyspy.record_command(7, "n.json", 3, 5, native=True, fmt="speedscope")
    assert native[native.index("--format") + 1] == "speedscope"


def test_fixture_loads_with_measured_instants(recording):
    profile = load_profile(recording, rate_hz=RATE)
    assert profile.source == "chrometrace" and profile.instants == "measured"
    assert profile.interval_s == pytest.approx(1 / RATE)
    assert 2.0 < profile.window_s < 4.0  # py-spy's --duration 3 counts samples, not seconds
    threads = by_name(profile)
    assert {"MainThread", HOLDER, "early", "late-0", "late-1", "late-2"} <= set(threads)
    assert len(profile.pids) == 1
    assert all(t.tid < 1 << 22 for t in profile.threads)  # OS thread ids, from --threads
    assert profile.waits_visible


def test_every_thread_is_read_on_one_grid_of_instants(recording):
    profile = load_profile(recording, rate_hz=RATE)
    for track in profile.threads:
        steps = (track.times - profile.origin_s) / profile.interval_s
        assert np.allclose(steps, np.round(steps), atol=1e-6)
        assert np.all(np.diff(track.times) > 0)
        assert len(track.times) == len(track.stack_ids) == len(track.weights)


def test_a_thread_started_mid_window_is_placed_at_its_real_start(recording):
    profile = load_profile(recording, rate_hz=RATE)
    threads = by_name(profile)
    assert since_start(profile, threads[HOLDER].started_s) == pytest.approx(0, abs=0.01)
    for name in ("late-0", "late-1", "late-2"):
        start = since_start(profile, threads[name].started_s)
        assert LATE_START_S - 0.35 < start < LATE_START_S + 0.5, (name, start)
    service = build_service(profile, Categorizer(), None)
    analysis = service.combined
    first_t = analysis.samples.groupby("thread")["t"].min()
    index = {str(n): i for i, n in analysis.threads.name.items()}
    assert first_t[index[HOLDER]] == pytest.approx(0, abs=1e-9)
    for name in ("late-0", "late-1", "late-2"):
        assert first_t[index[name]] == pytest.approx(since_start(profile, threads[name].started_s),
                                                     abs=profile.interval_s)
    # The timeline: the late threads' lanes are empty until they started.
    lanes_of = timeline(analysis)
    lanes = {lane.thread: lane.runs for lane in lanes_of.lanes}
    step = lanes_of.interval_s
    for name in ("late-0", "late-1", "late-2"):
        state, length = lanes[index[name]][0]
        assert state == -1
        assert length * step == pytest.approx(first_t[index[name]], abs=step * 1.01)
    assert lanes[index[HOLDER]][0][0] != -1
    # The JSON thread table says where each thread ran.
    rows = {r.name: r for r in build_report(service, run_service_checks(service)[0]).threads}
    assert rows[HOLDER].first_s == 0
    assert rows["late-0"].first_s == pytest.approx(first_t[index["late-0"]],
                                                   abs=profile.interval_s)
    assert rows["late-0"].last_s == pytest.approx(profile.window_s, abs=1e-3)


def test_a_thread_that_exited_mid_window_ends_where_the_proc_record_lost_it(recording, tree):
    profile = load_profile(recording, rate_hz=RATE)
    early = by_name(profile)["early"]
    # The format closes every open frame at the end: without /proc, the exit is not seen.
    assert since_start(profile, early.ended_s) == pytest.approx(profile.window_s)
    late_start = min(since_start(profile, t.started_s) for t in profile.threads
                     if t.name.startswith("late"))
    assert close_exited_threads(profile, tree) >= 1
    early = by_name(profile)["early"]
    end = since_start(profile, early.ended_s)
    # it returns 0.3 s after the late threads start; the /proc record lost it a tick (0.1 s) later
    assert late_start < end < late_start + 0.9
    assert early.times[-1] < early.ended_s
    # threads alive to the end are left alone
    holder = by_name(profile)[HOLDER]
    assert since_start(profile, holder.ended_s) == pytest.approx(profile.window_s)


def test_holders_and_pool_size_are_read_at_real_instants(recording, tree):
    """After the trigger the late threads wait at `with LOCK:` while one thread is inside
    `serve`. Read at measured instants the holder is there at nearly every waiting instant, one
    at a time; laid end to end from t=0, the late threads' waits line up with the holder's
    warm-up, and the holder is found far less often."""
    line = marker_line(WORKLOADS / "late_thread.py", "contended-acquire")

    def lock_site(profile):
        analysis = build_service(profile, Categorizer(), tree).combined
        return next(w for w in analysis.waits if w.kind == "lock" and w.line == line)

    measured = load_profile(recording, rate_hz=RATE)
    close_exited_threads(measured, tree)
    site = lock_site(measured)
    assert site.holder_scope == "serve"
    assert site.holders and site.holders[0].stack[:2] == ("serve", "spin")
    assert site.holders[0].share >= 0.7
    assert site.max_holders == 1  # a lock admits one holder
    assert site.max_concurrent <= 4  # three late threads and the holder, nobody else
    reconstructed = load_speedscope(profile_to_speedscope(measured, "x"))
    assert reconstructed.instants == "reconstructed"
    assert lock_site(reconstructed).holders[0].share < site.holders[0].share - 0.2


def test_the_report_says_how_instants_are_known(recording):
    measured = build_service(load_profile(recording, rate_hz=RATE), Categorizer(), None)
    report = build_report(measured, run_service_checks(measured)[0])
    assert report.sampling.instants == "measured"
    recorded = build_service(load_profile(RECORDED / "lock_contention.speedscope.json"),
                             Categorizer(), None)
    report = build_report(recorded, run_service_checks(recorded)[0])
    assert report.sampling.instants == "reconstructed"
    assert all(row.first_s is None and row.last_s is None for row in report.threads)


def test_the_speedscope_written_from_a_measured_profile_loads_back_the_same_samples(recording):
    profile = load_profile(recording, rate_hz=RATE)
    again = load_speedscope(json.loads(json.dumps(profile_to_speedscope(profile, "x"))))
    assert len(again.threads) == len(profile.threads)
    for a, b in zip(profile.threads, again.threads):
        assert (a.tid, a.name, a.pid) == (b.tid, b.name, b.pid)
        assert [profile.stacks[i] for i in a.stack_ids] == [again.stacks[i] for i in b.stack_ids]


def test_offline_the_rate_is_estimated_from_the_instants_seen(recording):
    profile = load_profile(recording)  # no rate: `diagnose analyze` of the file alone
    assert 10 <= 1 / profile.interval_s <= RATE + 10


def test_a_recorder_that_fell_behind_is_read_at_the_rate_it_achieved(recording):
    profile = load_profile(recording, rate_hz=RATE)
    asked = profile.total_samples
    assert settle_rate(profile, asked) is None  # kept up: unchanged
    achieved = settle_rate(profile, asked // 2)
    assert achieved == pytest.approx(RATE / 2, rel=0.1)
    assert profile.total_samples == pytest.approx(asked / 2, rel=0.1)


# Synthetic recordings: the format's corner cases, event by event.

def _event(ph, ts, name, tid=1, pid=10, file="app.py", line=1):
    return {"args": {"filename": file, "line": line}, "cat": "py-spy", "name": name, "ph": ph,
            "pid": pid, "tid": tid, "ts": ts}


def _open(ts, tid, os_tid, thread_name, frames):
    out = [_event("B", ts, f"thread ({os_tid}): {thread_name}", tid, file="", line=0)]
    out += [_event("B", ts, f, tid, line=n + 1) for n, f in enumerate(frames)]
    return out


def _close(ts, tid, os_tid, thread_name, frames):
    out = [_event("E", ts, f, tid, line=n + 1) for n, f in reversed(list(enumerate(frames)))]
    return out + [_event("E", ts, f"thread ({os_tid}): {thread_name}", tid, file="", line=0)]


def test_samples_hold_the_last_stack_seen_and_one_instant_is_one_instant():
    events = (_open(1_000, 1, 101, "a", ["main", "work"])
              + _open(1_150, 2, 102, "b", ["main"])  # same sampling instant, written 150 µs later
              + [_event("E", 41_000, "work", 1, line=2), _event("B", 41_000, "wait", 1, line=2)]
              + _close(101_000, 1, 101, "a", ["main", "wait"])
              + _close(101_000, 2, 102, "b", ["main"]))
    profile = load_chrometrace(events, rate_hz=100)
    a, b = profile.threads
    assert profile.window == (0.001, 0.101)
    assert len(a.stack_ids) == len(b.stack_ids) == 10  # both from the first instant, 10 ms apart
    names = [profile.frames[profile.stacks[s][-1]].function for s in a.stack_ids]
    assert names == ["work"] * 4 + ["wait"] * 6


def test_a_new_thread_behind_a_reused_pthread_id_shares_the_row_after_the_first():
    """py-spy names threads by pthread id, which a new thread takes over once an old one
    exited: like py-spy's other outputs, they share a row, each where it ran. The OS thread id
    in the pseudo-frame tells them apart, and the /proc record ends the first where it exited."""
    events = (_open(0, 1, 101, "first", ["run"])
              + [_event("E", 50_000, "run", 1),
                 _event("E", 50_000, "thread (101): first", 1, file="", line=0)]
              + [_event("B", 50_000, "thread (105): second", 1, file="", line=0),
                 _event("B", 50_000, "run", 1)]
              + _close(100_000, 1, 105, "second", ["run"]))
    profile = load_chrometrace(events, rate_hz=100)
    (track,) = profile.threads
    assert (track.tid, track.name) == (101, "first")
    assert track.segments == [[101, 0.0, 0.05], [105, 0.05, 0.1]]
    assert len(track.stack_ids) == 10
    # /proc: 101 listed until 0.02, gone at 0.03; 105 listed from 0.06 on
    proc = ProcRecord(pid=10, cores=2, cpu_quota_cores=None, started_at=0.0)
    proc.state_samples = ([(t / 100, 101, "R") for t in range(3)]
                          + [(t / 100, 999, "S") for t in range(3, 6)]
                          + [(t / 100, 105, "R") for t in range(6, 11)])
    tree = TreeRecord(roots=[10], records={10: proc})
    assert close_exited_threads(profile, tree, margin_s=0) == 1
    assert track.segments[0][2] == pytest.approx(0.03)
    assert np.round(track.times * 100).astype(int).tolist() == [0, 1, 2, 5, 6, 7, 8, 9]


def test_a_proc_tick_that_missed_a_thread_does_not_end_it():
    """A tick of the /proc sampler that lists only some threads (one cut short as the window
    closed, or that raced a read) is not their exit: a thread ends where /proc stopped listing it
    for good, confirmed by a second tick."""
    events = _open(0, 1, 101, "hung", ["wait"]) + _close(100_000, 1, 101, "hung", ["wait"])
    profile = load_chrometrace(events, rate_hz=100)
    (track,) = profile.threads
    proc = ProcRecord(pid=10, cores=2, cpu_quota_cores=None, started_at=0.0)
    # listed at every tick but 0.04 (another thread alone there) and the last one, 0.10
    proc.state_samples = ([(t / 100, 101, "S") for t in range(10) if t != 4]
                          + [(0.04, 999, "S"), (0.10, 999, "S")])
    tree = TreeRecord(roots=[10], records={10: proc})
    assert close_exited_threads(profile, tree, margin_s=0) == 0
    assert track.segments == [[101, 0.0, 0.1]] and len(track.stack_ids) == 10


def test_not_a_trace_is_a_bad_profile():
    with pytest.raises(BadProfile):
        load_chrometrace({"traceEvents": []})
    with pytest.raises(BadProfile, match="no samples"):
        load_chrometrace([])
    with pytest.raises(BadProfile, match="lacks"):
        load_chrometrace([{"ph": "B", "name": "x"}])


# Waits that the recording cannot show (py-spy record without --idle).

def _speedscope(threads: dict[str, list[list[int]]], frames: list[dict]) -> dict:
    return {"shared": {"frames": frames}, "profiles": [
        {"type": "sampled", "name": f'Thread {100 + i} "{name}"', "unit": "seconds",
         "startValue": 0, "endValue": len(samples) / 100, "samples": samples,
         "weights": [0.01] * len(samples)} for i, (name, samples) in enumerate(threads.items())]}


FRAMES = [{"name": "loop", "file": "srv.py", "line": 3},
          {"name": "compute", "file": "srv.py", "line": 9},
          {"name": "Condition.wait", "file": "/usr/lib/python3.11/threading.py", "line": 320},
          {"name": "Queue.get", "file": "/usr/lib/python3.11/queue.py", "line": 171}]


def test_a_recording_without_idle_samples_cannot_show_waits():
    # running threads only: counts follow how busy each thread was, nothing ever waits
    profile = load_speedscope(_speedscope({"MainThread": [[0, 1]] * 3, "worker-0": [[0, 1]] * 150,
                                           "worker-1": [[0, 1]] * 90}, FRAMES))
    assert profile.waits_visible is False
    assert "--idle" in profile.waits_reason and "3 to 150" in profile.waits_reason
    assert "window's length is not in the file" in profile.waits_reason


def test_a_recording_with_idle_samples_shows_waits():
    waiting = [0, 3, 2]  # loop -> Queue.get -> Condition.wait
    profile = load_speedscope(_speedscope({"MainThread": [waiting] * 150,
                                           "worker-0": [[0, 1]] * 150,
                                           "worker-1": [[0, 1]] * 90}, FRAMES))
    assert profile.waits_visible is True and profile.waits_reason == ""
    # every thread busy all window, equal counts: nothing says samples were dropped
    profile = load_speedscope(_speedscope({"a": [[0, 1]] * 150, "b": [[0, 1]] * 150}, FRAMES))
    assert profile.waits_visible is True


def test_the_facts_survive_merging_recordings():
    hidden = load_speedscope(_speedscope({"a": [[0, 1]] * 3, "b": [[0, 1]] * 150}, FRAMES))
    shown = load_speedscope(_speedscope({"a": [[0, 3, 2]] * 150, "b": [[0, 1]] * 150}, FRAMES))
    shown.absorb(hidden)
    assert shown.waits_visible is False and "--idle" in shown.waits_reason


def test_a_timestamped_recording_whose_main_thread_shows_up_late_dropped_idle_samples():
    """With --idle every thread of the process is read from its first instant on; without it a
    thread appears when it first runs, and a service's main thread mostly waits. (Waiting shares
    cannot tell here: the format holds a thread's last stack, a wait's line too, until the next
    change.)"""
    worker = ["main", "work"]
    without_idle = (_open(0, 1, 11, "worker", worker)
                    + _open(1_500_000, 2, 10, "MainThread", ["main"])
                    + _close(3_000_000, 1, 11, "worker", worker)
                    + _close(3_000_000, 2, 10, "MainThread", ["main"]))
    profile = load_chrometrace(without_idle, rate_hz=10)
    assert profile.waits_visible is False
    assert "main thread of process 10 was first seen 1.5 s" in profile.waits_reason
    assert "--idle" in profile.waits_reason
    with_idle = (_open(0, 1, 11, "worker", worker) + _open(100, 2, 10, "MainThread", ["main"])
                 + _open(1_500_000, 3, 12, "late", ["main"])  # a thread started mid-window
                 + _close(3_000_000, 1, 11, "worker", worker)
                 + _close(3_000_000, 2, 10, "MainThread", ["main"])
                 + _close(3_000_000, 3, 12, "late", ["main"]))
    assert load_chrometrace(with_idle, rate_hz=10).waits_visible is True
