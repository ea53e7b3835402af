"""A thread on the line that takes a lock is taking it, not computing the model the lock's block
calls (checks/compute_bound.py). Replays a live gRPC attach on a machine with no idle core
(fixtures/recorded/grpc_locked_busy_machine, from
tests/integration/test_grpc_tree.py::test_grpc_server_queueing_on_its_model_lock_is_the_verdict_not_its_idle_child):
threads woken at `with self.locks[i]:` sat runnable, their samples calibrated as running Python
there, and compute_bound counted them as model compute (94, over the lock's 81)."""

from __future__ import annotations

from tests.conftest import REPO, marker_line
from tests.replay import replay


def test_a_model_serialised_by_a_lock_on_a_busy_machine_reads_the_lock_not_compute(tmp_path) -> None:
    report = replay("grpc_locked_busy_machine", "compute_bound_led", tmp_path)
    assert report.verdict.primary == "lock_contention", report.verdict
    lock = next(f for f in report.findings if f.id == "lock_contention")
    assert lock.sites[0].line == marker_line(REPO / "fixtures" / "servers" / "grpc_locked.py", "model-lock")
    compute = next(f for f in report.findings if f.id == "compute_bound")
    # The model's own line is the only model compute left: the `with` line is not a compute site.
    assert all(s.line != lock.sites[0].line for s in compute.sites), compute.sites
    assert compute.score < lock.score
