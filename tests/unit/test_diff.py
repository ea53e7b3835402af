"""`diagnose diff` on synthetic report pairs: wait sites that appear, disappear or change,
severity changes told apart from noise, different programs refused, different sampling flagged,
and reports read back from their .json and .html."""

from __future__ import annotations

import html
import json
import re
from dataclasses import replace

import pytest

from diagnose.compare import report_diff as compare
from diagnose.compare.report_diff import SEVERITY_MARGIN
from diagnose.compare.model import Diff, FindingChange
from diagnose.errors import BadProfile, ExitCode
from diagnose.render.diff_html import render_diff_html
from diagnose.render.html import render_html
from diagnose.report.model import Finding, Load, Report, ThreadOs
from diagnose.report.model.codec import encode
from diagnose.report.reader import read_report
from tests.conftest import invoke_cli
from tests.report_data import as_finding, as_report


def diff_reports(before, after, names=("before", "after")):
    return compare.diff_reports(as_report(before), as_report(after), names)


def severity_change(before, after, threads=(1, 1), queued=(0.0, 0.0)):
    return compare.severity_change(as_finding(before), as_finding(after),
                                   (compare.Population(threads[0], queued[0]),
                                    compare.Population(threads[1], queued[1])))

APP = "/srv/app/service.py"
THREADING = "/usr/lib/python3.11/threading.py"
REQUEST_THREADS = 4
TICKS = 100


def finding(fid: str, score: int, shares: dict | None = None, samples: int = 400) -> Finding:
    from diagnose.checks.base import severity_for
    from diagnose.model.confidence import wilson

    intervals = {}
    for key, share in (shares or {}).items():
        low, high = wilson(share, samples)
        intervals[key] = {"low": round(low, 4), "high": round(high, 4), "samples": samples}
    return as_finding({"id": fid, "title": fid.replace("_", " "), "score": score,
                       "severity": severity_for(score), "summary": f"{fid} at {score}",
                       "evidence": dict(shares or {}), "advice": [], "samples": samples,
                       "intervals": intervals, "low_confidence": False})


def report(lock_share: float, lock_score: int, app_file: str = APP, functions=("predict",),
           rate_hz: int = 29, duration_s: float = 4.0, extra_findings=()) -> Report:
    """A report of a service whose request threads wait `lock_share` of their time at one lock
    in `functions[0]` and compute the rest in `forward`."""
    total = REQUEST_THREADS * TICKS
    lock_samples = round(lock_share * total)
    frames = [{"function": "Thread.run", "file": THREADING, "line": 1, "native": False},
              {"function": "handle", "file": app_file, "line": 10, "native": False},
              {"function": functions[0], "file": app_file, "line": 20, "native": False},
              {"function": "forward", "file": app_file, "line": 30, "native": False}]
    samples = [{"stack": [0, 1, 2, 3], "tid": 1, "thread": "request-0", "pid": 9, "role": "request",
                "state": "native", "category": "model", "count": total - lock_samples}]
    if lock_samples:
        samples.append({"stack": [0, 1, 2], "tid": 1, "thread": "request-0", "pid": 9,
                        "role": "request", "state": "lock", "category": "sync",
                        "count": lock_samples})
    waits = []
    if lock_samples:
        waits.append({"kind": "lock", "label": "Lock", "function": functions[0], "file": app_file,
                      "line": 20, "samples": lock_samples,
                      "thread_seconds": lock_share * REQUEST_THREADS * duration_s,
                      "threads": REQUEST_THREADS, "max_concurrent": REQUEST_THREADS,
                      "share": lock_share, "holders": [], "summary": "", "pid": 9})
    per_thread_lock = lock_samples // REQUEST_THREADS
    threads = [{"tid": i, "pid": 9, "name": f"request-{i}", "role": "request", "samples": TICKS,
                "states": {"lock": per_thread_lock, "native": TICKS - per_thread_lock}}
               for i in range(REQUEST_THREADS)]
    findings = [finding("lock_contention", lock_score, {"lock_wait_share": lock_share}, total),
                *extra_findings]
    primary = max(findings, key=lambda f: f.score)
    built = as_report({"schema_version": 3,
            "target": {"pid": 9, "cmdline": "python service.py", "threads": REQUEST_THREADS},
            "sampling": {"duration_s": duration_s, "rate_hz": rate_hz, "mode": "nonblocking",
                         "plan": f"gentle: stacks at {rate_hz} Hz over {REQUEST_THREADS} threads",
                         "native": True, "thread_samples": total, "state_estimated": False},
            "verdict": {"primary": primary.id, "headline": primary.summary,
                        "severity": primary.severity, "confidence": "ok", "samples": total},
            "waits": waits, "not_applicable": [], "threads": threads,
            "stacks": {"frames": frames, "samples": samples, "interval_s": 1 / rate_hz}})
    return replace(built, findings=tuple(findings))


