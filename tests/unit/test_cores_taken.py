"""A service starved of cores by other processes says so (cores_taken): on synthetic windows of
the counters, on the recorded neighbour scan, and on CI's blas_fanout attach beside the suite's
other tests, which read "no clear bottleneck: running native code 89%"."""

from __future__ import annotations

import dataclasses

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from diagnose.checks import cores_taken
from diagnose.checks.base import MAX_AMDAHL, NotApplicable
from diagnose.checks.registry import CHECKS
from diagnose.checks.settings import merged
from diagnose.collect import neighbours
from diagnose.collect.neighbours import Neighbour, Neighbours, NeighbourScanner
from diagnose.collect.procfs import TreeRecord
from diagnose.model.cores_held import CoresHeld
from diagnose.model.os_summary import ProcessOS
from diagnose.vocab import WARNING_SCORE
from tests.replay import replay

SETTINGS = merged()[cores_taken.ID]
SPIN = Neighbour(4242, "python spin.py --threads 2", -20, 7.6)


def _os(cpu_s=0.32, wait_s=7.9, window=4.0, runnable=2.1, cores=2, quota=None) -> ProcessOS:
    return ProcessOS(window_s=window, cores=cores, cpu_quota_cores=quota, threads_max=10, cpu_s=cpu_s,
                     cpu_utilization=cpu_s / window / cores, runqueue_wait_s=wait_s,
                     runqueue_ratio=wait_s / cpu_s if cpu_s else None, mean_runnable=runnable,
                     involuntary_ctx_per_s=500.0, voluntary_ctx_per_s=50.0, observer_stop_share=0.0,
                     rss_start=None, rss_end=None, rss_slope_bytes_per_s=None, rss_fit_r2=None,
                     machine_idle_cores=0.0)


def _held(os_=None, idle=0.0, observer: float | None = 0.1, named=(SPIN,)) -> CoresHeld:
    os_ = os_ or _os()
    neighbours = (Neighbours(window_s=os_.window_s, machine_cores=os_.cores, cpu_s=sum(n.cpu_s for n in named),
                             processes=len(named), top=tuple(named)) if named is not None else None)
    return CoresHeld(service=os_, machine_cores=os_.cores, machine_cores_measured=neighbours is not None,
                     idle_cores=idle, observer_cores=observer, neighbours=neighbours)


def _run(held):
    return cores_taken.run(SimpleNamespace(cores_held=held), SETTINGS)


def test_it_follows_the_services_own_causes_and_precedes_the_busy_threads_symptoms():
    ids = [c.id for c in CHECKS]
    for own in ("lock_contention", "gil_contention", "scheduler_overhead", "preprocess_bound", "cpu_throttled"):
        assert ids.index(own) < ids.index("cores_taken"), own
    for symptom in ("compute_bound", "cpu_bound", "underloaded"):
        assert ids.index("cores_taken") < ids.index(symptom), symptom


def test_not_applicable_without_the_machines_idle_time():
    assert isinstance(_run(None), NotApplicable)


def test_a_service_starved_by_a_niced_neighbour_names_it_what_it_got_and_what_it_wanted():
    finding = _run(_held())
    assert not isinstance(finding, NotApplicable)
    assert finding.score == 100 and finding.severity == "critical"
    assert "the service ran 0.08 cores while its threads waited 24.7 s for a core per CPU-second" in finding.summary
    assert "pid 4242 (python spin.py --threads 2, nice -20) used 1.90 cores" in finding.summary
    ev = finding.evidence
    assert ev["holders"] == {"pid 4242 (nice -20) python spin.py --threads 2": 1.9}
    assert ev["other_processes_cores"] == pytest.approx(2 - 0.08 - 0.1)  # less the service's and diagnose's
    # wanted: (0.32 CPU + 7.9 s waited) / 4 s, at most its 2 usable cores; got 0.08
    assert ev["wanted_cores"] == 2.0
    assert finding.predicted_gain == MAX_AMDAHL and "25.0x" in finding.gain_floor
    assert finding.gain_basis.startswith("estimate:") and "schedstat" in finding.gain_basis
    assert "renice +19 -p 4242" in finding.advice[1] and "pid 4242 at nice -20" in finding.advice[1]
    assert "cpuset" in finding.advice[0] and "static CPU manager" in finding.advice[0]


