"""The run's facts (target, sampling, notes, load) reach the report through the frozen
RunContext: what an offline file's reading learns after the analysis (the window's length, the
notes) is a new context handed to the report builder, and a live capture's sampling and load
are written as attach recorded them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from diagnose.checks.service_verdict import run_service_checks
from diagnose.classify.categories import Categorizer
from diagnose.collect.run_context import (CaptureSampling, LiveSampling, RecordedSampling,
                                        RunContext, WindowCpu)
from diagnose.model.service import build_service
from diagnose.readers.loaders import load_profile
from diagnose.run.build_report import build_report
from diagnose.report.model import Load, PlannedProcess, Target
from diagnose.run.pipeline import from_file
from tests.conftest import RECORDED, report_of

OFFLINE_NOTE = ("offline analysis: thread state inferred from the frames alone; no OS counters "
                "(run-queue wait, CPU time)")


def test_a_file_without_time_stamps_or_waits_reports_its_window_as_at_least_and_says_why(tmp_path):
    outputs = from_file(RECORDED / "locked_blas.noidle.speedscope.json", tmp_path, None)
    sampling = outputs.report.sampling
    assert sampling.duration_s is None
    assert sampling.duration_at_least_s == 2.0
    assert sampling.rate_hz == 100  # read off the profile's interval
    assert sampling.notes == ("the window's length is unknown: the file has no time stamps and "
                              "drops waiting samples; at least 2 s", OFFLINE_NOTE)
    written = report_of(outputs.json).sampling  # the .json file read back
    assert (written.duration_s, written.duration_at_least_s) == (None, 2.0)
    assert written.notes == sampling.notes


def test_a_file_sampled_with_idle_has_its_window_laid_end_to_end_and_only_the_offline_note(tmp_path):
    outputs = from_file(RECORDED / "lock_contention.speedscope.json", tmp_path, None)
    sampling = outputs.report.sampling
    assert sampling.duration_s == 3.966
    assert sampling.duration_at_least_s is None
    assert sampling.rate_hz == 29
    assert sampling.notes == (OFFLINE_NOTE,)
    assert sampling.mode == "offline: lock_contention.speedscope.json"


def test_a_proc_record_gives_the_window_and_the_target_and_no_note(tmp_path):
    outputs = from_file(RECORDED / "lock_contention.speedscope.json", tmp_path, None,
                        procfs_path=RECORDED / "lock_contention.procfs.json")
    report = outputs.report
    assert report.sampling.duration_s == 5.885  # the /proc record's window, not the samples'
    assert report.sampling.rate_hz is None
    assert report.sampling.notes == ()
    assert report.target.pid == 13582
    assert report.target.pids is None  # only attach knows the named pids


@pytest.fixture(scope="module")
def analysed():
    service = build_service(load_profile(RECORDED / "lock_contention.speedscope.json"), Categorizer())
    return service, run_service_checks(service)[0]


def test_the_report_states_the_context_it_is_handed_not_the_one_the_analysis_began_with(analysed):
    service, results = analysed
    assert service.combined.run == RunContext()
    finished = RunContext(Target(pid=7, cmdline="python serve.py --password=***"),
                          RecordedSampling(mode="offline: f", duration_at_least_s=1.5),
                          partial=True).with_note("learnt after the analysis")
    report = build_report(service, results, run=finished)
    assert report.target.pid == 7
    assert report.target.cmdline == "python serve.py --password=***"
    assert report.sampling.duration_at_least_s == 1.5
    assert report.sampling.partial is True
    assert report.sampling.notes[0] == "learnt after the analysis"
    assert build_report(service, results).sampling.notes == ()


def _capture_sampling() -> CaptureSampling:
    return CaptureSampling(
        duration_s=3.9, requested_duration_s=4.0, rate_hz=29, plan="the budget", proc_interval_s=0.1,
        samples=500, samples_taken=510, errors=30, native=True, native_rate_hz=5, native_samples=40,
        native_errors=None, mode="nonblocking", processes_planned=(PlannedProcess(11, 29, 5, True),),
        processes_sampled=1, pyspy_version="0.4.0", pyspy_cpu_s=0.25, pyspy_cpu_share_of_cores=0.03)


def test_a_live_capture_writes_its_sampling_plan_start_and_load(analysed):
    service, results = analysed
    run = RunContext(Target(pid=11, pids=(11,), children=True, cpu_quota_cores=1.5),
                     LiveSampling(_capture_sampling(), 1767225600.123),
                     load=Load(41.2, concurrency=8))
    built = build_report(service, results, run=run)
    report = report_of(built.to_json())  # as written and read back
    assert report == built
    sampling = report.sampling
    assert sampling.started_at == 1767225600.123
    assert sampling.samples == 500  # py-spy's own count, not the samples read
    assert sampling.processes_planned == (PlannedProcess(pid=11, rate_hz=29, native_rate_hz=5,
                                                         busy=True),)
    assert sampling.observer.error_rate == round(30 / 530, 4)
    assert sampling.observer.warning and "6% of samples failed" in sampling.observer.warning
    assert sampling.observer.torn_stacks_possible is True
    assert report.target.pids == (11,) and report.target.children is True
    assert report.load == Load(throughput_rps=41.2, concurrency=8)
    assert "load" not in build_report(service, results, run=replace(run, load=None)).to_json()


def test_a_live_capture_writes_the_observers_cpu_beside_the_targets_and_offline_none(analysed):
    service, results = analysed
    cpu = WindowCpu(own_cpu_s=0.3, children_cpu_s=0.9, window_s=4.0, target_cpu_s=6.0,
                    target_window_s=3.9)
    run = RunContext(Target(pid=11), LiveSampling(replace(_capture_sampling(), cpu=cpu), 1.0))
    built = build_report(service, results, run=run)
    report = report_of(built.to_json())  # as written and read back
    assert report == built
    observer = report.sampling.observer
    assert (observer.observer_cpu_s, observer.observer_own_cpu_s, observer.observer_children_cpu_s,
            observer.cpu_window_s) == (1.2, 0.3, 0.9, 4.0)
    assert (observer.observer_cores, observer.target_cpu_s, observer.target_cores) == (
        0.3, 6.0, round(6.0 / 3.9, 3))
    offline = build_report(service, results).to_json()["sampling"]["observer"]
    assert not {"observer_cpu_s", "observer_cores", "target_cores"} & set(offline)
