"""Pushing to Pyroscope: the ingest URL, label rules, retries and failures, and contract tests
against tests/pyroscope_contract.py (a local server that checks the documented ingest API)."""

from __future__ import annotations

import socket
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from diagnose.errors import ExitCode
from diagnose.run.pipeline import Outputs
from diagnose.publish import push
from diagnose.publish.push import (PushFailed, ingest_url, label_set, parse_push_url,
                           parse_tags, push_profile, sanitise_label_value)
from diagnose.publish.watch_loop import Window, WatchOutcome, _prune
from diagnose.report.model import Report
from tests.conftest import RECORDED, invoke_cli, invoke_cli_report
from tests.pyroscope_contract import IngestServer, parse_name
from tests.report_data import as_report


def push_report(report, *args, **kwargs):
    return push.push_report(as_report(report), *args, **kwargs)


def default_tags(report, *args, **kwargs):
    return push.default_tags(as_report(report), *args, **kwargs)


def pprof_bytes(report, for_push=False):
    from diagnose.export import pprof
    return pprof.pprof_bytes(as_report(report), for_push)


def build_profile(report, for_push=False):
    from diagnose.export import pprof
    return pprof.build_profile(as_report(report), for_push)

START, END = 1_700_000_000.4, 1_700_000_010.6
TINY_REPORT = {"stacks": {"frames": [{"function": "predict", "file": "model.py", "line": 7}],
                          "samples": [{"stack": [0], "count": 3}], "interval_s": 0.05}}


@pytest.fixture(scope="module")
def body() -> bytes:
    return pprof_bytes(TINY_REPORT)


def query(url: str) -> dict[str, list[str]]:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory) -> tuple[Report, Path]:
    """A real report (the recorded lock-contention fixture analysed) and its directory."""
    out = tmp_path_factory.mktemp("reports")
    proc, report = invoke_cli_report("analyze", RECORDED / "lock_contention.speedscope.json", "--procfs",
                           RECORDED / "lock_contention.procfs.json", "-o", out, "--json")
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    return report, out


class FakeSleep:
    def __init__(self):
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


# --- the URL and its labels -------------------------------------------------------------------

def test_ingest_url_carries_the_documented_query_parameters():
    url = ingest_url("http://pyro.example:4040", "my.app", {"env": "prod", "verdict": "x"},
                     START, END, sample_rate=20)
    parts = urllib.parse.urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == ("http", "pyro.example:4040", "/ingest")
    assert query(url) == {"name": ["my.app{env=prod,verdict=x}"], "from": ["1700000000"],
                          "until": ["1700000011"], "format": ["pprof"], "spyName": ["pyspy"],
                          "sampleRate": ["20"]}


def test_a_window_shorter_than_a_second_still_has_from_before_until():
    params = query(ingest_url("http://h", "app", {}, START, START))
    assert int(params["from"][0]) < int(params["until"][0])


def test_a_path_prefix_is_kept_and_a_trailing_ingest_is_not_doubled():
    assert parse_push_url("https://h/pyroscope/").ingest == "https://h/pyroscope/ingest"
    assert parse_push_url("http://h:4040/ingest").ingest == "http://h:4040/ingest"


@pytest.mark.parametrize("bad", ["ftp://h/", "localhost:4040", "http://", "http://h/?a=1",
                                 "http://h:port/"])
def test_a_push_url_that_is_not_an_http_base_url_is_refused_in_one_line(bad):
    with pytest.raises(ValueError) as caught:
        parse_push_url(bad)
    assert "\n" not in str(caught.value) and "--push" in str(caught.value)


@pytest.mark.parametrize("name", ["bad-name", "__name__", "", "a b", "ключ"])
def test_tag_names_outside_pyroscopes_label_name_rules_are_refused(name):
    with pytest.raises(ValueError, match="tag name"):
        parse_tags([f"{name}=v"])


def test_a_tag_needs_a_name_an_equals_sign_and_a_value():
    with pytest.raises(ValueError, match="NAME=VALUE"):
        parse_tags(["env"])
    with pytest.raises(ValueError, match="empty"):
        parse_tags(["env= "])
    assert parse_tags(["env=prod", "env=staging", "region=eu"]) == {"env": "staging",
                                                                   "region": "eu"}


