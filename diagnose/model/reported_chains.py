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
from diagnose.vocab import ThreadRole
from diagnose.report.model.wait_chains import ChainHop, WaitChain

MAX_CHAINS = 8  # lines the page and the report give them; the wait-for graph has every wait
# A chain below this share of its process's thread time is left out. Measured on the recordings
# (fixtures/recorded/): the request threads' wait that ends at a saturated backend behind a shared
# lock (lock_across_saturated_backend) is 4.5% of its process's thread time, and must show; a
# main thread joining its workers (backend_saturated_tcp: 3.1%) or one resumed futex wait (2.8%)
# is not a chain to act on. Ending such a wait entirely frees at most this share of the process's
# threads' time.
MIN_PROCESS_SHARE = 0.04


def reported_chains(service: Service) -> tuple[WaitChain, ...]:
    """The chains the report states, most thread-time first."""
    found: list[tuple[float, WaitChain]] = []
    for view in service.processes:
        analysis = view.analysis
        # the threads the chains were drawn from (Analysis.chains leaves a library's out)
        threads = sum(1 for role in analysis.threads["role"] if role != ThreadRole.LIBRARY)
        for chain in analysis.chains:
            # threads waiting on it at once, over the process's threads: its share of their time
            if not threads or chain.occupancy / threads < MIN_PROCESS_SHARE:
                continue
            found.append((chain.seconds, reported(chain, view.pid)))
    found.sort(key=lambda pair: -pair[0])  # stable: a process's own order among equal times
    return tuple(chain for _, chain in found[:MAX_CHAINS])


def reported(chain: Chain, pid: int | None) -> WaitChain:
    """One chain of process `pid` as the report states it."""
    return WaitChain(pid=pid, threads=len(chain.waiters), share=chain.share, thread_seconds=chain.seconds,
                     hops=tuple(_hop(h) for h in chain.hops), end=chain.end, line=chain_line(chain))


def _hop(hop: Hop) -> ChainHop:
    read = tuple(s.pid for s in hop.processes)
    return ChainHop(resource=hop.resource, label=hop.label, share=round(hop.share, 4), address=hop.address,
                    pids=read + tuple(p for p in hop.pids if p not in read), thread=hop.thread,
                    saturation=round(hop.saturation, 4) if hop.processes else None)
