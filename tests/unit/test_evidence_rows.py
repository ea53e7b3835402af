"""Evidence values as people read them: a label and a value with its unit, never a JSON key.
(Which keys each check declares: test_check_declarations.py.)"""

from __future__ import annotations

import re

import pytest

from diagnose.model.confidence import intervals_for
from diagnose.render.evidence import describe_evidence as _describe_evidence
from diagnose.render.evidence import (LABELS, EvidenceRow, ShownInterval, fallback_label,
                                     fmt_percent, humanize)
from diagnose.errors import BadProfile
from tests.report_data import as_finding


def describe_evidence(finding) -> list[EvidenceRow]:
    """The rows as the page shows them."""
    return _describe_evidence(as_finding(finding))


@pytest.mark.parametrize("key", sorted(LABELS))
def test_labels_are_words_not_keys(key):
    label = LABELS[key].label
    assert label != key and "_" not in label and label.strip() == label and label


def test_a_share_shows_its_interval_and_samples():
    finding = {"evidence": {"lock_wait_share": 0.35},
               "intervals": {"lock_wait_share": {"low": 0.3123, "high": 0.3891, "samples": 812}}}
    [row] = describe_evidence(finding)
    assert row.key == "lock_wait_share"
    assert row.label == "share of request-thread time waiting on locks"
    assert row.text == "35% (31\u201339%), 812 samples"
    assert row.interval == ShownInterval(low=0.3123, high=0.3891, samples=812)


def test_the_interval_is_the_asymmetric_wilson_range():
    evidence = {"app_sync_share": 0.95}
    [row] = describe_evidence({"evidence": evidence, "intervals": intervals_for(evidence, 41)})
    # near 100% the range is lopsided: shown as the range, not as +/-
    assert re.fullmatch(r"95% \(84\u201399%\), 41 samples", row.text), row.text
    assert "\u00b1" not in row.text


def test_a_share_without_an_interval_is_a_percentage():
    rows = describe_evidence({"evidence": {"core_utilization_from_samples": 0.4567,
                                           "intra_op_sync_share_95_low": 0.61},
                              "intervals": {"intra_op_sync_share_95_low": {"low": 0.5, "high": 0.7,
                                                                           "samples": 90}}})
    # a lower bound is not itself given an interval
    assert [r.text for r in rows] == ["46%", "61%"]


@pytest.mark.parametrize("share,text", [(0, "0%"), (0.0004, "<0.1%"), (0.05, "5.0%"), (0.0834, "8.3%"),
                                        (0.35, "35%"), (0.999, "99.9%"), (0.99996, ">99.9%"),
                                        (1.0, "100%")])
def test_percentages(share, text):
    assert fmt_percent(share) == text


def _texts(evidence: dict) -> dict:
    return {r.key: r.text for r in describe_evidence({"evidence": evidence})}


def test_every_unit_is_written_out():
    texts = _texts({
        "lock_wait_thread_seconds": 1.2534, "estimated_blocking_per_request_s": 0.045,
        "involuntary_ctx_per_s": 3200.4, "rss_growth_mb_per_s": 1.5, "rss_end_mb": 512.26,
        "usable_cores": 4, "cores_in_use": 1.0, "request_threads": 8, "stage_threads": 1,
        "busy_request_threads": 2.353, "core_room": 1.5612, "predicted_gain": 2,
        "stage_fans_out_to_cores": False, "submit_site_seen": True, "busy_samples": 1234,
        "workers": 3, "call_sites": 1, "pid": 43210, "loop_thread": "MainThread",
        "runqueue_wait_per_cpu_second": 0.42, "rss_fit_r2": 0.9731, "cgroup_cpu_quota_cores": None,
        "os_cpu_utilization": None, "handler": None,
    })
    assert texts == {
        "lock_wait_thread_seconds": "1.25 s", "estimated_blocking_per_request_s": "45 ms",
        "involuntary_ctx_per_s": "3,200 /s", "rss_growth_mb_per_s": "1.5 MB/s",
        "rss_end_mb": "512.3 MB", "usable_cores": "4 cores", "cores_in_use": "1 core",
        "request_threads": "8 threads", "stage_threads": "1 thread",
        "busy_request_threads": "2.35 threads", "core_room": "1.56\u00d7",
        "predicted_gain": "2.00\u00d7", "stage_fans_out_to_cores": "no", "submit_site_seen": "yes",
        "busy_samples": "1,234 samples", "workers": "3 processes", "call_sites": "1 call site",
        "pid": "43210", "loop_thread": "MainThread", "runqueue_wait_per_cpu_second": "420 ms",
        "rss_fit_r2": "0.973", "cgroup_cpu_quota_cores": "no quota",
        "os_cpu_utilization": "not measured", "handler": "not seen",
    }