def test_label_values_lose_the_characters_that_would_end_or_break_them():
    value = sanitise_label_value(" a,b}c{d=e f\"g\n ")
    assert value == "a_b_c_d_e_f_g"
    app, labels, problems = parse_name(label_set("app", {"k": " a,b}c{d=e f\"g\n "}))
    assert (app, labels, problems) == ("app", {"k": value}, [])


def test_label_set_is_sorted_and_leaves_out_unknown_values():
    assert label_set("app", {"z": "1", "a": "2", "pid": None}) == "app{a=2,z=1}"
    with pytest.raises(ValueError, match="--app-name"):
        label_set("my app", {})


def test_default_tags_name_the_verdict_service_and_host_never_the_pid():
    report = {"verdict": {"primary": "lock_contention"}, "target": {"pid": 42}}
    assert default_tags(report, service="svc", host="box") == {
        "verdict": "lock_contention", "service": "svc", "host": "box"}
    assert default_tags(report)["host"] == socket.gethostname()


# --- retries, backoff and failures ------------------------------------------------------------

def test_a_server_failing_twice_gets_the_profile_on_the_third_try_after_backing_off(body):
    sleep = FakeSleep()
    with IngestServer() as server:
        server.fail_next(2, status=503)
        result = push_profile(server.url, body, "app", {}, START, END, sleep=sleep)
    assert (result.status, result.tries) == (200, 3)
    assert sleep.waits == [0.5, 1.0]
    assert [r.status for r in server.requests] == [503, 503, 200]


def test_too_many_requests_is_retried_and_its_retry_after_respected(body):
    sleep = FakeSleep()
    with IngestServer() as server:
        server.fail_next(1, status=429, retry_after="2")
        result = push_profile(server.url, body, "app", {}, START, END, sleep=sleep)
    assert result.tries == 2 and sleep.waits == [2.0]


def test_a_bad_request_is_not_retried(body):
    sleep = FakeSleep()
    with IngestServer() as server:
        server.fail_next(1, status=400)
        with pytest.raises(PushFailed) as caught:
            push_profile(server.url, body, "app", {}, START, END, sleep=sleep)
    assert len(server.requests) == 1 and sleep.waits == []
    assert "HTTP 400" in caught.value.message and "after 1 try" in caught.value.message


def test_a_server_that_never_answers_times_out_into_a_one_line_push_failure(body):
    sleep = FakeSleep()
    with IngestServer() as server:
        server.hang_next(2, seconds=10)
        with pytest.raises(PushFailed) as caught:
            push_profile(server.url, body, "app", {}, START, END, timeout=0.5, retries=1,
                         sleep=sleep)
    message = caught.value.message
    assert message == (f"could not push the profile to {server.url}/ingest: no answer within "
                       f"0.5 s after 2 tries")
    assert caught.value.exit_code == ExitCode.PUSH_FAILED == 13
    assert sleep.waits == [0.5]


def test_a_closed_port_is_retried_with_exponential_backoff_then_fails(body):
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sleep = FakeSleep()
    with pytest.raises(PushFailed) as caught:
        push_profile(f"http://127.0.0.1:{port}", body, "app", {}, START, END, sleep=sleep)
    assert sleep.waits == [0.5, 1.0, 2.0]
    assert "after 4 tries" in caught.value.message and "\n" not in caught.value.message


def test_credentials_in_the_url_become_basic_auth_and_are_never_shown(body):
    with IngestServer() as server:
        url = server.url.replace("http://", "http://user:s3cret@")
        result = push_profile(url, body, "app", {}, START, END, retries=0)
        server.fail_next(1, status=500)
        with pytest.raises(PushFailed) as caught:
            push_profile(url, body, "app", {}, START, END, retries=0)
    assert server.requests[0].headers["authorization"] == "Basic dXNlcjpzM2NyZXQ="
    assert "s3cret" not in result.url and "s3cret" not in caught.value.message


# --- contract: a real report's profile against the documented API -----------------------------

