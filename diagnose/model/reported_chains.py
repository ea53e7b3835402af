"""The chains of waits the report states (report.chains): those of every process of the service
that matter, most thread-time first, each in the report's types and in words.

Every process's chains (Analysis.chains) are read, a gunicorn tree's master and workers alike, and
each names its pid. A chain is kept when its threads' wait on it is at least MIN_PROCESS_SHARE of
its process's thread time, and at most MAX_CHAINS are kept: the page prints one line each.
"""

from __future__ import annotations

from diagnose.model.chain_words import chain_line
from diagnose.model.chains import Chain, Hop
from diagnose.model.service import Service
from diagnose.vocab import ChainEnd, ThreadRole
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


def reported_chains(service: Service) -> tuple[WaitChain, ...]:
    """The chains the report states, most thread-time first: the request threads' and any
    knot's; a service without request threads (a hung job, a loop that serves none) has only
    its other threads' chains to say where its time ends, and states those."""
    found: list[tuple[float, bool, WaitChain]] = []
    for view in service.processes:
        analysis = view.analysis
        roles = {int(t): role for t, role in zip(analysis.threads["tid"], analysis.threads["role"])}
        # the threads the chains were drawn from (Analysis.chains leaves a library's out)
        threads = sum(1 for role in roles.values() if role != ThreadRole.LIBRARY)
        for chain in analysis.chains:
            # threads waiting on it at once, over the process's threads: its share of their time
            if not threads or chain.occupancy / threads < MIN_PROCESS_SHARE:
                continue
            # a main thread joining its workers, a consumer waiting on its queue: a wait, but not
            # one a request spends time in (every recording's report listed them as "the
            # lock's holder" or "unknown" beside the requests' own chain)
            requests = (chain.end in HANGS
                        or any(roles.get(w.tid) == ThreadRole.REQUEST for w in chain.waiters))
            found.append((chain.seconds, requests, reported(chain, view.pid)))
    if any(requests for _, requests, _ in found):
        found = [entry for entry in found if entry[1]]
    found.sort(key=lambda entry: -entry[0])  # stable: a process's own order among equal times
    return tuple(chain for _, _, chain in found[:MAX_CHAINS])


def reported(chain: Chain, pid: int | None) -> WaitChain:
    """One chain of process `pid` as the report states it."""
    return WaitChain(pid=pid, threads=len(chain.waiters), share=chain.share, thread_seconds=chain.seconds,
                     hops=tuple(_hop(h) for h in chain.hops), end=chain.end, line=chain_line(chain))


def _hop(hop: Hop) -> ChainHop:
    read = tuple(s.pid for s in hop.processes)
    return ChainHop(resource=hop.resource, label=hop.label, share=round(hop.share, 4), address=hop.address,
                    pids=read + tuple(p for p in hop.pids if p not in read), thread=hop.thread,
                    saturation=round(hop.saturation, 4) if hop.processes else None)