def test_the_gain_is_the_cores_it_wanted_over_those_it_got():
    # ran 0.5 cores, waited 2 cores' worth: wanted 2 (at most its cores), 4x
    finding = _run(_held(_os(cpu_s=2.0, wait_s=8.0, runnable=1.9)))
    assert not isinstance(finding, NotApplicable)
    assert finding.predicted_gain == pytest.approx(4.0) and finding.gain_floor is None
    assert finding.levers and finding.levers[0].gain == pytest.approx(4.0)


def test_an_older_recording_says_other_processes_without_naming_them():
    finding = _run(_held(named=None, observer=None))
    assert not isinstance(finding, NotApplicable)
    assert finding.score == 100
    assert "other processes held 1.92 of the machine's 2 cores (not named: an older recording)" in finding.summary
    assert finding.evidence["holders"] is None and "diagnose's own not measured" in finding.gain_basis
    assert "renice +19 -p PID" in finding.advice[1]


def test_its_own_threads_beyond_its_cores_are_scheduler_overheads_not_the_neighbours():
    # 6 runnable threads on 2 cores wait for a core whoever else runs
    assert _run(_held(_os(runnable=6.0))).score == 0


def test_a_machine_with_idle_cores_took_nothing_from_it():
    assert _run(_held(idle=1.0)).score == 0


def test_a_thread_that_waits_long_per_cpu_second_but_little_in_all_loses_nothing():
    # a lock's holder waiting on a remote backend: 3 s per CPU-second, 0.03 cores' worth
    assert _run(_held(_os(cpu_s=0.04, wait_s=0.12, runnable=0.1))).score == 0


def test_a_fair_share_beside_one_busy_neighbour_is_below_the_line():
    # 2 threads and one neighbour at the same nice on 2 cores: each thread runs 2/3 of the time
    finding = _run(_held(_os(cpu_s=5.3, wait_s=2.7, runnable=2.0),
                         named=(Neighbour(7, "python -c 'while True: pass'", 0, 4.0),)))
    assert finding.score < 25


def test_the_neighbours_round_trip_through_the_record_and_older_records_have_none():
    tree = TreeRecord(roots=[1], neighbours=Neighbours(4.1, 2, 7.8, 3, (SPIN,)))
    again = TreeRecord.from_dict(json.loads(json.dumps(tree.to_dict())))
    assert again.neighbours == tree.neighbours
    older = tree.to_dict()
    del older["neighbours"]
    assert TreeRecord.from_dict(older).neighbours is None


_ORPHAN = """
import os, sys, time
if os.fork():
    os._exit(0)
os.nice(5)
print(os.getpid(), flush=True)
os.close(1)  # the starter's caller stops reading here, while this one spins
os.close(2)
deadline = time.process_time() + 0.3
while time.process_time() < deadline:
    pass
time.sleep(10)
"""


def _cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_scan_names_a_busy_stranger_and_leaves_out_this_process_and_its_children(monkeypatch):
    """A process this one started (a recorder) is the observer's; an orphaned one is a neighbour."""
    monkeypatch.setattr(neighbours, "TOP", 10_000)  # every one kept: a shared machine's tests run beside
    scanner = NeighbourScanner()
    scanner.start()
    mine = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time() + 0.3\n"
                             "while time.process_time() < t: pass\ntime.sleep(10)"])
    starter = subprocess.run([sys.executable, "-c", _ORPHAN], capture_output=True, text=True, timeout=30)
    stranger = int(starter.stdout.split()[0])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and min(_cpu_s(stranger), _cpu_s(mine.pid)) < 0.25:
            time.sleep(0.05)
        found = scanner.finish(service=[])
    finally:
        mine.kill()
        mine.wait()
        os.kill(stranger, 9)  # orphaned: init reaps it
    assert found is not None and found.machine_cores == os.cpu_count()
    pids = {n.pid: n for n in found.top}
    assert mine.pid not in pids and os.getpid() not in pids
    assert stranger in pids, found
    assert pids[stranger].nice == 5 and pids[stranger].started_in_window
    assert pids[stranger].cpu_s >= 0.25 and "import os" in pids[stranger].command


