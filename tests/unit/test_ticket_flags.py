"""What a run does with its outputs besides the verdict, on a recorded profile (no target):
--fail-on gates CI with exit 10 after every output is written, --pprof writes the pprof file,
--push sends it to a Pyroscope ingest endpoint (a contract server on 127.0.0.1) and a failed
push is exit 13 with the local outputs kept, --print md prints the ticket summary."""

from __future__ import annotations

import dataclasses
import gzip
import socket

from diagnose.export import profile_pb2
from diagnose.report.model import Verdict
from diagnose.vocab import Severity
from tests.conftest import RECORDED, invoke_cli, report_of
from tests.pyroscope_contract import IngestServer

LOCK = RECORDED / "lock_contention.speedscope.json"
LOCK_PROCFS = RECORDED / "lock_contention.procfs.json"


def analyze(out_dir, *args, timeout=120):
    return invoke_cli("analyze", LOCK, "--procfs", LOCK_PROCFS, "-o", out_dir, *args,
                   timeout=timeout, check_json=False)[0]


def written_verdict(out_dir) -> Verdict:
    [report] = [p for p in out_dir.glob("*.json") if not p.name.endswith(".speedscope.json")]
    return report_of(report).verdict


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_fail_on_critical_exits_10_after_writing_every_output(out_dir):
    proc = analyze(out_dir, "--fail-on", "critical")
    assert proc.returncode == 10, proc.stderr
    verdict = written_verdict(out_dir)  # this recording's verdict is critical
    assert verdict.severity == "critical"
    assert (f"fail-on critical: the verdict is critical ({verdict.primary}): exit 10"
            in proc.stderr)
    assert "Verdict: " in proc.stdout
    assert len(list(out_dir.glob("*.html"))) == 1 and len(list(out_dir.glob("*[0-9].json"))) == 1


def test_fail_on_warning_also_trips_on_a_critical_verdict_and_no_gate_exits_0(out_dir):
    assert analyze(out_dir, "--fail-on", "warning").returncode == 10
    assert analyze(out_dir).returncode == 0


def test_a_service_sure_to_be_waiting_for_work_passes_a_warning_gate(out_dir):
    # underloaded at score 100: sure the workers wait for requests, and nothing in the process
    # to fix; an idle service's CI gate must not fail on it (it read "critical" before)
    proc = invoke_cli("analyze", RECORDED / "underloaded.speedscope.json", "-o", out_dir,
                      "--fail-on", "warning", check_json=False)[0]
    assert proc.returncode == 0, proc.stderr
    verdict = written_verdict(out_dir)
    assert (verdict.primary, verdict.severity) == ("underloaded", "info")


def test_pprof_flag_writes_the_profile_beside_the_report(out_dir):
    proc = analyze(out_dir, "--pprof")
    assert proc.returncode == 0, proc.stderr
    [pprof] = list(out_dir.glob("*.pb.gz"))
    assert f"pprof: {pprof}" in proc.stderr
    profile = profile_pb2.Profile()
    profile.ParseFromString(gzip.decompress(pprof.read_bytes()))
    assert len(profile.sample) > 0
    assert pprof.name.removesuffix(".pb.gz") == next(out_dir.glob("*.html")).name.removesuffix(".html")


def test_push_sends_the_profile_to_the_ingest_api_with_the_verdict_as_a_label(out_dir):
    with IngestServer() as server:
        proc = analyze(out_dir, "--push", server.url, "--app-name", "ranker",
                       "--tag", "service=ranker-api")
        assert proc.returncode == 0, proc.stderr
        [request] = server.accepted
    assert request.valid, request.problems
    assert request.app_name == "ranker"
    assert ("verdict", written_verdict(out_dir).primary) in request.labels.items()
    assert request.labels["service"] == "ranker-api"
    assert "pushed to" in proc.stderr


def test_a_push_nobody_answers_is_exit_13_with_the_local_outputs_kept(out_dir):
    proc = analyze(out_dir, "--push", f"http://127.0.0.1:{closed_port()}", timeout=180)
    assert proc.returncode == 13, proc.stderr
    assert "could not push the profile" in proc.stderr
    assert "the local report is kept at" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(list(out_dir.glob("*.html"))) == 1


def test_ticket_options_that_cannot_work_are_usage_errors_before_anything_runs(out_dir):
    for args, message in ((["--push", "ftp://example.com"], "http"),
                          (["--tag", "a=b"], "--push"),
                          (["--print", "md", "--json"], "choose one"),
                          (["--push", "http://127.0.0.1:1", "--tag", "no-equals"], "=")):
        proc = analyze(out_dir, *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr, (args, proc.stderr)
    assert not out_dir.exists() or not list(out_dir.iterdir())


def test_print_md_prints_the_ticket_summary_written_beside_the_report(out_dir):
    proc = analyze(out_dir, "--print", "md")
    assert proc.returncode == 0, proc.stderr
    [summary] = list(out_dir.glob("*.md"))
    assert proc.stdout == summary.read_text(encoding="utf-8")
    assert "Verdict:" not in proc.stdout  # the summary replaces the verdict lines
    assert "| " in proc.stdout and len(proc.stdout.encode()) < 4096


def test_the_terminal_verdict_line_keeps_what_the_headline_says_about_the_verdict_itself():
    from diagnose.cli.common import verdict_line as line_of
    from tests.report_data import as_verdict

    def verdict_line(data: dict) -> str:
        return line_of(as_verdict(data))

    def headline(data: dict) -> str:
        return as_verdict(data).headline

    inconclusive = {"primary": "inconclusive", "headline": "Inconclusive: this profile cannot show "
                    "waits (no --idle); record it again with `py-spy record --idle`; among what it "
                    "kept, the strongest pattern was: the cores are busy — cores 100% busy."}
    assert verdict_line(inconclusive) == headline(inconclusive)
    low = {"primary": "lock_contention", "headline": "low confidence: 41 samples; sample longer — "
           "Request threads queue on a lock — 95% of request-thread time waits on the lock"}
    assert verdict_line(low) == ("lock contention (low confidence: 41 samples; sample longer) — "
                                 "95% of request-thread time waits on the lock")
    plain = {"primary": "lock_contention", "headline": "Request threads queue on a lock — 95% waits"}
    assert verdict_line(plain) == "lock contention — 95% waits"


def test_a_capped_severity_survives_the_services_rescoring_of_a_worker_tree():
    # An idle gunicorn -w 3 read underloaded "critical": each worker's finding was info, capped
    # by its check, and the service's merge rescored it from the mean score, severity anew.
    from diagnose.checks.base import make_finding
    from diagnose.checks.spec import CheckSettings

    sure = make_finding("underloaded", CheckSettings(title="waits"), 100, "idle", {"w": 1.0})
    capped = dataclasses.replace(sure, severity=Severity.INFO)
    assert capped.rescored(90).severity == Severity.INFO
    assert capped.rescored(10).severity == Severity.OK  # under the cap, the score says
    assert sure.rescored(60).severity == Severity.WARNING  # uncapped: the score says
