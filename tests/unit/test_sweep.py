"""The sweep's policy on synthetic services: stability per step, the stop rules, the knee, and
who set the top of the curve. The measuring function is the only thing replaced; the loop, the
judgements, the JSON and the HTML are the code `diagnose sweep` runs."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest

from diagnose.load.loadgen import LoadResult, parse_wrk
from diagnose.render.sweep_html import render_sweep_html
from diagnose.load.sweep_steps import (CpuMeter, CpuReading, Step, Window, doubling_levels,
                            find_knee, parse_levels, plateaued, run_sweep, summarize,
                            sweep_report)
from diagnose.report.step_diagnosis import StepDiagnosis
from diagnose.report.load_report import GeneratorInfo, SweepReport, SweepSettings, SweepTarget


def closed_loop_service(capacity_rps: float, service_ms: float, gen_cores=lambda c, rps: 0.1,
                        noise=lambda call: 1.0, errors=lambda c: 0):
    """A service with `capacity_rps` that takes `service_ms` per request when idle, under a
    closed loop of c connections: rps = min(c / service time, capacity), latency by Little's
    law (c / rps). Returns (measure, calls)."""
    calls = []

    def measure(connections: int, seconds: int) -> LoadResult:
        connections = int(connections)
        calls.append((connections, seconds))
        rps = min(connections / (service_ms / 1e3), capacity_rps) * noise(len(calls))
        latency_ms = connections / rps * 1e3
        return LoadResult(tool="wrk", url="http://127.0.0.1:1/", connections=connections,
                          duration_s=float(seconds), requests=int(rps * seconds),
                          requests_per_second=rps, latency_p50_ms=latency_ms,
                          latency_p90_ms=latency_ms * 1.3, latency_p95_ms=latency_ms * 1.5,
                          latency_p99_ms=latency_ms * 2, threads=2,
                          generator_cpu_s=gen_cores(connections, rps) * seconds,
                          wall_s=float(seconds), non_2xx=errors(connections))
    return measure, calls


SETTINGS = SweepSettings(levels=(1, 2, 4, 8, 16, 32, 64), window_s=1, warmup_s=1, patience=2)


def test_saturating_service_has_its_knee_where_p99_starts_outgrowing_throughput():
    # 10 ms per request, 400 req/s at most: c=4 gives 400; from 4 to 8 p99 doubles while
    # throughput stays, so the knee is 4.
    measure, calls = closed_loop_service(capacity_rps=400, service_ms=10)
    result = run_sweep(SETTINGS, measure)
    summary = summarize(result)
    assert summary.knee.concurrency == 4
    assert summary.capacity_rps == pytest.approx(400)
    assert summary.limited_by == "service"
    assert summary.saturated is True
    assert summary.operating_point_rps == pytest.approx(320)
    # p99 at the knee is 4 connections / 400 req/s × 2 = 20 ms; at c=1 it was 20 ms too
    assert summary.knee.p99_ms == pytest.approx(20)
    # Stopped by the plateau: 8 and 16 gained nothing over 4; 32 and 64 were never loaded.
    assert [s.concurrency for s in result.steps] == [1, 2, 4, 8, 16]
    assert result.stop_reason.startswith("plateau")
    assert max(c for c, _ in calls) == 16
    assert "the knee is at concurrency 4" in summary.headline
    assert "capacity 400 req/s" in summary.headline
    assert summary.knee.reason == ("from concurrency 4 to concurrency 8 p99 grew ×2.00 "
                                         "(20.0 ms → 40.0 ms) while throughput grew ×1.00 "
                                         "(400 → 400 req/s)")


def test_every_step_warms_up_then_stops_at_three_agreeing_windows():
    measure, calls = closed_loop_service(capacity_rps=400, service_ms=10)
    result = run_sweep(SweepSettings(levels=(1, 2), window_s=2, warmup_s=3), measure)
    # per step: one warm-up of 3 s, then three 2 s windows that agree exactly
    assert calls == [(1, 3), (1, 2), (1, 2), (1, 2), (2, 3), (2, 2), (2, 2), (2, 2)]
    assert all(s.stable and len(s.windows) == 3 for s in result.steps)
    assert all(s.warmup is not None for s in result.steps)


def test_a_step_that_never_settles_is_measured_to_the_limit_and_marked_unstable():
    # ±30% alternating throughput: never within 10% of the mean over three windows
    measure, calls = closed_loop_service(400, 10, noise=lambda n: 1.3 if n % 2 else 0.7)
    settings = SweepSettings(levels=(1,), window_s=1, warmup_s=0, max_windows=5)
    result = run_sweep(settings, measure)
    step = result.steps[0]
    assert not step.stable
    assert len(step.windows) == 5
    assert summarize(result).unstable_levels == ("concurrency 1",)


def test_throughput_still_growing_at_the_last_level_is_not_called_a_knee():
    measure, _ = closed_loop_service(capacity_rps=10_000, service_ms=10)
    result = run_sweep(SweepSettings(levels=(1, 2, 4), window_s=1, warmup_s=0), measure)
    summary = summarize(result)
    assert summary.limited_by == "not reached"
    assert summary.saturated is False
    assert "sweep higher" in summary.headline
    assert summary.knee is None
    assert result.stop_reason == "levels exhausted"


def test_a_generator_out_of_cpu_is_named_as_the_limit_not_the_service():
    # The generator burns one core per 100 req/s: at 200 req/s it has used both its cores.
    measure, _ = closed_loop_service(capacity_rps=200, service_ms=10,
                                     gen_cores=lambda c, rps: rps / 100)
    result = run_sweep(SETTINGS, measure)
    summary = summarize(result)
    assert summary.limited_by == "generator"
    assert "lower bound" in summary.headline
    assert any("2.00 of the 2 cores" in r for r in summary.generator_limits)


def test_a_step_near_the_measured_generator_ceiling_is_generator_limited():
    measure, _ = closed_loop_service(capacity_rps=900, service_ms=1)
    settings = SweepSettings(levels=(1, 2, 4), window_s=1, warmup_s=0,
                             generator_ceiling_rps=1000)
    summary = summarize(run_sweep(settings, measure))
    assert summary.limited_by == "generator"
    assert any("90% of the load generator's measured ceiling" in r
               for r in summary.generator_limits)
    # 900 req/s against a ceiling of 2,000 is not near it
    settings = SweepSettings(levels=(1, 2, 4), window_s=1, warmup_s=0,
                             generator_ceiling_rps=2000)
    assert summarize(run_sweep(settings, measure)).limited_by != "generator"


def test_a_full_machine_where_the_generator_holds_a_large_share_is_generator_limited():
    step_windows = []
    measure, _ = closed_loop_service(capacity_rps=400, service_ms=10,
                                     gen_cores=lambda c, rps: 0.9)
    result = run_sweep(SweepSettings(levels=(1, 2), window_s=1, warmup_s=0), measure)
    step = result.steps[-1]
    # Replace the windows' machine reading: 2 cores, both busy; the generator held 0.9.
    step.windows = [Window(**{**vars(w), "machine_busy_cores": 2.0}) for w in step.windows]
    step_windows.extend(step.windows)
    reasons = step.generator_limits(cores=2, ceiling_rps=None)
    assert reasons == ["the machine's 2 cores were busy (2.00) and the load generator held "
                       "0.90 of them"]
    assert step.generator_limits(cores=4, ceiling_rps=None) == []  # 4 cores: not full


def test_errors_above_one_percent_stop_the_sweep():
    measure, calls = closed_loop_service(400, 10, errors=lambda c: 50 if c >= 4 else 0)
    result = run_sweep(SETTINGS, measure)
    assert [s.concurrency for s in result.steps] == [1, 2, 4]
    assert result.stop_reason.startswith("errors:")
    assert max(c for c, _ in calls) == 4
    summary = summarize(result)
    # the failing level counts for nothing: the best is concurrency 2, and errors stopped it
    assert summary.limited_by == "errors"
    assert summary.capacity_rps == pytest.approx(200)
    assert summary.knee is None  # up to 2, latency never outgrew throughput


def test_an_slo_on_p99_stops_the_sweep_at_the_first_level_past_it():
    measure, _ = closed_loop_service(400, 10)
    settings = SweepSettings(levels=(1, 2, 4, 8, 16), window_s=1, warmup_s=0, patience=4,
                             slo_p99_ms=50)
    result = run_sweep(settings, measure)
    # p99 = 2 × c / rps: 20 ms up to c=4, 40 ms at 8, 80 ms at 16
    assert [s.concurrency for s in result.steps] == [1, 2, 4, 8, 16]
    assert result.stop_reason.startswith("SLO: p99 80.0 ms passed 50 ms at concurrency 16")


def test_by_default_two_steps_without_5_percent_more_throughput_stop_the_sweep():
    measure, _ = closed_loop_service(400, 10)
    result = run_sweep(SweepSettings(levels=(1, 2, 4, 8, 16, 32), window_s=1, warmup_s=0),
                       measure)
    assert [s.concurrency for s in result.steps] == [1, 2, 4, 8, 16]


def test_plateau_and_knee_rules():
    class S:
        def __init__(self, rps):
            self.rps = rps
    steps = [S(100), S(200), S(204), S(206), S(190)]
    assert plateaued(steps, 0.05, 3)          # 206 < 1.05 × 200
    assert not plateaued(steps, 0.05, 4)      # 206 > 1.05 × 100
    assert not plateaued(steps[:2], 0.05, 2)  # too few steps


def _step(level, rps, p99_ms, model="closed"):
    window = Window(rps=rps, requests=int(rps), errors=0, attempts=int(rps), duration_s=1.0,
                    p50_ms=p99_ms / 2, p90_ms=None, p95_ms=None, p99_ms=p99_ms,
                    generator_cores=0.1, generator_capacity_cores=1.0, service_cores=None,
                    machine_busy_cores=None)
    return Step(level, model, windows=[window], judged_on=1)


def test_the_knee_is_the_step_after_which_p99_grows_faster_than_throughput():
    steps = [_step(1, 100, 10), _step(2, 190, 11), _step(4, 300, 14), _step(8, 320, 30)]
    index, reason = find_knee(steps)
    assert index == 2  # 4 → 8: p99 ×2.14, throughput ×1.07
    assert reason.startswith("from concurrency 4 to concurrency 8 p99 grew ×2.14")
    # within the 10% margin: p99 ×1.15 against throughput ×1.07 is no knee
    assert find_knee([_step(1, 100, 10), _step(2, 107, 11.5)]) is None
    assert find_knee([]) is None and find_knee([_step(1, 100, 10)]) is None
    # the open model: offered rates
    open_steps = [_step(10, 10, 5, "open"), _step(20, 20, 5, "open"), _step(40, 25, 900, "open")]
    index, reason = find_knee(open_steps)
    assert index == 1 and reason.startswith("from 20 req/s to 40 req/s p99 grew ×180.00")


def test_levels_from_options():
    assert doubling_levels(1, 64) == (1, 2, 4, 8, 16, 32, 64)
    assert doubling_levels(3, 20) == (3, 6, 12, 20)
    assert parse_levels("1, 2,8") == (1, 2, 8)
    with pytest.raises(ValueError):
        parse_levels("1,two")
    with pytest.raises(ValueError):
        SweepSettings(levels=(4, 2))
    with pytest.raises(ValueError):
        SweepSettings(levels=(0, 2))
    assert parse_levels("10, 20.5", float) == (10.0, 20.5)
    with pytest.raises(ValueError):
        SweepSettings(levels=(1.5, 2))  # half a connection
    assert SweepSettings(levels=(0.5, 2.5), model="open").level_name == "rate"
    with pytest.raises(ValueError):
        SweepSettings(levels=(1, 2), model="half-open")


def test_window_cpu_comes_from_the_readings_around_it():
    result = LoadResult(tool="wrk", url="u", connections=4, duration_s=2.0, requests=800,
                        requests_per_second=400.0, threads=2, generator_cpu_s=0.5, wall_s=2.0)
    w = Window.from_load(result, CpuReading(10.0, 5.0, 100.0), CpuReading(12.0, 7.4, 101.0),
                         cores=2)
    assert w.service_cores == pytest.approx(1.2)       # 2.4 CPU-s over 2 s
    assert w.machine_busy_cores == pytest.approx(1.5)  # 2 cores - 1 idle s / 2 s
    assert w.generator_cores == pytest.approx(0.25)
    assert w.generator_capacity_cores == 2.0


def test_the_cpu_meter_reads_this_process_tree():
    # A busy child of its own: the test process's tree gains and loses other tests' children
    # (an exited one takes its CPU out of the sum), so it is not read here.
    import subprocess
    import sys
    import time as _time
    busy = "import time\nend = time.process_time() + 5\nwhile time.process_time() < end: pass"
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        meter = CpuMeter([child.pid])
        a = meter.read()
        deadline = _time.monotonic() + 10  # a loaded machine may give it a slice of a core
        b = meter.read()
        while b.service_cpu_s - a.service_cpu_s < 0.2 and _time.monotonic() < deadline:
            _time.sleep(0.1)
            b = meter.read()
        assert b.service_cpu_s - a.service_cpu_s >= 0.2
    finally:
        child.kill()
        child.wait()
    assert CpuMeter([]).read().service_cpu_s is None


def test_the_wrk_hook_line_gives_p95_and_exact_percentiles():
    text = ("  Latency Distribution\n     50%    1.40ms\n     90%    1.80ms\n     99%    2.90ms\n"
            "  1000 requests in 1.00s, 100.00KB read\nRequests/sec:   1000.00\n"
            "DIAGNOSE-LATENCY-US 1402.0 1801.0 2100.5 2903.0 1500.2 3001.0\n")
    r = parse_wrk(text, "u", 8)
    assert (r.latency_p50_ms, r.latency_p95_ms, r.latency_p99_ms) == (1.402, 2.1005, 2.903)
    assert r.latency_max_ms == 3.001
    without = parse_wrk(text.rsplit("DIAGNOSE", 1)[0], "u", 8)
    assert without.latency_p95_ms is None and without.latency_p99_ms == 2.9


def _report(capacity=400, target=None):
    measure, _ = closed_loop_service(capacity_rps=capacity, service_ms=10)
    result = run_sweep(SETTINGS, measure)
    return sweep_report(result, target or SweepTarget(url="http://127.0.0.1:1/predict", pids=(42,)),
                        GeneratorInfo(tool="wrk", threads=2))


def test_the_json_report_follows_the_sweep_contract():
    written = json.loads(json.dumps(_report().to_json()))
    # the contract's keys, as written
    assert list(written.items())[:2] == [("schema_version", 2), ("kind", "sweep")]
    assert {"schema_version", "kind", "target", "steps", "knee"} <= set(written)
    for step in written["steps"]:
        assert {"concurrency", "requests", "throughput_rps", "latency_ms", "errors", "stable",
                "generator", "verdict", "report"} <= set(step)
        assert set(step["latency_ms"]) == {"p50", "p90", "p95", "p99", "max"}
        assert {"cpu_share", "lag_ms"} <= set(step["generator"])
    # and its values, read back
    report = SweepReport.from_json(written)
    assert [s.concurrency for s in report.steps] == [1, 2, 4, 8, 16]
    # no --pid: no diagnosis
    assert all(s.verdict is None and s.report is None for s in report.steps)
    knee = report.knee_step
    assert knee is not None and report.knee is not None
    assert knee.concurrency == 4
    assert report.knee.reason.startswith("from concurrency 4 to concurrency 8")
    assert knee.throughput_rps == pytest.approx(400) and knee.stable is True
    assert knee.latency_ms.p99 == pytest.approx(20)
    assert knee.generator.cpu_share == pytest.approx(0.05)  # 0.1 of 2 cores
    assert len(knee.windows) == knee.windows_measured == 3
    assert knee.warmup is not None and knee.warmup.rps == pytest.approx(400)
    assert report.summary.knee is not None and report.summary.knee.concurrency == 4
    assert report.partial is False


def test_each_step_carries_the_verdict_diagnosed_under_its_load():
    measure, _ = closed_loop_service(capacity_rps=400, service_ms=10)
    seen = []

    def diagnose(step):
        seen.append(step.level)
        primary = "underloaded" if step.level < 4 else "pool_wait"
        step.diagnosis = StepDiagnosis(seconds=1.0, concurrency=int(step.level),
                                       primary=primary, headline=f"{primary} at {step.level}",
                                       severity="critical" if primary == "pool_wait" else "info",
                                       html_name=f"diagnose-1-{int(step.level)}.html")

    result = run_sweep(SETTINGS, measure, after_step=diagnose)
    report = sweep_report(result, SweepTarget(url="http://127.0.0.1:1/", pids=(1,)),
                          GeneratorInfo())
    assert seen == [1, 2, 4, 8, 16]
    verdicts = [(s.concurrency, s.verdict.primary, s.report) for s in report.steps]
    assert verdicts[0] == (1, "underloaded", "diagnose-1-1.html")
    assert verdicts[2] == (4, "pool_wait", "diagnose-1-4.html")
    # the knee (concurrency 4) is explained by the first bottleneck verdict at or past it
    assert report.summary.why.concurrency == 4
    assert report.summary.why.primary == "pool_wait"
    html = render_sweep_html(report)
    assert '<a href="diagnose-1-4.html">pool_wait</a>' in html
    assert 'id="why"' in html


def test_a_resource_saturated_at_the_knee_is_explained_by_the_next_step():
    # At the knee the pool is full but nobody queues yet (no waiting to see); one step past it
    # requests queue for it: that step's verdict explains the knee.
    measure, _ = closed_loop_service(capacity_rps=400, service_ms=10)

    def diagnose(step):
        primary = "underloaded" if step.level <= 4 else "pool_wait"
        step.diagnosis = StepDiagnosis(seconds=1.0, concurrency=int(step.level),
                                       primary=primary, headline=primary, severity="critical")

    result = run_sweep(SETTINGS, measure, after_step=diagnose)
    summary = summarize(result)
    assert summary.knee.concurrency == 4
    assert summary.why.concurrency == 8 and summary.why.primary == "pool_wait"
    # without any bottleneck verdict past the knee, the knee's own verdict is the answer
    for step in result.steps:
        step.diagnosis = StepDiagnosis(seconds=1.0, concurrency=int(step.level),
                                       primary="underloaded", headline="u", severity="info")
    assert summarize(result).why.concurrency == 4


def test_the_html_report_draws_the_curve_marks_the_knee_and_runs_no_script():
    html = render_sweep_html(_report())
    csp = unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', html)[1])
    assert "script-src 'none'" in csp and "default-src 'none'" in csp
    assert "<script>" not in html and "<script src" not in html
    assert html.count("<polyline") == 4  # rps; p50, p95, p99
    assert 'class="knee"' in html and ">knee<" in html
    rows = re.findall(r"<tr( class=\"knee\")?><td>(\d+)</td><td>([\d,.]+)</td>", html)
    assert [(bool(k), int(c)) for k, c, _ in rows] == [(False, 1), (False, 2), (True, 4),
                                                      (False, 8), (False, 16)]
    assert "capacity 400 req/s" in html
    assert "p99 grew ×2.00" in html  # the knee's reason


def test_hostile_text_in_the_report_cannot_escape_the_page():
    report = _report(target=SweepTarget(
        url="http://127.0.0.1:1/</script><script>alert(1)</script>\u202e"))
    html = render_sweep_html(report)
    assert "<script>alert(1)" not in html
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in html
    data = re.search(r'<script type="application/json" id="sweep-data">(.*?)</script>', html, re.S)
    page = html.replace(data.group(0), "")
    assert "\u202e" not in page and "[U+202E]" in page  # shown, never obeyed
    assert SweepReport.from_json(json.loads(data.group(1))).target.url.endswith("</script>\u202e")


def test_a_sweep_with_nothing_usable_says_why():
    from diagnose.load.sweep_steps import SweepResult
    empty = SweepResult(SETTINGS, [], "interrupted by SIGINT", 2, 0.0, 1.0, interrupted="SIGINT")
    assert summarize(empty).headline == "no level was measured"
    page = render_sweep_html(sweep_report(empty, SweepTarget(url="http://127.0.0.1:1/"),
                                          GeneratorInfo()))
    assert "no level was measured" in page and "interrupted by SIGINT" in page
    measure, _ = closed_loop_service(400, 10, errors=lambda c: 100)
    failing = run_sweep(SETTINGS, measure)
    summary = summarize(failing)
    assert summary.limited_by == "no throughput" and summary.knee is None
    assert summary.headline == "every level measured failed more than 1% of its requests"
    render_sweep_html(sweep_report(failing, SweepTarget(url="http://127.0.0.1:1/"),
                                   GeneratorInfo()))


def test_other_processes_busy_during_the_sweep_are_reported():
    measure, _ = closed_loop_service(400, 10, gen_cores=lambda c, rps: 0.1)
    result = run_sweep(SweepSettings(levels=(1, 2), window_s=1, warmup_s=0), measure)
    assert summarize(result).other_load_cores is None  # no pid: unknown
    for step in result.steps:  # 2 cores busy, the service 1.0 and the generator 0.1
        step.windows = [Window(**{**vars(w), "machine_busy_cores": 2.0, "service_cores": 1.0})
                        for w in step.windows]
    assert result.steps[0].other_cores == pytest.approx(0.9)
    summary = summarize(result)
    assert summary.other_load_cores == pytest.approx(0.9)
    html = render_sweep_html(sweep_report(result, SweepTarget(url="http://127.0.0.1:1/", pids=(1,)),
                                          GeneratorInfo()))
    assert "shared machine" in html and "up to 0.90 cores" in html
