"""What a finding says about its gain beyond the figure: what its check could not see in this
data (and the gain a floor when that could only add to the cause), the floor a check knows of
itself (gil_contention's waits-only figure), and how predictions of its gain fared when measured
(checks/calibration.py). Recorded profiles analysed in-process, with and without their /proc
record and native samples."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from diagnose.checks import logging_lock
from diagnose.checks.calibration import RECORD, fared_words
from diagnose.checks.engine import annotated
from diagnose.checks.registry import CHECKS
from diagnose.render.markdown import render_markdown
from diagnose.render.wording import gain_notes, gain_words
from diagnose.report.model import Finding, Lever
from diagnose.run.pipeline import from_file
from diagnose.vocab import LeverKind, WaitKind
from diagnose.report.model.sections import WaitSite
from tests.conftest import RECORDED, report_of

CHECKS_BY_ID = {check.id: check for check in CHECKS}


def _findings(tmp_path: Path, name: str, companions: bool, kind: str = "speedscope") -> dict[str, Finding]:
    procfs = RECORDED / f"{name}.procfs.json" if companions else None
    native = RECORDED / f"{name}.native.speedscope.json" if companions else None
    native = native if native is not None and native.exists() else None
    outputs = from_file(RECORDED / f"{name}.{kind}.json", tmp_path, None, procfs, native)
    return {f.id: f for f in report_of(outputs.json).findings}


def _blind(native: bool = False, counters: bool = False) -> SimpleNamespace:
    """An analysis as the engine tests it: with or without native frames and OS counters."""
    counted = SimpleNamespace(window_s=10.0, cpu_s=10.0, usable_cores=2.0, machine_idle_cores=None)
    return SimpleNamespace(profile=SimpleNamespace(native=native, calibrated=False),
                           os=counted if counters else None)


def test_a_lock_wait_seen_without_native_frames_or_counters_says_so_and_its_gain_is_a_floor():
    seen = Finding(id="lock_contention", score=80, predicted_gain=1.6, gain_basis="estimate")
    lock = annotated(CHECKS_BY_ID["lock_contention"], seen, _blind())
    assert [u.split(" ")[0] for u in lock.unseen] == ["native", "OS"]
    assert lock.gain_floor is not None and "native frames and OS counters were not seen" in lock.gain_floor
    words = gain_words(lock)
    assert words.estimate == "(estimate, lower bound)"
    assert any(n.startswith("×1.60 is a lower bound") for n in words.notes)
    only_native = annotated(CHECKS_BY_ID["lock_contention"], seen, _blind(counters=True))
    assert only_native.gain_floor is not None and only_native.gain_floor.startswith("native frames were")
    # a finding without a figure has nothing to bound, but still says what it could not see
    none = annotated(CHECKS_BY_ID["lock_contention"], Finding(id="lock_contention"), _blind())
    assert none.gain_floor is None and len(none.unseen) == 2


def test_with_native_frames_and_counters_nothing_is_unseen(tmp_path):
    lock = _findings(tmp_path, "lock_contention", companions=True)["lock_contention"]
    assert lock.unseen == ()
    # recorded beside another job holding the other core: the figure is that machine's floor,
    # not a blind spot's
    assert lock.gain_floor is not None and "were not seen" not in lock.gain_floor
    assert lock.gain_floor.startswith("the 0.00 cores the machine left idle capped it")


def test_a_check_whose_unseen_input_could_move_it_either_way_names_it_without_a_floor():
    # compute_bound uses the OS counters, but they could lower its share as well as raise it
    seen = Finding(id="compute_bound", score=100, predicted_gain=1.0)
    compute = annotated(CHECKS_BY_ID["compute_bound"], seen, _blind())
    assert any(u.startswith("OS counters") for u in compute.unseen)
    assert compute.gain_floor is None


def test_the_gil_figure_is_always_the_floor_of_vectorising_and_its_lever_is_tagged(tmp_path):
    gil = _findings(tmp_path, "preprocess_bound", companions=True)["gil_contention"]
    assert gil.gain_floor is not None and "GIL waits alone" in gil.gain_floor
    ranked = [lever for lever in gil.levers if lever.gain == gil.predicted_gain and not lever.upper_bound]
    assert ranked, gil.levers
    words = gain_words(gil)
    tags = {w.text.split(" ")[0]: w.estimate for w in words.levers}
    assert tags[f"×{gil.predicted_gain:.2f}"] == "(estimate, lower bound)"
    assert all(w.estimate == "(estimate, upper bound)" for lever, w in zip(gil.levers, words.levers)
               if lever.upper_bound)


def test_a_measured_check_states_how_its_predictions_fared_and_an_unmeasured_one_does_not(tmp_path):
    found = _findings(tmp_path, "lock_contention", companions=True)
    lock = found["lock_contention"]
    # the fixes of this finding's own lever (its knob), and those of the check's only lever
    knob = lock.evidence.get("fix", {}).get("knob")
    ratios = [f.measured / f.predicted for f in RECORD["lock_contention"]
              if not f.fitted and f.knob in (None, knob)]
    assert lock.fared == fared_words("lock_contention", knob)
    assert f"{min(ratios):.2f}-{max(ratios):.2f}x" in (lock.fared or "")
    assert f"{len(ratios)} measured fixes" in (lock.fared or "")
    assert any(n.startswith("How such predictions fared") for n in gain_words(lock).notes)
    assert fared_words("compute_bound") is None and found["compute_bound"].fared is None


def test_the_summary_keeps_bounds_and_blind_spots_but_not_the_calibration():
    seen = Finding(id="lock_contention", score=80, predicted_gain=1.6)
    lock = annotated(CHECKS_BY_ID["lock_contention"], seen, _blind())
    notes = gain_notes(lock, fared=False)
    assert notes and not any("fared" in n for n in notes)
    assert len(gain_notes(lock)) == len(notes) + 1


def test_a_floor_on_a_lever_that_is_not_the_ranked_figure_leaves_its_tag_alone():
    lever = Lever(LeverKind.MORE_CORES, 3.0, "from more cores", "estimate")
    finding = Finding(id="x", predicted_gain=1.5, gain_floor="why", levers=(lever,))
    assert gain_words(finding).levers[0].estimate == "(estimate)"


def _logging_analysis(stacks: list[tuple[str, str]], counts: list[int]) -> SimpleNamespace:
    """One frame per stack, `(file, function)`, and the request samples' counts per stack."""
    frames = [SimpleNamespace(file=file, function=function) for file, function in stacks]
    samples = pd.DataFrame({"stack": np.arange(len(stacks)), "count": counts})
    profile = SimpleNamespace(frames=frames,
                              stacks_with_any=lambda marks: np.asarray(marks, dtype=bool))
    return SimpleNamespace(profile=profile, request_samples=lambda: samples)


