"""scheduler_overhead's gain counts only the preemptions: fewer threads return the switching the
cores' oversubscription causes (involuntary switches), not a thread's own blocking (voluntary
switches: GIL handoffs, locks, IO), whose waits stay where they are. Counted in, 8 threads
sharing one SQLite connection on CPython 3.13 (~30,000 switches/s, most of them GIL handoffs)
read a 1.97x gain, above the GIL convoy's own 1.93x, and led with "cut the request threads".
Replayed on the recorded 3.11 attach of the same workload (fixtures/recorded/sqlite_shared_busy_machine)."""

from __future__ import annotations

import pytest

from diagnose.checks.scheduler_overhead import CONTEXT_SWITCH_COST_S
from tests.replay import replay


def test_the_gain_of_fewer_threads_counts_the_preemptions_alone(tmp_path):
    report = replay("sqlite_shared_busy_machine", "scheduler_overhead_led", tmp_path)
    found = next(f for f in report.findings if f.id == "scheduler_overhead")
    preempted, blocked = found.evidence["involuntary_ctx_per_s"], found.evidence["voluntary_ctx_per_s"]
    assert blocked > 2 * preempted  # GIL handoffs outnumber the preemptions here
    cores = found.evidence["usable_cores"]
    assert found.predicted_gain == pytest.approx(1 / (1 - preempted * CONTEXT_SWITCH_COST_S / cores), abs=0.01)
    assert report.verdict.primary == "gil_contention"
