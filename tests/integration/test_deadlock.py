"""A service whose threads take two locks in opposite orders hangs: attached by the real CLI and
py-spy, it is reported as a deadlock (the cycle's threads, the lock each holds and the one it
waits for, at their lines), not as lock contention; the same service with one lock order is not.
A lock held across a blocking call is lock contention whose first advice moves the call out. A
deadlock that forms while the window is sampled is still the deadlock, and says when it formed."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from diagnose.report.model import Report
from tests.conftest import WORKLOADS, marker_line
from tests.integration.conftest import CliRun, attach_workload, requires_ptrace, running, workload_command
from tests.integration.typed import as_report, deadlock_cycles, evidence, finding

pytestmark = [pytest.mark.integration, requires_ptrace]

SECONDS = "3"
THREADS = 8  # the fixtures' default request threads

# Per fixture: the cycle as (line that took the held lock, line that waits for the other) pairs,
# by marker, one pair per thread of the cycle.
CYCLES = {
    "deadlock_two_locks": {("inventory-first", "pricing-second"), ("pricing-first", "inventory-second")},
    "deadlock_rlock": {("cache-outer", "registry-second"), ("registry-outer", "cache-second")},
}


def check_deadlock(report: Report, workload: str, forming: bool = False) -> None:
    """The verdict is the deadlock, with the fixture's two-thread cycle at its marked lines and
    the other request threads as its victims (all of them; `forming`: some, a cycle closing
    inside the window leaves each victim a span to be seen blocked in that a loaded machine can
    cut short, so how many is a figure, not the decision)."""
    # On failure, what decides "blocked all window" per thread: its states, the span of its
    # samples and the CPU /proc counted (model/deadlock.blocked_threads).
    brief = json.dumps({"verdict": report.verdict,
                        "findings": [(f.id, f.score, f.summary) for f in report.findings],
                        "window_s": report.sampling.duration_s,
                        "threads": [(t.name, t.states, t.first_s, t.last_s,
                                     t.os.cpu_s if t.os else None) for t in report.threads],
                        "waits": [(w.kind, w.line, w.threads) for w in report.waits]},
                       indent=1, default=str)
    assert report.verdict.primary == "deadlock", brief
    assert report.verdict.severity == "critical", brief
    found = finding(report, "deadlock")
    assert evidence(found, "deadlocked_threads") == 2, found.evidence
    victims = evidence(found, "victim_threads")
    if forming:
        assert isinstance(victims, int) and 1 <= victims <= THREADS - 2, found.evidence
    else:
        assert victims == THREADS - 2, found.evidence
    path = WORKLOADS / f"{workload}.py"
    (cycle,) = deadlock_cycles(found)
    seen = {(t.holds.line, t.waits_for.line) for t in cycle.threads}
    expected = {(marker_line(path, held), marker_line(path, waits)) for held, waits in CYCLES[workload]}
    assert seen == expected, cycle
    assert all(t.holds.file.endswith(f"{workload}.py") for t in cycle.threads), cycle
    # Each thread waits for the lock the other holds.
    names = {t.thread for t in cycle.threads}
    assert len(names) == 2 and {t.held_by for t in cycle.threads} == names, cycle
    holds = {t.thread: t.holds.qualified for t in cycle.threads}
    assert all(t.waits_for.qualified == holds[t.held_by] for t in cycle.threads), cycle
    assert "always take" in found.advice[0], found.advice
    assert finding(report, "lock_contention").severity != "critical", brief


@pytest.mark.parametrize("workload", sorted(CYCLES))
def test_threads_taking_two_locks_in_opposite_orders_are_reported_as_a_deadlock(captures, workload):
    capture = attach_workload(captures, workload, seconds=SECONDS)
    check_deadlock(capture.report, workload)
    # the page's no-JavaScript view prints the thread dump the terminal prints
    (page,) = capture.out_dir.glob("*.html")
    assert '<pre id="noscript-deadlock">Found one deadlock:' in page.read_text(encoding="utf-8")


@pytest.mark.parametrize("workload", sorted(CYCLES))
def test_the_same_service_with_one_lock_order_is_no_deadlock(captures, workload):
    report = attach_workload(captures, workload, "--lock-order", "consistent", seconds=SECONDS).report
    assert report.verdict.primary != "deadlock", report.verdict
    assert finding(report, "deadlock").score == 0


def test_a_lock_held_across_a_blocking_fetch_is_advised_to_move_the_fetch_out(captures):
    report = attach_workload(captures, "lock_across_io", seconds=SECONDS).report
    assert report.verdict.primary == "lock_contention", report.verdict
    lock = finding(report, "lock_contention")
    path = WORKLOADS / "lock_across_io.py"
    assert lock.sites[0].line == marker_line(path, "lock-acquire")
    assert lock.advice[0].startswith("Move `fetch_features` out of the `with MODEL_LOCK:` block"), \
        lock.advice
    assert evidence(lock, "fix") == {"knob": "call_outside_lock", "value": "fetch_features"}
    holder = report.waits[0].holders[0]
    assert holder.stack[:2] == ("handle_request", "fetch_features"), holder
    assert holder.scope_line == marker_line(path, "held-fetch") and holder.state == "io", holder
    assert finding(report, "deadlock").score == 0


def test_a_deadlock_that_forms_inside_the_window_is_reported_with_when_it_formed(tmp_path: Path):
    # One lock order until half a second after the window is a tenth under way (SIGUSR2, sent
    # when the CLI says so, however long its start-up took), then opposite orders: the cycle
    # closes about a second into the 5 s window. A victim counts once it has been seen blocked
    # for a forming span (model/deadlock.py): 5 s leaves every one of them 4 s for it; 4 s once
    # left the last victim short on a loaded machine.
    workload = "deadlock_two_locks"
    command = workload_command(workload, "--seconds", "60", "--hang-after", "0.5", "--hang-after-signal")
    with running(command) as pid:
        attach = CliRun("attach", pid, "--duration", "5", "--json", "--output-dir", tmp_path)
        assert attach.wait_for("sampled 10%"), attach.finish(timeout=5)[0].stderr
        os.kill(pid, signal.SIGUSR2)
        proc, data = attach.finish()
    assert proc.returncode == 0, proc.stderr
    assert data is not None, proc.stderr
    report = as_report(data)
    check_deadlock(report, workload, forming=True)
    found = finding(report, "deadlock")
    # When it formed is a figure (the signal's delivery, py-spy's first sample): inside the
    # window, and said in the summary.
    formed = evidence(found, "formed_at_s")
    assert isinstance(formed, (int, float)) and 0.0 < formed < report.sampling.duration_s, found.summary
    assert f"deadlocked since about {formed:.1f} s into the window" in found.summary, found.summary
