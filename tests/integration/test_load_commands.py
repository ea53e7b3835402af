"""`diagnose sweep` and `diagnose experiment` against real servers with the real load generator:
the knee of a server whose capacity is known, the diagnosis at that knee, a sweep stopped by a
signal, and an experiment that measures advice known to pay off. Each leaves no generator and no
server behind."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import REPO, run_cli
from tests.integration.conftest import requires_ptrace
from tests.integration.servers import free_port, gunicorn_sync, start_server, uvicorn_app
from tests.integration.typed import as_experiment, as_sweep

pytestmark = [pytest.mark.integration, requires_ptrace]


def generators_loading(port: int) -> list[int]:
    """Load generators (wrk) still running against 127.0.0.1:PORT."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if proc.info.get("name") == "wrk" and f"127.0.0.1:{port}" in cmdline:
            found.append(proc.pid)
    return found


@pytest.mark.serial  # a knee: no neighbour
def test_sweep_finds_the_knee_of_two_sync_workers(out_dir):
    # Two sync workers, ~10 ms of pure-Python preprocessing per request, two cores: one
    # connection keeps one worker busy, two keep both; more connections only queue.
    port = free_port()
    with start_server(gunicorn_sync("wsgi_preprocess", port, workers=2), port) as server:
        proc, data = run_cli("sweep", server.url("/predict"), "--pid", server.pid,
                             "--concurrency", "1,2,4,8", "--window", "1", "--warmup", "1",
                             "--max-windows", "3", "--diagnose-seconds", "0", "--json",
                             "-o", out_dir, timeout=170)
        assert generators_loading(port) == []
    assert proc.returncode == 0, proc.stderr
    report = as_sweep(data)
    steps = {s.concurrency: s for s in report.steps}
    assert list(steps)[:3] == [1, 2, 4]
    summary = report.summary
    # The two workers saturate well before 8 connections (on a busy machine, later than 2):
    # from the knee on, p99 grows faster than throughput.
    assert report.knee is not None, summary
    assert summary.saturated is True and summary.limited_by == "service"
    knee = report.steps[report.knee.index]
    after = report.steps[report.knee.index + 1]
    assert (after.latency_ms.p99 / knee.latency_ms.p99
            > after.throughput_rps / knee.throughput_rps)
    assert report.knee.reason.startswith(f"from concurrency {knee.concurrency} to "
                                         f"concurrency {after.concurrency}")
    # How fast it served, against the two workers' physics (Little's law, the time one request
    # takes alone) and how long the sweep took, are figures a busy machine moves: the sweep's
    # rows in benchmarks/README.md. Here, each step measured something, in order.
    for s in report.steps:
        assert s.throughput_rps > 0, (s.concurrency, s.requests, s.errors, s.windows_measured,
                                      report.stop_reason, s.generator)
        # every request of the judged windows in one HDR histogram: ordered percentiles
        lat = s.latency_ms
        assert 0 < lat.p50 <= lat.p90 <= lat.p95 <= lat.p99 <= lat.max, s
        assert s.latency_source.startswith("hdr")
        assert s.verdict is None and s.report is None  # --diagnose-seconds 0
    # Beyond the knee the connections only queue: p99 grows past one request's time. The sweep
    # runs on to 8 connections, or stops where throughput stopped growing (on a busy machine the
    # plateau may come at 4): either way it measured past the knee.
    last = report.steps[-1]
    assert report.knee.index < len(report.steps) - 1
    assert last.concurrency >= 8 or report.stop_reason.startswith("plateau"), report.stop_reason
    assert last.latency_ms.p99 > steps[1].latency_ms.p99
    # CPU seen at each step: the service's tree and the generator's own.
    top = max(report.steps, key=lambda s: s.throughput_rps)
    assert top.service_cores is not None and top.service_cores > 0
    assert all(s.generator.cores > 0 and 0 < s.generator.cpu_share < 1 for s in report.steps)
    assert all(len(s.windows) == s.windows_measured >= 3 for s in report.steps)
    sweep_files = sorted(p.name for p in out_dir.glob("diagnose-sweep-*"))
    # the page, the JSON report and the Markdown ticket summary
    assert [f.rsplit(".", 1)[-1] for f in sweep_files] == ["html", "json", "md"], sweep_files
    assert sweep_files[0].startswith(f"diagnose-sweep-{server.pid}-")
    html = (out_dir / sweep_files[0]).read_text()
    assert 'class="knee"' in html
    assert as_sweep(json.loads((out_dir / sweep_files[1]).read_text())).steps == report.steps