def test_dicts_are_name_value_lists_in_their_unit():
    rows = {r.key: r for r in describe_evidence({"evidence": {
        "waiting_on_it": {"decode": 0.4, "postprocess": 0.125},
        "cores_busy_per_worker": {"4341": 0.98, "4342": 1.0},
        "intra_op_sync_functions": {"blas_thread_server": 812},
        "self_time": {}}})}
    assert rows["waiting_on_it"].items == (("decode", "40%"), ("postprocess", "13%"))
    assert rows["waiting_on_it"].text == "decode: 40%; postprocess: 13%"
    assert rows["cores_busy_per_worker"].text == "4341: 0.98 cores; 4342: 1 core"
    assert rows["intra_op_sync_functions"].text == "blas_thread_server: 812 samples"
    assert rows["self_time"].text == "none" and rows["self_time"].items == ()


def test_fix_is_left_out_and_the_order_kept():
    keys = [r.key for r in describe_evidence({"evidence": {
        "pool_wait_share": 0.3, "fix": {"knob": "pool_size", "value": 8}, "request_threads": 8,
        "acquire_site": "app/db.py:12"}})]
    assert keys == ["pool_wait_share", "request_threads", "acquire_site"]


def test_estimated_values_say_so():
    estimated = _texts({"gil_wait_share": 0.2, "estimated": True, "cpu_seconds": 3.0})
    # cpu_seconds is measured by the OS: not an estimate
    assert estimated == {"gil_wait_share": "20% (estimated)", "estimated": "yes",
                         "cpu_seconds": "3 s"}
    measured = _texts({"gil_wait_share": 0.2, "estimated": False})
    assert measured["gil_wait_share"] == "20%"
    rows = describe_evidence({"evidence": {"lock_wait_share": 0.5, "calibrated": True},
                              "intervals": {"lock_wait_share": {"low": 0.4, "high": 0.6,
                                                                "samples": 100}}})
    assert rows[0].text == "50% (40\u201360%), 100 samples (calibrated)"
    assert rows[0].flag == "calibrated"


@pytest.mark.parametrize("key,value,text", [
    ("queue_depth_share", 0.25, "25%"), ("flush_s", 1.25, "1.25 s"), ("retries_per_s", 12, "12 /s"),
    ("heap_mb", 64, "64 MB"), ("spare_cores", 2, "2 cores"), ("spare_threads", 3, "3 threads"),
    ("dropped_samples", 7, "7 samples"), ("mystery_flag", True, "yes"), ("weird_text", "abc", "abc"),
    ("gc_pause_seconds", 0.002, "2 ms"), ("spread_ratio", 0.3333, "0.333"),
    ("lag_by_queue_share", {"a": 0.5}, "a: 50%"), ("odd_value", None, "\u2014"),
])
def test_an_unknown_key_is_humanized_with_a_unit_from_its_suffix(key, value, text):
    [row] = describe_evidence({"evidence": {key: value}})
    assert row.text == text
    assert row.label != key and "_" not in row.label, row.label


def test_humanized_keys_spell_out_abbreviations_and_drop_units():
    assert humanize("gil_wait_thread_s") == "GIL wait thread"
    assert humanize("rss_peak_mb") == "resident memory peak"
    assert humanize("voluntary_ctx_per_s") == "voluntary context switches"
    assert humanize("loop_cpu_share_os") == "loop CPU share (OS)"
    assert humanize("_") == "value"
    assert fallback_label("new_thing_share").label == "new thing share"


def test_a_finding_without_evidence_gives_no_rows_and_odd_evidence_is_not_a_report():
    assert describe_evidence({}) == []
    with pytest.raises(BadProfile, match="evidence"):
        describe_evidence({"evidence": "odd"})