def test_a_real_reports_profile_is_accepted_by_the_documented_ingest_api(analyzed):
    report, _ = analyzed
    with IngestServer() as server:
        result = push_report(report, server.url, "inference.api", {"env": "test"}, START, END,
                             service="ranker")
    assert result.status == 200 and result.tries == 1
    [request] = server.requests
    assert request.problems == []
    assert request.app_name == "inference.api"
    assert request.labels == {"env": "test", "service": "ranker",
                              "verdict": report.verdict.primary,
                              "host": sanitise_label_value(socket.gethostname())}
    assert (request.start, request.end) == (1_700_000_000, 1_700_000_011)
    assert request.params["format"] == ["pprof"]
    counted = sum(row.count for row in report.stacks.samples)
    assert counted > 0 and request.sample_total(unit="count") == counted


def test_pushed_series_stay_few_while_samples_keep_pid_and_tid_as_numbers(analyzed):
    report, _ = analyzed
    with IngestServer() as server:
        push_report(report, server.url, "app", {"env": "test"}, START, END, service="svc")
    [request] = server.requests
    assert request.problems == []
    keys = {key for labels in request.series for key, _ in labels}
    assert keys <= {"env", "service", "verdict", "host", "role", "state", "category"}, keys
    threads = {row.tid for row in report.stacks.samples}
    # fewer series than threads x states: no label per thread or per process among them
    assert len(request.series) <= 4 * 7 * 8 and len(threads) > 1
    strings = request.profile.string_table
    numeric = {strings[label.key] for sample in request.profile.sample for label in sample.label
               if not label.str}
    assert {"pid", "tid"} <= numeric


def test_the_exported_file_keeps_the_thread_names_the_push_leaves_out(analyzed):

    report, _ = analyzed
    def string_keys(profile):
        return {profile.string_table[label.key] for sample in profile.sample
                for label in sample.label if label.str}
    assert "thread" in string_keys(build_profile(report))
    assert "thread" not in string_keys(build_profile(report, for_push=True))


def test_a_tenant_is_sent_as_the_scope_org_id_header(analyzed):
    report, _ = analyzed
    with IngestServer() as server:
        push_report(report, server.url, "app", {}, START, END, tenant="team-a")
        push_report(report, server.url, "app", {}, START, END)
    assert [r.tenant for r in server.requests] == ["team-a", None]


def test_the_contract_flags_a_label_per_process_among_the_series(body):
    from tests.pyroscope_contract import IngestRequest, validate

    request = IngestRequest("POST", "/ingest", {"name": ["app{pid=42}"], "from": ["1700000000"],
                                                 "until": ["1700000010"], "format": ["pprof"]},
                            {"content-type": "binary/octet-stream"}, body)
    validate(request)
    assert any("series labels ['pid']" in p for p in request.problems), request.problems


def test_a_server_failing_twice_then_accepting_gets_a_valid_profile_on_the_third_try(analyzed):
    report, _ = analyzed
    sleep = FakeSleep()
    with IngestServer() as server:
        server.fail_next(2)
        result = push_report(report, server.url, "app", {}, START, END, sleep=sleep)
    assert result.tries == 3 and sleep.waits == [0.5, 1.0]
    assert [r.status for r in server.requests] == [500, 500, 200]
    assert all(r.problems == [] for r in server.requests)


def test_a_server_always_failing_is_exit_13_and_the_local_outputs_are_intact(analyzed):
    report, out = analyzed
    files = sorted(out.iterdir())
    before = {p: p.read_bytes() for p in files}
    with IngestServer() as server:
        server.fail_next(10)
        with pytest.raises(PushFailed) as caught:
            push_report(report, server.url, "app", {}, START, END, kept=[files[0]],
                        sleep=FakeSleep())
    assert caught.value.exit_code == 13
    assert caught.value.message.endswith(f"HTTP 500 (failing on purpose) after 4 tries; the "
                                         f"local report is kept at {files[0]}")
    assert {p: p.read_bytes() for p in sorted(out.iterdir())} == before


def test_a_report_without_stacks_is_a_push_failure_that_says_why():
    with pytest.raises(PushFailed, match="could not build the pprof profile"):
        push_report({"verdict": {"primary": "none"}}, "http://127.0.0.1:9", "app", {}, START,
                    END, kept=["r.json"])