def test_the_handler_share_counts_waiting_and_working_inside_a_logging_handler():
    analysis = _logging_analysis(
        [("/usr/lib/python3.11/logging/__init__.py", "StreamHandler.emit"),
         ("/usr/lib/python3.11/logging/__init__.py", "Handler.handle"),
         ("/usr/lib/python3.11/logging/__init__.py", "Logger.isEnabledFor"),
         ("/srv/app/model.py", "emit")],  # an app's own `emit` is not logging
        [30, 20, 10, 40])
    assert logging_lock._in_handler_share(analysis) == pytest.approx(0.5)


def test_no_handler_frame_means_no_handler_share():
    analysis = _logging_analysis([("/srv/app/model.py", "forward")], [10])
    assert logging_lock._in_handler_share(analysis) == 0.0


def test_the_summary_renders_the_notes_as_plain_lines(tmp_path):
    procfs = RECORDED / "late_thread.procfs.json"
    outputs = from_file(RECORDED / "late_thread.chrometrace.json", tmp_path, None, procfs, None)
    text = render_markdown(report_of(outputs.json))
    assert "\n**Note:** Not seen in this data: native frames" in text
    assert "How such predictions fared" not in text


def test_a_gain_at_the_amdahl_cap_is_a_floor_of_large():
    capped = annotated(CHECKS_BY_ID["logging_lock"], Finding(id="logging_lock", score=100, predicted_gain=20.0),
                       _blind(counters=True))
    assert capped.gain_floor is not None and "capped at 20x" in capped.gain_floor
    below = annotated(CHECKS_BY_ID["logging_lock"], Finding(id="logging_lock", score=100, predicted_gain=7.0),
                      _blind(counters=True))
    assert below.gain_floor is None