def with_plan(one: Report, plan: str) -> Report:
    return replace(one, sampling=replace(one.sampling, plan=plan))


def with_throughput(one: Report, rps: float) -> Report:
    return replace(one, load=Load(throughput_rps=rps))


def with_frame_function(one: Report, index: int, function: str) -> Report:
    frames = list(one.stacks.frames)
    frames[index] = replace(frames[index], function=function)
    return replace(one, stacks=replace(one.stacks, frames=tuple(frames)))


def by_id(diff: Diff, fid: str) -> FindingChange:
    return next(f for f in diff.findings if f.id == fid)


def test_a_fixed_lock_goes_from_critical_to_ok_and_its_wait_site_disappears():
    diff = diff_reports(report(0.75, 100), report(0.0, 0))
    assert diff.primary.id == "lock_contention"
    assert diff.primary.before.severity == "critical"
    assert diff.primary.after.severity == "ok"
    assert diff.primary.status == "changed"
    [site] = diff.waits
    assert site.change == "disappeared" and site.beyond_noise
    # 75% of 4 threads' time over the window: 3 threads waiting on average
    assert site.before.waiting_threads == pytest.approx(3.0)
    assert site.after.waiting_threads == 0.0
    assert diff.summary.startswith("primary: lock_contention critical → ok")
    assert "1 wait site disappeared" in diff.summary


def test_a_lock_that_appears_is_reported_as_appeared():
    diff = diff_reports(report(0.0, 0), report(0.6, 90))
    [site] = diff.waits
    assert site.change == "appeared"
    assert site.after.share == 0.6
    assert by_id(diff, "lock_contention").status == "changed"


def test_a_wait_site_that_halves_is_changed_and_one_that_barely_moves_is_not():
    halved = diff_reports(report(0.8, 100), report(0.4, 60)).waits[0]
    assert halved.change == "changed"
    assert halved.waiting_threads_change == pytest.approx((0.4 - 0.8) * REQUEST_THREADS)
    steady = diff_reports(report(0.8, 100), report(0.78, 100)).waits[0]
    assert steady.change == "unchanged" and not steady.beyond_noise


def test_wait_rates_are_per_second_of_wall_time_so_window_lengths_compare():
    short, long = report(0.5, 70, duration_s=2.0), report(0.5, 70, duration_s=10.0)
    site = diff_reports(short, long).waits[0]
    assert site.before.waiting_threads == pytest.approx(site.after.waiting_threads)
    assert site.change == "unchanged"


def test_a_score_jittering_across_a_threshold_is_within_noise_not_a_change():
    before = finding("compute_bound", 70, {"model_share": 0.62}, 150)
    after = finding("compute_bound", 80, {"model_share": 0.66}, 150)
    status, why = severity_change(before, after)
    assert (before.severity, after.severity) == ("warning", "critical")
    assert status == "within noise" and "less than" in why


def test_a_large_score_move_with_overlapping_intervals_is_within_noise():
    before = finding("compute_bound", 45, {"model_share": 0.50}, 30)
    after = finding("compute_bound", 45 + SEVERITY_MARGIN + 10, {"model_share": 0.60}, 30)
    assert severity_change(before, after)[0] == "within noise"


