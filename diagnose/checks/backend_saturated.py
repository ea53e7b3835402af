"""backend_saturated: requests wait on a local process behind a socket, and that process is at its
capacity: the backend is the limit, not this service.

What it finds:
    The threads asleep on connections (recv, a poll on the socket) to an address that a process
    on this host listens on (model/servers.py: found from the target's own network namespace
    and /proc/*/fd, then read beside the service for the rest of the window without ptrace):
    their mean share of the window waiting on it, and how busy the serving process was by
    /proc: its busiest thread's share of a core, its share of its usable cores, or its cores
    while its threads queued on its own GIL. The score needs all three: the waits, a server at
    capacity, and more requests in flight at it than it serves at once (requests queue there).

Why it matters:
    The service's threads wait, so the service looks idle ("waiting on IO"), and tuning it buys
    nothing: every request is served by one process whose capacity is spent. Throughput rises
    only with that process's capacity.

What to do instead:
    Run more of the backend (processes sharing its port with SO_REUSEPORT, a pre-fork server's
    workers, replicas behind a balancer), or make each of its requests cheaper; and, where its
    own threads queue on its GIL, processes rather than threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from diagnose.checks.base import (Finding, Lever, LeverKind, NotApplicable, ScoreBasis, make_finding, pct,
                                  ramp, top_sites)
from diagnose.checks.spec import NOT_MEASURED, CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.declare import declarations, key
from diagnose.checks.measurements import OMITTED, Measurements, Omitted
from diagnose.model.chains import Chain
from diagnose.model.servers import ServerProcess
from diagnose.vocab import ThreadState
from diagnose.report.redact import redact_cmdline

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis

ID = "backend_saturated"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "Requests wait on a backend that is at its capacity"
    what: str = ("Share of the window the service's threads waited on connections to a process on this host, and "
                 "how close that process ran to its capacity (/proc: its busiest thread, its cores, its GIL).")
    advice: tuple[str, ...] = (
        ("Tuning this service will not raise its throughput while the backend is at capacity: re-measure after "
         "the backend's change, with the same load."),
    )
    low: float = 0.3  # the threads' share of the window waiting on the backend
    high: float = 0.7
    saturation_low: float = 0.6  # the backend's busiest thread / cores / GIL, of its capacity
    saturation_high: float = 0.9
    queue_low: float = 1.0  # requests in flight at the backend per request it serves at once
    queue_high: float = 2.0


@dataclass(frozen=True, kw_only=True)
class BackendEvidence(Measurements):
    backend: str = key("backend the threads wait on (address, process)", U.TEXT)
    backend_wait_share: float = key("share of its clients' time waiting on the backend", U.PERCENT)
    backend_clients: int = key("threads waiting on the backend", U.THREADS)
    backend_in_flight: float = key("requests in flight at the backend, on average", U.NUMBER)
    backend_processes: int = key("backend processes serving the address", U.NUMBER)
    backend_cores: float = key("backend CPU over the window (/proc)", U.CORES)
    backend_busiest_thread_cores: float = key("backend's busiest thread (/proc)", U.CORES)
    backend_busiest_thread_busy: float = key(
        "backend's busiest thread running or runnable (/proc)", U.PERCENT)
    backend_busy_threads: int = key("backend threads that ran half a core or more", U.THREADS)
    backend_gil_wait_share: float = key("backend threads' share waiting on its GIL (kernel)", U.PERCENT)
    backend_saturation: float = key("backend's load, of its capacity", U.PERCENT)
    backend_own_wait: str | None = key(
        "what the backend's threads waited on most (kernel)", U.TEXT, none=NOT_MEASURED)
    machine_idle_cores: float | None = key("cores the machine left idle", U.CORES, none=NOT_MEASURED)
    # Where the backend was sampled with the service (checks/service_verdict.py follows it).
    backend_sampled_pid: int | Omitted = key(
        "backend process sampled with the service (--follow-peers)", U.ID, optional=True)


EVIDENCE = declarations(BackendEvidence)


def run(analysis: Analysis, settings: Settings) -> Finding | NotApplicable:
    if analysis.kernel is None:
        return NotApplicable(ID, "needs the kernel's record of each blocked thread's wait (`attach`)")
    # the chains whose first hop a local process serves, read beside the service: its backends
    waits = [c for c in analysis.chains if c.at_local_backend]
    if not waits:
        return NotApplicable(ID, "no thread waited on a socket a local process serves")
    wait = waits[0]
    backend = wait.first
    busy_at_once = max(1, backend.busy_threads)
    queued = wait.occupancy / busy_at_once
    score = (100 * ramp(wait.share, settings.low, settings.high)
             * ramp(backend.saturation, settings.saturation_low, settings.saturation_high)
             * ramp(queued, settings.queue_low, settings.queue_high))
    server = max(backend.processes, key=lambda s: s.cpu_cores)
    idle = analysis.os.machine_idle_cores if analysis.os is not None else None
    copies = len(backend.processes) + 1  # the advice's first step: one more copy of the backend
    gain, basis = _gain(wait, copies, idle)
    evidence = BackendEvidence(
        backend=f"{backend.address}: " + "; ".join(
            f"pid {s.pid} `{redact_cmdline(list(s.command))}`" for s in backend.processes[:4]),
        backend_wait_share=wait.share,
        backend_clients=len(wait.tids),
        backend_in_flight=round(wait.occupancy, 2),
        backend_processes=len(backend.processes),
        backend_cores=round(sum(s.cpu_cores for s in backend.processes), 3),
        backend_busiest_thread_cores=server.busiest_thread_cores,
        backend_busiest_thread_busy=server.busiest_thread_busy,
        backend_busy_threads=backend.busy_threads,
        backend_gil_wait_share=server.gil_share,
        backend_saturation=round(backend.saturation, 4),
        backend_own_wait=f"{server.top_wait} ({pct(server.top_wait_share)})" if server.top_wait else None,
        machine_idle_cores=idle,
        backend_sampled_pid=server.pid if server.followed else OMITTED)
    rows = analysis.samples[analysis.samples["tid"].isin(wait.tids)
                            & (analysis.samples["state"] == ThreadState.IO)]
    sites = top_sites(analysis, rows, float(analysis.samples[analysis.samples["tid"].isin(wait.tids)]
                                            ["count"].sum()), limit=3)
    who, capacity = _who(backend.processes), _capacity_words(backend.processes)
    summary = (f"{len(wait.tids)} threads waited {pct(wait.share)} of the window on {backend.address}, "
               f"served by {who}: {capacity}; {wait.occupancy:.1f} requests in "
               f"flight there at once for {busy_at_once} served at a time")
    advice = [
        f"The backend at {backend.address} ({who}) is the limit: {capacity}. Run "
        f"more of it: {copies} processes sharing its port (SO_REUSEPORT) or a pre-fork server's "
        f"workers, or replicas behind a balancer; or make each of its requests cheaper"
        + (" (its threads queue on its GIL: processes, not threads)" if server.gil_share >= 0.2 else "")
        + f". Predicted: up to {gain:.2f}x this service's throughput ({basis}).",
    ] + list(settings.advice)
    lever = Lever(LeverKind.MORE_CORES, round(max(1.0, gain), 2),
                  f"with {copies} backend processes", basis, upper_bound=True)
    return make_finding(ID, settings, score, summary, evidence, sites, advice=advice,
                        gain=(max(1.0, gain), basis), levers=[lever],
                        basis=ScoreBasis("backend_wait_share",
                                         lambda s: 100 * ramp(s, settings.low, settings.high)
                                         * ramp(backend.saturation, settings.saturation_low,
                                                settings.saturation_high)
                                         * ramp(queued, settings.queue_low, settings.queue_high)))


def _who(servers: tuple[ServerProcess, ...]) -> str:
    named = [f"pid {s.pid}" + (f" `{s.program}`" if s.command else "") for s in servers[:2]]
    more = f" and {len(servers) - 2} more" if len(servers) > 2 else ""
    return ", ".join(named) + more


def _capacity_words(servers: tuple[ServerProcess, ...]) -> str:
    """Its load in the counters' words: "its busiest thread ran 0.98 cores (98% of the window)"."""
    server = max(servers, key=lambda s: s.cpu_cores)
    words = (f"its busiest thread ran {server.busiest_thread_cores:.2f} cores "
             f"({pct(server.busiest_thread_cores)} of its {server.window_s:.1f} s read)")
    runnable = server.busiest_thread_busy - server.busiest_thread_cores
    if runnable >= 0.1:  # a machine whose cores are taken: it waited for one
        words += f" and waited for a core {pct(runnable)} more"
    words += f", the process {server.cpu_cores:.2f} of its {server.usable_cores:g} usable cores"
    if server.gil_share >= 0.2:
        words += f", its threads waiting on its GIL {pct(server.gil_share)} of the time"
    return words


def _gain(wait: Chain, copies: int, idle_cores: float | None) -> tuple[float, str]:
    """`copies` of the backend for today's: at most their ratio, no more than the waits allow
    (Amdahl: the rest of each request's time stays) and the idle cores feed (a copy needs its
    own core)."""
    servers = wait.local_servers
    cores = sum(s.cpu_cores for s in servers)
    amdahl = 1.0 / max(1e-6, 1.0 - wait.share)
    bounds = [copies / max(1, len(servers)), amdahl]
    words = (f"estimate: {copies} backend processes for {len(servers)}, the threads "
             f"waiting {pct(wait.share)} of the time on it (at most {amdahl:.1f}x)")
    if idle_cores is not None and cores > 0:
        bounds.append((cores + idle_cores) / cores)
        words += f", {idle_cores:.2f} idle cores for the copy beside its {cores:.2f}"
    return min(bounds), words


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run, needs=(), uses=(Input.OS_COUNTERS,))