@pytest.mark.serial  # the knee and the verdicts around it: no neighbour
def test_the_verdict_moves_from_underloaded_to_the_pool_at_the_knee(out_dir):
    # A threaded service whose requests borrow one of two connections for ~10 ms: one request
    # at a time leaves it idle; from two on, request threads queue for the pool. Three levels
    # (1, 2, 8) show both sides of the knee; each level costs a diagnosis window.
    port = free_port()
    argv = [sys.executable, "pool_service.py", "--port", str(port)]
    with start_server(argv, port, workers=None) as server:
        proc, data = run_cli("sweep", server.url("/predict"), "--pid", server.pid,
                             "--concurrency", "1,2,8", "--window", "1", "--warmup", "1",
                             "--max-windows", "3", "--diagnose-seconds", "2", "--json",
                             "--fail-on", "critical", "-o", out_dir, timeout=240)
        assert generators_loading(port) == []
    # the CI gate: the verdict that explains the knee is critical (exit 10, outputs written)
    assert proc.returncode == 10, proc.stderr
    assert "fail-on critical: the verdict that explains the knee is critical" in proc.stderr
    report = as_sweep(data)
    steps = report.steps
    assert [s.concurrency for s in steps] == [1, 2, 8]
    verdicts = [s.verdict.primary if s.verdict else None for s in steps]
    assert verdicts[0] == "underloaded", verdicts
    knee = report.knee
    assert knee is not None and steps[knee.index].concurrency <= 4, report.summary
    # at and past the knee: request threads queue for the pool's connections
    assert all(v == "pool_wait" for v in verdicts[knee.index + 1:]), verdicts
    assert verdicts[-1] == "pool_wait"
    # why it stops there: the pool, named at the knee or where requests first queue past it
    why = report.summary.why
    assert why is not None and why.primary == "pool_wait" and why.index in (knee.index,
                                                                             knee.index + 1)
    for step in steps:  # each verdict links its full report, written beside the sweep's
        assert step.report and (out_dir / step.report).is_file()
    html = next(out_dir.glob("diagnose-sweep-*.html")).read_text()
    assert f'href="{steps[-1].report}"' in html


def test_the_python_client_sweeps_when_asked_and_counts_its_own_cpu(out_dir):
    # How many requests/s the Python client drives is a figure (benchmarks/generator_ceiling.py);
    # here, that it drove the load and counted its own CPU.
    port = free_port()
    with start_server(gunicorn_sync("wsgi_preprocess", port, workers=2), port) as server:
        proc, data = run_cli("sweep", server.url("/predict"), "--tool", "python",
                             "--concurrency", "1,2", "--window", "1", "--warmup", "0",
                             "--max-windows", "3", "--json", "-o", out_dir, timeout=90)
    assert proc.returncode == 0, proc.stderr
    report = as_sweep(data)
    assert report.generator.tool == "python"
    assert [s.concurrency for s in report.steps] == [1, 2]
    assert all(s.throughput_rps > 0 and s.generator.cores > 0 for s in report.steps)
    assert report.steps[0].latency_ms.p95 >= report.steps[0].latency_ms.p50
    assert all(s.verdict is None for s in report.steps)  # no --pid: no diagnosis
    assert next(out_dir.glob("diagnose-sweep-127.0.0.1-*.json"))


@pytest.mark.serial  # the generator must reach each step's rate: no neighbour
def test_an_open_model_sweep_steps_the_request_rate(out_dir):
    port = free_port()
    argv = [sys.executable, "pool_service.py", "--port", str(port)]
    with start_server(argv, port, workers=None) as server:
        proc, _ = run_cli("sweep", server.url("/predict"), "--rate", "20,40",
                          "--arrivals", "poisson", "--window", "1", "--warmup", "1",
                          "--max-windows", "3", "--print", "md", "-o", out_dir, timeout=90)
    assert proc.returncode == 0, proc.stderr
    [json_path] = out_dir.glob("diagnose-sweep-*.json")
    report = as_sweep(json.loads(json_path.read_text(encoding="utf-8")))
    # --print md: the ticket summary written beside the report, on stdout
    summary = json_path.with_suffix(".md").read_text(encoding="utf-8")
    assert proc.stdout == summary and len(summary.encode("utf-8")) < 4096
    assert summary.startswith("## diagnose sweep: ") and "| 20 req/s |" in summary
    assert "| Knee |" in summary and "| Verdict behind the knee |" in summary
    assert report.generator.model == "open"
    assert report.generator.coordinated_omission_corrected is True
    assert [s.rate for s in report.steps] == [20.0, 40.0]
    for step in report.steps:
        # How close the completed rate comes to the offered one is the open-loop client's
        # figure on this machine (benchmarks/generator_ceiling.py, the rate it holds); here,
        # each step completed requests, its schedule lag was measured, and the latency
        # includes the ~10 ms remote call (a sleep: no machine makes it shorter).
        assert 0 < step.throughput_rps, step
        assert step.generator.lag_ms is not None
        assert step.latency_ms.p50 >= 10