@pytest.mark.parametrize("change, problem", [
    (lambda q: q.update(format="folded"), "format"),
    (lambda q: q.update(name="app{bad-name=x}"), "invalid label name"),
    (lambda q: q.update(name="my app{}"), "invalid app name"),
    (lambda q: q.update(until=q["from"]), "not before"),
    (lambda q: q.update(aggregrationType="sum"), "undocumented"),
    (lambda q: q.update(**{"from": "1700000000000"}), "plausible"),
])
def test_the_contract_server_rejects_requests_outside_the_documented_api(analyzed, change,
                                                                        problem):

    report, _ = analyzed
    params = {k: v[0] for k, v in query(ingest_url("http://h", "app", {}, START, END)).items()}
    change(params)
    with IngestServer() as server:
        request = urllib.request.Request(f"{server.url}/ingest?{urllib.parse.urlencode(params)}",
                                         data=pprof_bytes(report), method="POST",
                                         headers={"Content-Type": "binary/octet-stream"})
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 400
    assert any(problem in p for p in server.requests[0].problems), server.requests[0].problems


def test_the_contract_server_rejects_a_multipart_or_ungzipped_body(analyzed):

    report, _ = analyzed
    url = ingest_url("http://h", "app", {}, START, END).replace("http://h", "")
    with IngestServer() as server:
        for body, content_type in ((pprof_bytes(report), "multipart/form-data; boundary=x"),
                                   (b"\x0a\x02\x08\x01", "binary/octet-stream")):
            request = urllib.request.Request(server.url + url, data=body, method="POST",
                                             headers={"Content-Type": content_type})
            with pytest.raises(urllib.error.HTTPError):
                urllib.request.urlopen(request, timeout=10)
    assert any("content type" in p for p in server.requests[0].problems)
    assert any("not gzip" in p for p in server.requests[1].problems)


# --- watch's bookkeeping ----------------------------------------------------------------------

def _window(tmp_path: Path, number: int, pushed: bool) -> Window:
    paths = [tmp_path / f"diagnose-1-{number}{ext}" for ext in (".html", ".json",
                                                                ".speedscope.json", ".md")]
    for path in paths:
        path.write_text("x")
    outputs = Outputs(paths[0], paths[1], paths[2], None, {}, False)
    return Window(number, outputs, pushed=object() if pushed else None,
                  push_error=None if pushed else "refused")


def test_pruning_keeps_the_last_pushed_windows_and_every_window_whose_push_failed(tmp_path):
    from collections import deque

    prunable: deque = deque()
    windows = [_window(tmp_path, n, pushed=n != 2) for n in range(1, 6)]
    for window in windows:
        _prune(window, prunable, keep=2)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert {name.split(".")[0] for name in left} == {"diagnose-1-2", "diagnose-1-4",
                                                     "diagnose-1-5"}
    assert len(left) == 12  # each kept window keeps all four of its files


def test_a_failed_push_makes_the_watch_exit_13_even_when_a_signal_stopped_it(tmp_path):
    from diagnose.errors import Interrupted

    stopped = Interrupted("stopped by SIGTERM", 143)
    ok, failed = _window(tmp_path, 1, pushed=True), _window(tmp_path, 2, pushed=False)
    assert WatchOutcome([ok], "done").exit_code == 0
    assert WatchOutcome([ok], "stopped", stopped).exit_code == 143
    assert WatchOutcome([ok, failed], "stopped", stopped).exit_code == 13


@pytest.mark.parametrize("args, said", [
    (["--every", "5", "--duration", "10"], "longer than --every"),
    (["--push", "ftp://h"], "--push"),
    (["--tag", "bad-name=x"], "tag name"),
    (["--app-name", "my app"], "--app-name"),
])
def test_watch_refuses_bad_options_before_touching_the_process(args, said):
    proc, _ = invoke_cli("watch", "999999999", *args, timeout=60)
    assert proc.returncode == 2
    assert said in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", [["analyze", "fixtures/recorded/lock_contention.speedscope.json"],
                                     ["watch", "1"]])
def test_a_tenant_without_a_push_is_a_usage_error(command, tmp_path):
    from tests.conftest import invoke_cli

    proc, _ = invoke_cli(*command, "--tenant", "team-a", "--output-dir", tmp_path, check_json=False)
    assert proc.returncode == 2
    assert "--tenant names the tenant of a --push" in proc.stderr