def test_a_gil_whose_holders_mostly_preprocess_acts_on_the_preprocessing(tmp_path):
    found = _findings(tmp_path, "preprocess_bound", companions=True)
    assert found["preprocess_bound"].acts_on == "preprocess"
    assert found["gil_contention"].acts_on == "preprocess"
    shares = found["gil_contention"].value("holder_phase_shares")
    assert shares is not None and dict(shares.value)["preprocess"] >= 0.5


def _saturated_logging(thread_seconds: float) -> SimpleNamespace:
    """8 request threads over a 5 s window, all of it inside StreamHandler.emit, waiting on its lock
    `thread_seconds` in all."""
    analysis = _logging_analysis([("/usr/lib/python3.11/logging/__init__.py", "StreamHandler.emit")], [800])
    site = WaitSite(kind=WaitKind.LOGGING, function="handle_request", file="/srv/app/server.py", line=9,
                    samples=700, thread_seconds=thread_seconds, threads=8, share=thread_seconds / 40)
    analysis.waits = [site]
    analysis.os = SimpleNamespace(window_s=5.0, cpu_s=0.5, usable_cores=2.0, machine_idle_cores=1.5)
    return analysis


def test_a_handler_lock_waited_on_back_to_back_says_its_sink_is_at_capacity():
    # the logging_lock fixture: 6.8 of 8 threads waited on average; its QueueHandler measured 39x
    # with 97% of the records dropped by the full queue, since the sink wrote no faster
    settings = logging_lock.Settings()
    busy = logging_lock.run(_saturated_logging(34.0), settings)
    assert busy.value("mean_waiters").value == pytest.approx(6.8)
    assert "its sink is at capacity (6.8 threads waited for it on average)" in busy.summary
    assert busy.advice[-1] == logging_lock.SATURATED_ADVICE
    # under one waiter on average the handler had idle time: no such claim
    light = logging_lock.run(_saturated_logging(2.0), settings)
    assert "capacity" not in light.summary and logging_lock.SATURATED_ADVICE not in light.advice


def test_a_finding_is_told_how_its_own_levers_fixes_fared_not_another_levers():
    """gil_contention has three levers, each measured apart: vectorising the holder's loop, the
    call releasing the GIL, an instance per thread. A held-asleep finding hears of the GIL
    released, not of the vectorised loops."""
    asleep = fared_words("gil_contention", "release_gil") or ""
    assert "the call releasing the GIL on the gil_held_asleep fixture" in asleep
    assert "vectorised" not in asleep
    shared = fared_words("gil_contention", "per_thread_instance") or ""
    assert "a connection per thread" in shared and "vectorised" not in shared
    assert "vectorised" in (fared_words("gil_contention", "vectorize") or "")


