"""`attach --keep-raw` keeps the live run's sampling (.sampling.json) and `analyze --sampling`
replays a recording with it: the rate, py-spy's counts and the plan the live analysis had, not
a rate estimated from the samples (a live lock_contention once replayed as underloaded)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from diagnose.collect.procfs import TreeRecord
from diagnose.collect.run_context import (CaptureSampling, LiveRun, LiveSampling, RunContext,
                                          WindowCpu)
from diagnose.errors import ExitCode
from diagnose.readers.loaders import load_profile
from diagnose.report.model import Load, PlannedProcess, Report, Target
from diagnose.report.model.codec import decode, encode
from diagnose.run import pipeline
from tests.conftest import RECORDED, invoke_cli, invoke_cli_report

RECORDING = RECORDED / "late_thread.chrometrace.json"  # measured instants: the rate sets the grid
PROCFS = RECORDED / "late_thread.procfs.json"


def capture_sampling(rate_hz: int, samples: int | None = None) -> CaptureSampling:
    return CaptureSampling(
        duration_s=3.0, requested_duration_s=3.0, rate_hz=rate_hz, plan=f"gentle at {rate_hz} Hz",
        proc_interval_s=0.1, samples=samples, samples_taken=samples, errors=2, native=True,
        native_rate_hz=4, native_samples=40, native_errors=1, mode="nonblocking (test)",
        processes_planned=(PlannedProcess(15605, rate_hz, 4, True),), processes_sampled=1,
        pyspy_version="0.4.3", pyspy_cpu_s=0.25, pyspy_cpu_share_of_cores=0.04,
        cpu=WindowCpu(own_cpu_s=0.05, children_cpu_s=0.24, window_s=3.3, target_cpu_s=2.9,
                      target_window_s=3.3))


def live_context(rate_hz: int, samples: int | None = None) -> RunContext:
    """A live run of the recorded target, as `from_capture` makes it."""
    return RunContext(
        target=Target(pid=15605, python="3.11.7", cmdline="python late_thread.py", threads=5,
                      cores=2, pids=(15605,), children=True),
        sampling=LiveSampling(capture_sampling(rate_hz, samples), 1796575058.544),
        argv=("python", "late_thread.py", "--seconds", "153"))


def written_and_read(kept: LiveRun) -> LiveRun:
    return decode(LiveRun, json.loads(json.dumps(encode(kept))))


def test_the_kept_sampling_reads_back_as_the_live_run_it_was_written_from():
    run = replace(live_context(29, samples=623), partial=True, notes=("py-spy fell behind",),
                  load=Load(throughput_rps=120.5, concurrency=8))
    kept = LiveRun.of(run)
    assert kept is not None
    assert written_and_read(kept) == kept
    assert written_and_read(kept).context() == run


def test_a_recorded_files_run_has_no_live_sampling_to_keep():
    assert LiveRun.of(RunContext()) is None


def live_report(run: RunContext, out: Path, keep_raw: bool = True) -> pipeline.Outputs:
    """The report `from_capture` writes for `run` over the recorded window, without a live
    target: its analysis and outputs, the recording kept beside it."""
    tree = TreeRecord.from_dict(json.loads(PROCFS.read_text()))
    service, results, per_process, categorizer = pipeline.analyze(
        [RECORDING], tree, run, None, live=False)
    return pipeline.write_outputs(service, results, per_process, categorizer, [RECORDING], out,
                                  "diagnose-15605", tree, keep_raw, move_profile=False,
                                  kept_run=run)


def replayed(out: Path, *companions: object) -> Report:
    proc, report = invoke_cli_report("analyze", RECORDING, "--procfs", PROCFS, *companions,
                                     "--json", "-o", out)
    assert proc.returncode == 0 and report is not None, proc.stderr
    return report


def test_keep_raw_keeps_the_run_the_analysis_started_from(tmp_path):
    run = live_context(29, samples=200)
    live_report(run, tmp_path / "kept")
    kept = decode(LiveRun, json.loads((tmp_path / "kept" / "diagnose-15605.sampling.json").read_text()))
    assert kept.context() == run  # not the notes the analysis added
    live_report(run, tmp_path / "plain", keep_raw=False)
    assert not (tmp_path / "plain" / "diagnose-15605.sampling.json").exists()


def test_a_replay_with_the_kept_sampling_gives_the_live_findings(tmp_path):
    # py-spy's count below what the grid would hold: the live analysis re-grids at the rate
    # achieved (settle_rate), which the replay can only do knowing the count.
    live = live_report(live_context(29, samples=200), tmp_path / "live").report
    report = replayed(tmp_path / "replay", "--sampling",
                      tmp_path / "live" / "diagnose-15605.sampling.json")
    assert report.verdict.primary == live.verdict.primary
    assert [(f.id, f.score) for f in report.findings] == [(f.id, f.score) for f in live.findings]
    assert replace(report.sampling, notes=()) == replace(live.sampling, notes=())
    assert report.target == live.target


def test_analyze_with_a_sampling_file_reads_the_recording_at_its_rate_not_the_estimate(tmp_path):
    estimated = round(1 / load_profile(RECORDING).interval_s)
    offline = replayed(tmp_path / "offline")
    stated = 2 * estimated
    sampling = tmp_path / "late_thread.sampling.json"
    kept = LiveRun.of(live_context(stated))
    assert kept is not None
    sampling.write_text(json.dumps(encode(kept)))
    report = replayed(tmp_path / "replay", "--sampling", sampling)
    assert report.sampling.rate_hz == stated != estimated
    assert report.sampling.plan == f"gentle at {stated} Hz"
    # The grid follows the stated rate: twice the rate, about twice the thread-samples.
    assert offline.sampling.thread_samples is not None and report.sampling.thread_samples is not None
    assert report.sampling.thread_samples == pytest.approx(2 * offline.sampling.thread_samples,
                                                           rel=0.05)
    assert any("late_thread.sampling.json" in note for note in report.sampling.notes)


@pytest.mark.parametrize("text, said", [
    ("not json", "not valid JSON"),
    ("[]", "an object expected"),
    (json.dumps({"target": {}}), "missing at sampling"),
    (json.dumps({"sampling": {"capture": {}, "started_at": 0}}), "missing at sampling.capture"),
])
def test_a_sampling_file_that_is_not_one_is_a_one_line_bad_profile_error(tmp_path, text, said):
    bad = tmp_path / "x.sampling.json"
    bad.write_text(text)
    proc, _ = invoke_cli("analyze", RECORDING, "--sampling", bad, "-o", tmp_path / "out",
                         check_json=False)
    assert proc.returncode == ExitCode.BAD_PROFILE
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}: not a diagnose sampling record")
    assert said in lines[0]


def test_analyze_help_names_the_sampling_file():
    proc, _ = invoke_cli("analyze", "--help", check_json=False)
    assert "--sampling" in proc.stdout and ".sampling.json" in proc.stdout


@pytest.mark.parametrize("text, said", [
    ("not json", "not valid JSON"),
    ("{}", "a list of recordings"),
    (json.dumps([{"pid": "x"}]), "not a diagnose asyncio task record ("),
])
def test_a_tasks_file_that_is_not_one_is_a_one_line_bad_profile_error(tmp_path, text, said):
    bad = tmp_path / "x.tasks.json"
    bad.write_text(text)
    proc, _ = invoke_cli("analyze", RECORDING, "--tasks", bad, "-o", tmp_path / "out",
                         check_json=False)
    assert proc.returncode == ExitCode.BAD_PROFILE, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}: not a diagnose asyncio task record")
    assert said in lines[0]