def test_a_large_score_move_with_separated_intervals_is_a_change():
    before = finding("compute_bound", 45, {"model_share": 0.30}, 400)
    after = finding("compute_bound", 90, {"model_share": 0.80}, 400)
    status, why = severity_change(before, after)
    assert status == "changed" and "do not overlap" in why


def test_shares_of_busy_time_apart_on_a_machine_that_queued_the_threads_half_the_time_are_noise():
    # Two attaches of one service on a loaded machine (measured: 53% and 96% of busy samples in
    # model compute, the threads runnable on the run queue about as long as they ran): the
    # samples cannot tell queueing from running, so neither share is known to better than that.
    before = finding("compute_bound", 34, {"model_share_of_busy": 0.53}, 190)
    after = finding("compute_bound", 100, {"model_share_of_busy": 0.96}, 190)
    assert severity_change(before, after, (6, 6))[0] == "changed"  # a quiet machine: a change
    status, why = severity_change(before, after, (6, 6), queued=(0.5, 0.45))
    assert status == "within noise" and "run queue: up to 50%" in why


def test_a_share_of_wait_time_is_not_widened_by_the_run_queue():
    before = finding("lock_contention", 20, {"lock_wait_share": 0.10}, 400)
    after = finding("lock_contention", 95, {"lock_wait_share": 0.70}, 400)
    status, why = severity_change(before, after, (4, 4), queued=(0.5, 0.5))
    assert status == "changed" and "run queue" not in why


def test_the_run_queue_share_is_read_from_the_request_threads_counters():
    def with_queue(one: Report, cpu_s: float, queue_s: float) -> Report:
        threads = tuple(replace(t, os=ThreadOs(cpu_s=cpu_s, runqueue_wait_s=queue_s))
                        for t in one.threads)
        return replace(one, threads=threads)

    quiet, loaded = with_queue(report(0.5, 90), 1.0, 0.0), with_queue(report(0.5, 90), 1.0, 1.0)
    (a, b) = compare._populations(quiet, loaded)
    assert (a.threads, a.queued) == (REQUEST_THREADS, 0.0)
    assert (b.threads, b.queued) == (REQUEST_THREADS, 0.5)


def test_a_counter_only_finding_rests_on_the_score_margin():
    before, after = finding("scheduler_overhead", 10), finding("scheduler_overhead", 95)
    assert severity_change(before, after)[0] == "changed"
    assert severity_change(before, finding("scheduler_overhead", 26))[0] == "within noise"


def test_the_same_report_twice_changes_nothing():
    one = report(0.7, 100, extra_findings=[finding("compute_bound", 74, {"m": 0.5})])
    diff = diff_reports(one, replace(one))
    assert all(f.status == "unchanged" for f in diff.findings)
    assert all(w.change == "unchanged" for w in diff.waits)
    assert all(n.change == 0 for n in diff.flame.nodes)
    assert diff.flame.vanished == ()
    assert "0 findings changed severity" in diff.summary


def test_reports_of_different_programs_are_refused_with_exit_2():
    other = report(0.7, 100, app_file="/opt/other/worker.py", functions=("run_job",))
    with pytest.raises(Exception) as caught:
        diff_reports(report(0.7, 100), other)
    assert caught.value.exit_code == ExitCode.USAGE
    assert "different programs" in caught.value.message


def test_the_same_program_under_another_path_prefix_is_compared_not_refused():
    moved = report(0.0, 0, app_file="$REPO/app/service.py")
    diff = diff_reports(report(0.75, 100, app_file="/srv/app/service.py"), moved)
    assert diff.waits[0].change == "disappeared"
    assert all(node.before > 0 for node in diff.flame.nodes)  # every frame matched


