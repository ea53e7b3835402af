"""Latency histograms (diagnose/load/latency.py) and how the load generator fills them: HDR
percentiles, merging windows, JSON round trips, wrk's buckets and percentiles, wrk's script."""

from __future__ import annotations

import json

import pytest

from diagnose.load import latency
from diagnose.load.loadgen import LoadResult, lua_string, parse_wrk, read_wrk_buckets, wrk_script
from diagnose.load.openloop import RequestSpec


def uniform_ms(n: int = 1000):
    """1, 2, ..., n ms: the q-th percentile is q% of n."""
    hist = latency.new_histogram()
    for ms in range(1, n + 1):
        latency.record_us(hist, ms * 1000)
    return hist


def test_percentiles_match_a_known_distribution_within_hdr_precision():
    points = latency.percentiles_ms(uniform_ms())
    for name, expected in (("p50", 500), ("p90", 900), ("p95", 950), ("p99", 990),
                           ("max", 1000)):
        assert points[name] == pytest.approx(expected, rel=2e-3), name


def test_an_empty_histogram_has_no_percentiles():
    assert latency.percentiles_ms(latency.new_histogram()) == {
        "p50": None, "p90": None, "p95": None, "p99": None, "max": None}
    assert latency.percentiles_ms(None)["p99"] is None
    assert latency.mean_ms(latency.new_histogram()) is None


def test_merge_adds_every_count_so_a_rare_slow_window_sets_the_pooled_p99():
    fast = latency.new_histogram()
    latency.record_us(fast, 1000, count=980)
    slow = latency.new_histogram()
    latency.record_us(slow, 500_000, count=20)
    pooled = latency.merge([fast, None, slow])
    assert pooled.get_total_count() == 1000
    assert latency.percentiles_ms(pooled)["p99"] == pytest.approx(500, rel=2e-3)
    assert latency.percentiles_ms(pooled)["p50"] == pytest.approx(1, rel=2e-3)
    assert fast.get_total_count() == 980  # the inputs are left alone


def test_a_histogram_survives_a_json_round_trip():
    hist = uniform_ms()
    text = json.loads(json.dumps({"h": latency.encode(hist)}))["h"]
    back = latency.decode(text)
    assert back.get_total_count() == 1000
    assert latency.percentiles_ms(back) == latency.percentiles_ms(hist)


def test_latencies_outside_the_range_are_clamped_not_lost():
    hist = latency.new_histogram()
    latency.record_us(hist, 20 * 60 * 1e6)   # 20 minutes
    latency.record_us(hist, 0.2)             # under a microsecond
    assert hist.get_total_count() == 2
    assert latency.percentiles_ms(hist)["max"] == pytest.approx(600_000, rel=2e-3)


def test_wrk_buckets_become_an_exact_histogram(tmp_path):
    path = tmp_path / "buckets"
    path.write_text("150 3\n2000 1\n\n")
    hist = read_wrk_buckets(str(path))
    assert hist.get_total_count() == 4
    assert latency.percentiles_ms(hist)["p50"] == pytest.approx(0.150, rel=2e-3)
    assert latency.percentiles_ms(hist)["max"] == pytest.approx(2.0, rel=2e-3)
    assert read_wrk_buckets(str(tmp_path / "absent")) is None


def test_percentiles_alone_give_an_approximate_histogram_with_the_same_percentiles():
    points = [(50.0, 1000), (90.0, 5000), (95.0, 8000), (99.0, 20000), (100.0, 90000)]
    hist = latency.from_percentiles(points, 2000)
    read = latency.percentiles_ms(hist)
    assert hist.get_total_count() == 2000
    assert [read[k] for k in ("p50", "p90", "p95", "p99", "max")] == pytest.approx(
        [1, 5, 8, 20, 90], rel=2e-3)


WRK_OUTPUT = """Running 2s test @ http://127.0.0.1:1/
  2 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.00ms  290.22us   4.58ms   74.96%
  Latency Distribution
     50%    0.90ms
     90%    1.20ms
     99%    2.00ms
  400 requests in 2.00s, 1.80MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 30
Requests/sec:    200.00
DIAGNOSE-LATENCY-US 900.0 1200.0 1500.0 2000.0 1000.0 4580.0
DIAGNOSE-STATUS 10 20
"""


def test_wrk_output_splits_errors_by_kind_and_marks_its_histogram_approximate():
    result = parse_wrk(WRK_OUTPUT, "http://127.0.0.1:1/", 4)
    assert result.errors_by_kind == {"connect": 0, "read": 2, "write": 0, "timeout": 1,
                                     "http_4xx": 10, "http_5xx": 20}
    assert result.errors == 33
    assert result.histogram_source == "wrk-percentiles"
    assert result.histogram.get_total_count() == 400
    assert latency.percentiles_ms(result.histogram)["p99"] == pytest.approx(2.0, rel=2e-3)


def test_wrk_output_without_the_status_hook_keeps_non_2xx_unsplit():
    old = WRK_OUTPUT.replace("DIAGNOSE-STATUS 10 20\n", "")
    assert parse_wrk(old, "u", 4).errors_by_kind["http_other"] == 30


def test_a_result_reads_its_percentiles_from_the_histogram_it_is_given():
    result = LoadResult(tool="python", url="u", connections=1, duration_s=1.0, requests=1000,
                        requests_per_second=1000.0, latency_p99_ms=1.0)
    result.use_histogram(uniform_ms(), "python")
    assert result.histogram_source == "python"
    assert result.latency_p99_ms == pytest.approx(990, rel=2e-3)
    assert result.latency_avg_ms == pytest.approx(500.5, rel=2e-3)
    assert result.model == "closed" and result.schedule_lag_ms is None


def test_lua_strings_carry_any_byte_unchanged():
    assert lua_string(b'a"b\\c\n\xff') == '"a\\034b\\092c\\010\\255"'


def test_wrk_script_sets_method_body_headers_and_the_bucket_file():
    spec = RequestSpec(method="POST", path="/x", body=b'{"k": 1}',
                       headers=(("Content-Type", "application/json"),))
    script = wrk_script(spec, "/tmp/b")
    assert 'wrk.method = "POST"' in script
    assert 'wrk.body = "{\\034k\\034: 1}"' in script
    assert 'wrk.headers["Content-Type"] = "application/json"' in script
    assert 'io.open("/tmp/b", "w")' in script
