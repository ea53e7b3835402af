"""Every check's declaration (checks/spec.py), in the causal order, and what is built from them:
the evidence labels the reports render."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from diagnose.checks import (async_wait, backend_saturated, children_cpu, compute_bound, cores_taken, cpu_bound,
                             cpu_throttled, deadlock, event_loop_blocked, gc_pressure, gil_contention, kernel_work,
                             lock_contention, logging_lock, poll_loop, pool_transfer, pool_wait, preprocess_bound,
                             scheduler_overhead, stage_bound, unbounded_backlog, underloaded,
                             worker_imbalance)
from diagnose.checks.shared_evidence import MERGED, SHARED
from diagnose.checks.spec import CheckSpec, Evidence

# The checks run on each process, in the causal order: it breaks ties in the ranking
# (checks/arbiter.py), the more specific, more actionable diagnosis first. Far too many runnable
# threads come before the GIL they fight over: on a machine with no idle core both predict no
# gain, and the thread count is the first fix. A CPU quota that throttles comes before both: its
# threads are runnable for want of quota, not of cores. Preprocessing comes before the GIL: the
# work before the mechanism it holds the threads up by (both name the same code, and making the
# work cheaper is the fix). A deadlock (a hung service) is first of all. A backend at capacity
# comes before the locks and idle workers its clients show: it is the end of their chain; so does a
# poll loop's sleep, which requests wait on whatever the thread they poll for does. The
# garbage collector comes before the GIL and the busy threads: it runs holding the GIL, under
# whichever line allocated, so its time is counted by both as the code's (arbiter rule 9). The
# children's CPU and the kernel's come before the threads' own code for the same reason: a child's
# CPU is in no sample of the service, the kernel's shows as the calling line running Python; the
# children first, whose starting costs the parent kernel time (fork, exec, pipes). The cores other
# processes took come after the service's own causes (at equal strength its own cause is named:
# its code is its to change) and before the busy threads' and cores' symptoms, which they explain:
# a thread waiting for a core shows the line it will run, so a starved service's samples read as
# busy in its model or its code (arbiter rule 10).
# (CheckSpec[Any]: each check is typed with its own Settings class; the engine hands each its own.)
CHECKS: tuple[CheckSpec[Any], ...] = tuple(m.SPEC for m in (
    deadlock, event_loop_blocked, stage_bound, backend_saturated, poll_loop, lock_contention, pool_wait, async_wait,
    logging_lock,
    unbounded_backlog, cpu_throttled, children_cpu, kernel_work,
    scheduler_overhead, preprocess_bound, gc_pressure, gil_contention, cores_taken, compute_bound, cpu_bound,
    underloaded))

# Checks run on a service's processes together (checks/service_verdict.py).
SERVICE_CHECKS: tuple[CheckSpec[Any], ...] = (pool_transfer.SPEC, worker_imbalance.SPEC)

# Where a service check stands in the causal order: just before the check named here; one not
# named follows them all. A process pool's transfers come before the children's CPU and the
# kernel's work: the feeder's pipe writes and the workers' reads are the kernel's work the
# transfers cause, and the line the requests wait on the pool is the end of that chain.
SERVICE_CHECK_BEFORE = {pool_transfer.ID: children_cpu.ID}


def _causal_order() -> tuple[str, ...]:
    ids: list[str] = []
    for check in CHECKS:
        ids += [s.id for s in SERVICE_CHECKS if SERVICE_CHECK_BEFORE.get(s.id) == check.id]
        ids.append(check.id)
    return tuple(ids) + tuple(s.id for s in SERVICE_CHECKS if s.id not in SERVICE_CHECK_BEFORE)


# Every check's id, process and service checks, in the causal order (checks/arbiter.py rule 5).
CAUSAL_ORDER: tuple[str, ...] = _causal_order()

SPECS: tuple[CheckSpec[Any], ...] = CHECKS + SERVICE_CHECKS


def spec(check_id: str) -> CheckSpec[Any]:
    return next(s for s in SPECS if s.id == check_id)


class ConflictingEvidence(Exception):
    """Two checks declare one evidence key with different labels or units."""


@lru_cache(maxsize=1)
def evidence_labels() -> dict[str, Evidence]:
    """Every evidence key any check writes (and the service's merge fields) -> its declaration.
    A key two checks write means one thing: declared differently, it is an error."""
    labels: dict[str, Evidence] = {key: SHARED[key] for key in MERGED}
    for check in SPECS:
        for key, declared in check.evidence.items():
            known = labels.setdefault(key, declared)
            if known != declared:
                raise ConflictingEvidence(f"evidence {key!r} of {check.id} is declared as {declared}, "
                                          f"elsewhere as {known}")
    return labels