def test_different_rates_and_plans_are_flagged_and_raw_counts_left_out(tmp_path):
    full = with_plan(report(0.5, 70, rate_hz=100), "full fidelity: blocking stacks at 100 Hz")
    diff = diff_reports(report(0.5, 70, rate_hz=29), full)
    assert diff.normalised_only and diff.sampling_differs == ("plan", "rate_hz")
    assert "normalised figures only" in diff.summary
    page = render_diff_html(diff)
    assert 'id="sampling-differs"' in page and "samples before" not in page
    same = diff_reports(report(0.5, 70), report(0.3, 50))
    assert same.sampling_differs == () and "samples before" in render_diff_html(same)


def test_a_plan_differing_only_in_its_thread_count_is_the_same_plan():
    before, after = report(0.5, 70), report(0.5, 70)
    after = with_plan(after, after.sampling.plan.replace(f"{REQUEST_THREADS} threads",
                                                         "12 threads"))
    assert diff_reports(before, after).sampling_differs == ()


def test_per_request_figures_appear_only_when_both_reports_know_the_throughput():
    before, after = report(0.5, 70), report(0.25, 40)
    assert not diff_reports(before, after).per_request
    before, after = with_throughput(before, 100.0), with_throughput(after, 200.0)
    diff = diff_reports(before, after)
    site = diff.waits[0]
    # 2 threads waiting at 100 req/s: 20 ms of waiting per request; 1 thread at 200 req/s: 5 ms
    assert site.before.ms_per_request == pytest.approx(20.0)
    assert site.after.ms_per_request == pytest.approx(5.0)


def test_state_mix_is_compared_per_role_as_shares():
    diff = diff_reports(report(0.8, 100), report(0.2, 30))
    [request] = diff.states
    lock = next(s for s in request.states if s.state == "lock")
    assert (lock.before, lock.after, lock.change) == (0.8, 0.2, -0.6)


def test_the_flame_graph_takes_widths_from_after_and_lists_vanished_paths():
    before, after = report(0.5, 70), report(0.0, 0)
    # the fix renamed the caller
    after = replace(with_frame_function(after, 2, "predict_unlocked"), waits=())
    flame = diff_reports(before, after).flame
    unlocked = next(n for n in flame.nodes if n.function == "predict_unlocked")
    assert unlocked.after == 1.0 and unlocked.before == 0.0 and unlocked.change == 1.0
    handle = next(n for n in flame.nodes if n.function == "handle")
    assert handle.change == 0.0
    [gone] = flame.vanished
    assert gone.path == ("Thread.run", "handle", "predict") and gone.before == 1.0


def test_the_diff_page_escapes_names_from_the_profiled_process():
    hostile = "</script><img src=x onerror=alert(1)>\u202e"
    before, after = (
        replace(with_frame_function(r, 3, hostile),
                target=replace(r.target, cmdline=f"python {hostile}"))
        for r in (report(0.6, 90), report(0.1, 10)))
    page = render_diff_html(diff_reports(before, after))
    shown, data = page.split('<script type="application/json" id="diff-data">')
    assert "<img" not in page and "</script><" not in page
    assert "\u202e" not in shown  # the bidi override is shown as a visible marker
    assert "&lt;img src=x onerror=alert(1)&gt;[U+202E]" in shown
    assert Diff.from_json(json.loads(data.split("</script>")[0])).flame.nodes[3].function == hostile
    assert "script-src 'none'" in html.unescape(page.split("</head>")[0])
    assert "http" not in shown.split("<body>")[1]  # nothing fetched, nothing linked


def test_a_report_is_read_back_the_same_from_its_json_and_its_html(tmp_path):
    one = report(0.6, 90)
    json_path = tmp_path / "r.json"
    json_path.write_text(json.dumps(one.to_json()), encoding="utf-8")
    html_path = tmp_path / "r.html"
    html_path.write_text(render_html({"report": one.to_json(), "evidence_text": [],
                                      "generated_at": "x", "states": [], "categories": [],
                                      "threads": encode(one.threads),
                                      "flame": {"strings": [], "frames": [], "stacks": []},
                                      "timeline": {"interval_s": 0.1, "steps": 0, "lanes": []}},
                                     one),
                         encoding="utf-8")
    assert read_report(json_path) == one
    assert read_report(html_path) == one


