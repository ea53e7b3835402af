"""A calibration row counts only for workloads that were not used to fit its constant (issue 42):
a fix measured on a workload its figure's constant was fitted on is never counted as evidence
that the figure predicts, and a record of such fixes only says what it was calibrated on and
that it is not yet checked elsewhere (checks/calibration.py)."""

from __future__ import annotations

import pytest

from diagnose.checks import calibration
from diagnose.checks.calibration import RECORD, MeasuredFix, fared_words, fix_words
from diagnose.checks.vectorise_gain import FIX

NOT_HELD_OUT = "not yet checked on a workload it was not fitted on"


def test_a_fitted_row_is_never_counted_as_evidence(monkeypatch):
    monkeypatch.setitem(calibration.RECORD, "made_up", (
        MeasuredFix("a held-out service", "a fix", 2.00, 2.20),
        MeasuredFix("the training fixture", "a fix", 2.00, 9.00, fitted=True),
    ))
    fared = fared_words("made_up") or ""
    assert "such predictions measured 1.10x of their figure over 1 measured fix (" in fared
    assert "4.50" not in fared  # the fitted row's ratio is in no span, median or count
    assert "2 measured fixes" not in fared
    assert "not counted: 1 fix on the training fixture" in fared
    words = fix_words("made_up", "a fix") or ""
    assert words.startswith("1 measured fix on workloads it was not fitted on: 1.10x")
    assert "4.50" not in words


def test_with_several_held_out_rows_the_fitted_ones_stay_out_of_the_span_and_the_median(monkeypatch):
    monkeypatch.setitem(calibration.RECORD, "made_up", (
        MeasuredFix("service a", "a fix", 2.00, 2.00),
        MeasuredFix("service b", "a fix", 2.00, 2.20),
        MeasuredFix("service c", "a fix", 2.00, 2.40),
        MeasuredFix("the training fixture", "a fix", 2.00, 0.50, fitted=True),
    ))
    fared = fared_words("made_up") or ""
    assert "1.00-1.20x of their figure over 3 measured fixes (median 1.10x; on service a, " \
           "service b, service c;" in fared
    assert "0.25" not in fared and "service c, the training fixture" not in fared
    assert (fix_words("made_up", "a fix") or "").endswith("1.00-1.20x of their figure")


def test_a_record_of_fitted_rows_only_says_it_is_not_yet_checked_held_out(monkeypatch):
    monkeypatch.setitem(calibration.RECORD, "made_up", (
        MeasuredFix("the training fixture", "a fix", 2.00, 2.10, fitted=True),
        MeasuredFix("a training service (its first run)", "a fix", 3.00, 3.30, fitted=True),
        MeasuredFix("a training service (its second run)", "a fix", 3.00, 3.60, fitted=True),
    ))
    expected = (f"calibrated on the training fixture and a training service; {NOT_HELD_OUT}")
    assert fared_words("made_up") == expected
    assert fix_words("made_up", "a fix") == expected
    for words in (fared_words("made_up"), fix_words("made_up", "a fix")):
        assert "measured fix" not in (words or "") and "of their figure" not in (words or "")
    assert fix_words("made_up", "another fix") is None  # nothing measured: no words at all


@pytest.mark.parametrize("check", sorted(RECORD))
def test_every_check_of_the_record_counts_only_its_held_out_rows(check):
    rows = RECORD[check]
    held_out = [f for f in rows if not f.fitted]
    fared = fared_words(check) or ""
    if held_out:
        n = len(held_out)
        assert f"over {n} measured fix{'es' if n > 1 else ''} (" in fared
        assert NOT_HELD_OUT not in fared
    else:
        assert fared.startswith("calibrated on ") and fared.endswith(NOT_HELD_OUT)
        assert "measured fix" not in fared


def test_the_rows_speedup_was_fitted_on_are_marked_fitted_and_a_held_out_row_checks_it():
    rows = RECORD["gil_contention"]
    fitted_to = [f for f in rows if f.workload.startswith(("the gil_contention fixture", "a text service"))]
    assert fitted_to and all(f.fitted for f in fitted_to)
    held_out = [f for f in rows if not f.fitted and f.fix == FIX]
    assert held_out, "the vectorised figure needs a workload SPEEDUP was not fitted on"
    words = fix_words("gil_contention", FIX) or ""
    assert words.startswith(f"{len(held_out)} measured fix")
    low, high = min(f.ratio for f in held_out), max(f.ratio for f in held_out)
    assert f"{low:.2f}" in words and f"{high:.2f}" in words
    # the fitted rows' ratios (0.98-1.32) are in neither the figure's words nor the check's
    for f in fitted_to:
        assert f"{f.ratio:.2f}x" not in words
    assert "gil_contention fixture and a text service, which its calibration was fitted on" \
        in (fared_words("gil_contention") or "")


def test_the_serializing_pools_figure_says_it_is_not_yet_checked_held_out():
    # lock_contention.SHED_OF_WAIT was fitted to the locked_blas fixture and the locked model
    assert all(f.fitted for f in RECORD["lock_contention"] if f.fix == "OPENBLAS_NUM_THREADS=1")
    assert fix_words("lock_contention", "OPENBLAS_NUM_THREADS=1") == (
        f"calibrated on the locked_blas fixture and a locked model; {NOT_HELD_OUT}")
