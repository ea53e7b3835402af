"""A chain of waits (model/chains.py) in one line, every hop from the waiting threads to the end:

    16 threads, 99% of the time → socket to 127.0.0.1:8000 → pid 4242 (python backend.py):
    busiest thread 1.00 core → end: the server at capacity

(one line). Command lines are redacted (ServerProcess.program); a process the window did not
read is named by its pid alone.
"""

from __future__ import annotations

from diagnose.model.chains import AT_CAPACITY, Chain, Hop
from diagnose.model.servers import ServerProcess
from diagnose.vocab import ChainEnd

ARROW = " → "

END_WORDS = {
    ChainEnd.LOCAL_PEER: "a local process the window did not read (its load unknown)",
    ChainEnd.REMOTE: "an address no local process serves",
    ChainEnd.GIL_HOLDER: "the GIL's holder",
    ChainEnd.LOCK_HOLDER: "the lock's holder",
    ChainEnd.CHILD: "a child process",
    ChainEnd.CPU_QUOTA: "the CPU quota",
    ChainEnd.WAITING_FOR_WORK: "waiting for work",
    ChainEnd.TIMER: "a timer or sleep",
    ChainEnd.CYCLE: "back into a process already on the chain",
    ChainEnd.KNOT: "a knot: threads waiting on one another, none running",
    ChainEnd.WORKER_THREADS: "the worker threads, every one taken",
    ChainEnd.POOL_ITEMS: "the pool's items, every one held",
    ChainEnd.UNKNOWN: "unknown",
}


def chain_line(chain: Chain) -> str:
    """The chain as one line."""
    if chain.tasks:  # asyncio request tasks (model/task_chains.py), on average over the reads
        parts = [f"{chain.tasks:.0f} request task{'' if round(chain.tasks) == 1 else 's'}, "
                 f"{chain.share:.0%} of their time"]
    else:
        n = len(chain.waiters)
        parts = [f"{n} thread{'' if n == 1 else 's'}, {chain.share:.0%} of the time"]
    for hop in chain.hops:
        parts.extend(_hop_words(hop))
    return ARROW.join([*parts, f"end: {_end_words(chain)}"])


def _hop_words(hop: Hop) -> list[str]:
    """The hop's wait, then who serves it, where that is named."""
    wait = hop.label + (f" ({hop.share:.0%} of the time)" if hop.share else "")
    read = {s.pid for s in hop.processes}
    servers = [_process_words(s) for s in hop.processes]
    servers += [f"pid {p}" for p in hop.pids if p not in read]
    if hop.thread is not None:
        servers.append(f"{hop.thread_name} (thread {hop.thread})" if hop.thread_name else f"thread {hop.thread}")
    if hop.held_by:
        servers.append(f"held most by {hop.held_by}")
    if hop.workers:
        servers.append(f"{hop.workers} worker thread{'' if hop.workers == 1 else 's'}, "
                       f"{hop.workers_busy:.1f} busy on average")
    return [wait, ", ".join(servers)] if servers else [wait]


def _process_words(server: ServerProcess) -> str:
    cores = server.busiest_thread_cores
    program = f" ({server.program})" if server.command else ""
    return f"pid {server.pid}{program}: busiest thread {cores:.2f} core{'' if cores == 1 else 's'}"


def _end_words(chain: Chain) -> str:
    if chain.end != ChainEnd.LOCAL_SERVER:
        return END_WORDS[chain.end]
    saturation = chain.last.saturation
    if saturation >= AT_CAPACITY:
        return "the server at capacity"
    return f"the server, at {saturation:.0%} of its capacity"