@pytest.mark.parametrize("content, message", [
    ("not json at all", "neither JSON nor an HTML page"),
    ('{"steps": [], "summary": {}}', "sweep or experiment report"),
    ('{"kind": "diagnose-diff"}', "is a diff report"),
    ('{"verdict": {}}', "without schema_version"),
    ("<!DOCTYPE html><html><body>hi</body></html>", "without a diagnose data block"),
])
def test_input_that_is_not_a_report_is_a_one_line_bad_profile_error(tmp_path, content, message):
    path = tmp_path / "x.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(BadProfile) as caught:
        read_report(path)
    assert message in caught.value.message and "\n" not in caught.value.message


def test_a_report_without_stacks_says_how_to_get_one(tmp_path):
    # a report written before the stacks table was: its JSON without the key
    old = {key: value for key, value in report(0.5, 70).to_json().items() if key != "stacks"}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old), encoding="utf-8")
    with pytest.raises(BadProfile, match="carries no stacks"):
        read_report(path)


def test_the_cli_writes_the_diff_and_exits_2_on_different_programs(tmp_path):
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps(report(0.75, 100).to_json()), encoding="utf-8")
    after.write_text(json.dumps(report(0.0, 0).to_json()), encoding="utf-8")
    out = tmp_path / "out"
    proc, data = invoke_cli("diff", before, after, "-o", out, "--json", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert Diff.from_json(data).primary.after.severity == "ok"
    written = sorted(p.name for p in out.iterdir())
    assert len(written) == 2 and all(re.fullmatch(r"diagnose-diff-\d{8}-\d{6}\.(html|json)", n)
                                     for n in written)
    # a second diff in the same second does not overwrite the first
    proc, _ = invoke_cli("diff", before, after, "-o", out, check_json=False, timeout=60)
    assert proc.returncode == 0 and len(list(out.iterdir())) == 4
    assert proc.stdout.startswith("Diff: primary: lock_contention critical → ok")

    other = tmp_path / "other.json"
    other.write_text(json.dumps(report(0.7, 100, app_file="/opt/o.py", functions=("job",)).to_json()),
                     encoding="utf-8")
    proc, _ = invoke_cli("diff", before, other, "-o", out, check_json=False, timeout=60)
    assert proc.returncode == ExitCode.USAGE
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    assert len(list(out.iterdir())) == 4

    proc, _ = invoke_cli("diff", before, tmp_path / "missing.json", "-o", out, check_json=False,
                      timeout=60)
    assert proc.returncode == ExitCode.BAD_PROFILE and "no such file" in proc.stderr


def test_the_diff_json_reads_back_as_the_same_model():
    before, after = report(0.75, 100), report(0.1, 10, rate_hz=100)
    before, after = with_throughput(before, 100.0), with_throughput(after, 150.0)
    diff = diff_reports(before, after)
    written = json.loads(json.dumps(diff.to_json()))
    assert Diff.from_json(written) == diff
    # every optional part present, so each is read back: per-request figures, sampling differs
    assert diff.waits[0].before.ms_per_request is not None and diff.normalised_only


def test_the_diff_json_keeps_the_keys_it_was_written_with():
    written = diff_reports(report(0.75, 100), report(0.0, 0)).to_json()
    assert list(written) == ["kind", "schema_version", "before", "after", "sampling_differs",
                             "normalised_only", "per_request", "paths", "primary", "findings",
                             "waits", "states", "flame", "rules", "summary"]
    assert list(written.items())[:2] == [("kind", "diagnose-diff"), ("schema_version", 1)]
    site = written["waits"][0]
    assert site["change"] == "disappeared" and "ms_per_request" not in site["before"]
    assert set(written["flame"]) == {"nodes", "dropped_nodes", "vanished", "vanished_more",
                                     "samples_before", "samples_after"}
