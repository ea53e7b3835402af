"""The chains of waits the report states (report.chains): those of every process of the service
that matter, most thread-time first, each in the report's types and in words.

Every process's chains (Analysis.chains) are read, a gunicorn tree's master and workers alike, and
each names its pid. A chain is kept when its threads' wait on it is at least MIN_PROCESS_SHARE of
its process's thread time, and at most MAX_CHAINS are kept: the page prints one line each.
"""

from __future__ import annotations

from diagnose.model.chain_words import chain_line
from diagnose.model.chains import Chain, Hop
from diagnose.model.service import ProcessView, Service
from diagnose.vocab import ChainEnd, ProcessRole, ThreadRole
from diagnose.report.model.wait_chains import ChainHop, WaitChain

MAX_CHAINS = 8  # lines the page and the report give them; the wait-for graph has every wait
# A chain below this share of its process's thread time is left out. Measured on the recordings
# (fixtures/recorded/): the request threads' wait that ends at a saturated backend behind a shared
# lock (lock_across_saturated_backend) is 4.5% of its process's thread time, and must show; a
# main thread joining its workers (backend_saturated_tcp: 3.1%) or one resumed futex wait (2.8%)
# is not a chain to act on. Ending such a wait entirely frees at most this share of the process's
# threads' time.
MIN_PROCESS_SHARE = 0.04
HANGS = (ChainEnd.KNOT, ChainEnd.CYCLE)  # threads waiting on one another: stated whoever they are
SUPERVISING = (ProcessRole.MASTER, ProcessRole.HELPER)  # processes that serve no request


def reported_chains(service: Service) -> tuple[WaitChain, ...]:
    """The chains the report states, most thread-time first: where the service's work waits.
    Not a thread waiting for work, a supervising main thread (joining its workers, pacing a
    loop) beside threads that do the work, or a master's or helper's wait: replayed, every
    recording's report listed those ("lock ... end: the lock's holder", "end: unknown") beside
    the requests' own chain, and a busy gunicorn tree's only line was its master's. A knot is
    stated whoever waits in it."""
    found: list[tuple[float, WaitChain]] = []
    for view in service.processes:
        analysis = view.analysis
        roles = {int(t): role for t, role in zip(analysis.threads["tid"], analysis.threads["role"])}
        # the threads the chains were drawn from (Analysis.chains leaves a library's out)
        workers = [t for t, role in roles.items() if role != ThreadRole.LIBRARY]
        supervising = view.role in SUPERVISING or any(t != view.pid for t in workers)
        # the request tasks' chains carry the worker threads' own wait as their hops
        carried = set(analysis.worker_threads.tids) if analysis.task_chains and analysis.worker_threads else set()
        for chain in analysis.task_chains:
            if chain.share >= MIN_PROCESS_SHARE:  # of the request tasks' time
                found.append((chain.seconds, reported(chain, view.pid)))
        for chain in analysis.chains:
            # threads waiting on it at once, over the process's threads: its share of their time
            if not workers or chain.occupancy / len(workers) < MIN_PROCESS_SHARE:
                continue
            if carried and {w.tid for w in chain.waiters} <= carried:
                continue
            if chain.end not in HANGS and not _work_waits(chain, roles, view, supervising):
                continue
            found.append((chain.seconds, reported(chain, view.pid)))
    found.sort(key=lambda pair: -pair[0])  # stable: a process's own order among equal times
    return tuple(chain for _, chain in found[:MAX_CHAINS])


def _work_waits(chain: Chain, roles: dict[int, ThreadRole], view: ProcessView, supervising: bool) -> bool:
    """Some thread doing the process's work waits in it: not one waiting for work, not a master's
    or helper's (but its wait for a child to exit), and not only the main thread where other
    threads do the work."""
    if view.role in SUPERVISING:
        # blocked in wait4 on a child: a parent that waits for its child to exit, which is how a
        # tree hangs (the child blocked writing to a pipe the parent never reads)
        return chain.end == ChainEnd.CHILD
    waiting = [w.tid for w in chain.waiters if roles.get(w.tid) != ThreadRole.IDLE]
    return bool(waiting) and not (supervising and all(t == view.pid for t in waiting))


def reported(chain: Chain, pid: int | None) -> WaitChain:
    """One chain of process `pid` as the report states it."""
    return WaitChain(pid=pid, threads=len(chain.waiters), share=chain.share, thread_seconds=chain.seconds,
                     hops=tuple(_hop(h) for h in chain.hops), end=chain.end, line=chain_line(chain),
                     tasks=round(chain.tasks, 2) if chain.tasks else None)


def _hop(hop: Hop) -> ChainHop:
    read = tuple(s.pid for s in hop.processes)
    return ChainHop(resource=hop.resource, label=hop.label, share=round(hop.share, 4), address=hop.address,
                    pids=read + tuple(p for p in hop.pids if p not in read), thread=hop.thread,
                    saturation=round(hop.saturation, 4) if hop.processes else None,
                    workers=hop.workers or None, workers_busy=hop.workers_busy if hop.workers else None,
                    held_by=hop.held_by or None)