def test_a_sweep_stopped_by_sigterm_writes_its_partial_report_and_stops_the_generator(out_dir):
    port = free_port()
    with start_server(gunicorn_sync("wsgi_preprocess", port, workers=2), port) as server:
        sweep = subprocess.Popen(
            [sys.executable, "-m", "diagnose", "sweep", server.url("/predict"),
             "--concurrency", "1,2,4,8", "--window", "1", "--warmup", "1", "--max-windows", "3",
             "-o", str(out_dir)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            for line in sweep.stderr:  # the first step is done, the second under way
                if "concurrency 1:" in line or time.monotonic() > deadline:
                    break
            # The second step's generator: each of its windows is a run of wrk, so one look can
            # fall between two runs (CI, on a busy machine); the signal is sent while one runs.
            running_by = time.monotonic() + 20
            while not generators_loading(port) and time.monotonic() < running_by:
                time.sleep(0.05)
            assert generators_loading(port) != []
            sweep.send_signal(signal.SIGTERM)
            _, err = sweep.communicate(timeout=30)
        finally:
            if sweep.poll() is None:
                sweep.kill()
                sweep.wait()
        time.sleep(0.2)
        assert generators_loading(port) == []
    assert sweep.returncode == 143, err
    assert "interrupted by SIGTERM after 1 step: partial sweep report written" in err
    report = as_sweep(json.loads(next(out_dir.glob("diagnose-sweep-*.json")).read_text()))
    assert report.partial is True and report.interrupted == "SIGTERM"
    assert [s.concurrency for s in report.steps] == [1]
    assert report.steps[0].throughput_rps > 0


def test_experiment_measures_that_offloading_a_blocked_event_loop_pays(out_dir):
    # asgi_blocking sleeps 20 ms (a synchronous client) inline on uvicorn's loop: one request at
    # a time, ~50 req/s. DIAGNOSE_FIXTURE_OFFLOAD=1 is the advice applied (run_in_threadpool):
    # the 8 connections' sleeps overlap, ~8x, whatever cores are free (a sleep needs none), so
    # the winner is many times the noise apart. The CPU-bound offload (asgi_inline, whose gain is
    # a second free core) is a figure: benchmarks/advice_event_loop.py. Each variant's diagnosis
    # runs at its shortest (1 s): here the decision is asserted; test_experiment_vary.py asserts
    # the verdicts an experiment takes.
    port = free_port()
    start = shlex.join(uvicorn_app("asgi_blocking", port))
    before = {p.pid for p in psutil.process_iter()}
    env = {k: v for k, v in os.environ.items() if k != "DIAGNOSE_FIXTURE_OFFLOAD"}
    proc = subprocess.run([sys.executable, "-m", "diagnose", "experiment",
                           f"http://127.0.0.1:{port}/predict", "--start", start,
                           "--set", "DIAGNOSE_FIXTURE_OFFLOAD=1", "--concurrency", "8",
                           "--seconds", "1", "--warmup", "1", "--rounds", "2",
                           "--diagnose-seconds", "1", "--print", "md",
                           "-o", str(out_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=170, env=env)
    assert proc.returncode == 0, proc.stderr
    [json_path] = out_dir.glob("diagnose-experiment-*.json")
    report = as_experiment(json.loads(json_path.read_text(encoding="utf-8")))
    # --print md: the ticket summary written beside the report, on stdout
    summary = json_path.with_suffix(".md").read_text(encoding="utf-8")
    assert proc.stdout == summary and len(summary.encode("utf-8")) < 4096
    assert summary.startswith("## diagnose experiment: ") and "| Outcome | " in summary
    assert "| `baseline` (baseline)" in summary and "| `variant`" in summary  # one row each
    assert "| `DIAGNOSE_FIXTURE_OFFLOAD=1` |" in summary  # the variant's environment
    decision = report.decision
    assert decision is not None, report.headline
    assert [(r.round, r.arm) for r in report.runs] == [
        (0, "baseline"), (0, "variant"), (1, "variant"), (1, "baseline")]
    assert decision.outcome == "better", decision
    # The variant wins every round beyond the experiment's margin, and by far on the median
    # (the sleeps overlap: ~8x expected, 2x is many times the noise).
    assert all(x > 1.0 + decision.margin for x in decision.ratios), decision
    assert decision.ratio is not None and decision.ratio > 2, decision
    assert report.winner is not None and report.winner.name == "variant", report.headline
    assert f"| Winner | `{report.winner.name}` (" in summary, summary
    assert f"| `{report.winner.name}` " in summary  # its row in the variants
    assert dict(report.arms[1].env) == {"DIAGNOSE_FIXTURE_OFFLOAD": "1"}
    assert all(r.service_cores is not None and r.ready_s is not None and r.ready_s < 60
               for r in report.runs)
    assert all(r.other_cores is not None and r.other_cores >= 0
               for r in report.runs)  # measured for every run
    # Every service it started was stopped.
    left = [p for p in psutil.process_iter(["cmdline"])
            if p.pid not in before and "asgi_blocking" in " ".join(p.info.get("cmdline") or [])
            and p.status() != psutil.STATUS_ZOMBIE]
    assert left == []
    html = next(out_dir.glob("diagnose-experiment-*.html")).read_text()
    assert 'id="outcome">better</span>' in html