def test_the_fared_words_count_the_findings_own_knobs_and_not_the_checks_other_levers():
    gil = CHECKS_BY_ID["gil_contention"]
    one = Finding(id="gil_contention", predicted_gain=2.0,
                  evidence={"fix": {"knob": "vectorize", "value": "loop"}})
    several = Finding(id="gil_contention", predicted_gain=2.0,
                      evidence={"fix": [{"knob": "vectorize", "value": "loop"},
                                        {"knob": "release_gil", "value": "call"}]})
    assert fared_words("gil_contention", "vectorize") != fared_words("gil_contention")
    assert annotated(gil, one, _blind()).fared == fared_words("gil_contention", "vectorize")
    # several levers: the fixes of each count, not those of the check's other levers
    assert annotated(gil, several, _blind()).fared == fared_words("gil_contention", ("vectorize", "release_gil"))
    assert "vocab_per_request" in (fared_words("gil_contention") or "")  # call_less's fix: another lever
    assert "vocab_per_request" not in (annotated(gil, several, _blind()).fared or "")
    # gc_pressure's freeze is two knobs applied together: its fixes count, a gc.collect() dropped not
    gc = Finding(id="gc_pressure", predicted_gain=1.4,
                 evidence={"fix": [{"knob": "gc_freeze", "value": True},
                                   {"knob": "gc_threshold", "value": [50000, 20, 100]}]})
    freeze = annotated(CHECKS_BY_ID["gc_pressure"], gc, _blind()).fared or ""
    assert "gc_heavy" in freeze and "dropped" not in freeze
    assert "dropped" in (fared_words("gc_pressure") or "")


def _on_a_machine(used: float, idle: float, usable: float = 2.0) -> SimpleNamespace:
    """An analysis whose process used `used` cores while the machine left `idle` idle."""
    os_ = SimpleNamespace(window_s=10.0, cpu_s=10.0 * used, usable_cores=usable,
                          machine_idle_cores=idle)
    return SimpleNamespace(profile=SimpleNamespace(native=True, calibrated=True), os=os_)


def test_a_gain_capped_by_cores_other_processes_held_is_a_lower_bound_naming_them():
    # remote_backend's lock finding beside other jobs: 1.00 core in use, 0.02 idle, so the
    # cores allowed 1.02x; the fix measured 1.68x once the other jobs were gone
    analysis = _on_a_machine(used=1.0, idle=0.02)
    seen = Finding(id="lock_contention", score=80, predicted_gain=1.02, gain_basis="estimate")
    lock = annotated(CHECKS_BY_ID["lock_contention"], seen, analysis)
    assert lock.gain_floor is not None
    assert "0.02 cores the machine left idle capped it" in lock.gain_floor
    assert "other processes used 0.98 of the 2 usable cores" in lock.gain_floor
    assert "up to 2.00x" in lock.gain_floor
    assert gain_words(lock).estimate == "(estimate, lower bound)"


def test_a_gain_the_idle_cores_did_not_set_is_no_floor():
    analysis = _on_a_machine(used=1.0, idle=0.02)
    below_the_cap = Finding(id="lock_contention", score=80, predicted_gain=1.01)
    assert annotated(CHECKS_BY_ID["lock_contention"], below_the_cap, analysis).gain_floor is None
    # the machine's cores were the service's own: nothing for others to give back
    alone = _on_a_machine(used=1.9, idle=0.05)
    capped = Finding(id="lock_contention", score=80, predicted_gain=round(1.95 / 1.9, 2))
    assert annotated(CHECKS_BY_ID["lock_contention"], capped, alone).gain_floor is None


def test_a_capped_amdahl_figure_is_a_floor_never_an_upper_bound():
    """Past its cap Amdahl's figure understates the bound: "if X cost nothing, at most 20x (an
    upper bound)" beside the engine's "20x is a lower bound" said both of one figure (a QueueHandler
    measured 42x at the 20x cap; a gc.collect() per request 251x at the 4x CPU-share cap)."""
    from diagnose.checks.base import MAX_CPU_SHARE, cpu_share_lever, remove_work_lever

    capped = remove_work_lever(0.999, "postprocess", "the GIL's holders")
    assert not capped.upper_bound and "at least 20.00x" in capped.basis and "a floor" in capped.basis
    below = remove_work_lever(0.5, "postprocess", "the GIL's holders")
    assert below.upper_bound and "at most 2.00x" in below.basis
    for share, floor in ((0.99, True), (MAX_CPU_SHARE, False), (0.5, False)):
        lever = cpu_share_lever("if the collector cost nothing", "the collector is", share)
        assert lever.upper_bound is not floor and ("a floor" in lever.basis) is floor, (share, lever)