def test_ci_blas_fanout_beside_the_suite_reads_cores_taken(tmp_path):
    """fixtures/recorded/blas_fanout_starved/py36_beside_the_suite: 0.08 cores used while its threads
    waited 24.6 s for a core per CPU-second, the machine never idle; it read 'none'."""
    report = replay("blas_fanout_starved", "py36_beside_the_suite", tmp_path)
    assert report.verdict.primary == "cores_taken", report.verdict
    taken = next(f for f in report.findings if f.id == "cores_taken")
    assert taken.score >= WARNING_SCORE
    assert "waited 24.6 s for a core per CPU-second" in taken.summary
    assert "other processes held 1.41 of the machine's 2 cores" in taken.summary
    assert taken.value("observer_cores").value == pytest.approx(0.51, abs=0.01)


def test_the_services_own_fan_out_stays_the_verdict_beside_cores_taken(tmp_path):
    """fixtures/recorded/blas_fanout_starved/py36_pool_spinning_in_the_kernel: 8 request threads
    fanned out into OpenBLAS's pool, queued on its mutex, while other processes held 1.4 cores and
    its threads waited 7 s for a core per CPU-second; both hold, the service's own fan-out is
    named and cores_taken is listed beside it."""
    report = replay("blas_fanout_starved", "py36_pool_spinning_in_the_kernel", tmp_path)
    assert report.verdict.primary == "scheduler_overhead", report.verdict
    taken = next(f for f in report.findings if f.id == "cores_taken")
    assert taken.score >= WARNING_SCORE


def test_the_live_attach_beside_a_niced_spinner_names_it(tmp_path):
    """fixtures/recorded/cores_taken_by_a_neighbour: the live test's own attach, recorded."""
    report = replay("cores_taken_by_a_neighbour", "compute_bound_beside_nice_minus_20", tmp_path)
    assert report.verdict.primary == "cores_taken", report.verdict
    taken = next(f for f in report.findings if f.id == "cores_taken")
    assert taken.score == 100
    assert "the service ran 0.03 cores while its threads waited 62.8 s for a core per CPU-second" in taken.summary
    assert "pid 20995 (" in taken.summary and "nice -20) used 1.92 cores" in taken.summary
    assert "renice +19 -p 20995" in taken.advice[1]
    holders = taken.value("holders")
    assert holders is not None and len(holders.value) == 1  # no other used a hundredth of a core
    # beside it, the samples read the waiting threads as computing the model
    assert next(f for f in report.findings if f.id == "compute_bound").score == 100


def test_the_children_a_service_reaps_are_its_own_work_not_a_neighbours():
    # a tool run per request (gzip): the children used 1.5 of the 2 cores; the machine had none
    # idle and no other process stood out. Counted as "other processes", they read as the
    # service starved by its neighbours.
    own = dataclasses.replace(_os(cpu_s=2.0, wait_s=8.0, runnable=2.5), reaped_children_s=6.0)
    held = _held(own, named=())
    assert held.children_cores == 1.5
    assert held.others_cores == 0.0  # 2 cores, none idle: 0.5 the service's, 1.5 its children's, 0.1 diagnose's
    assert _run(held).score == 0
    assert _run(_held(dataclasses.replace(own, reaped_children_s=0.0), named=())).score > 0
