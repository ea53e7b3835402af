"""Where the service's waits end, as the report states it: chains of waits (model/chains.py
follows them, model/reported_chains.py picks those that matter; the page prints them under the
wait-for graph, the ticket summary the first under the verdict).

A chain is a group of one process's threads waiting on one thing, and every hop from that thing
through who serves it to where the wait ends. `line` is the chain in words
(model/chain_words.chain_line): command lines in it are redacted; every name in it comes from the
profiled processes, so outputs show it as text only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from diagnose.vocab import ChainEnd, ResourceKind
from diagnose.report.model.codec import OPTIONAL

__all__ = ["ChainEnd", "ChainHop", "ResourceKind", "WaitChain"]


@dataclass(frozen=True)
class ChainHop:
    """One link of a chain: what the side before it waits on, and who serves that."""

    resource: ResourceKind
    label: str  # in the kernel's words: "socket to 127.0.0.1:8000", "the GIL"
    # past the first hop, the share of the previous server's time spent waiting on this one (its
    # threads' /proc ticks, or the GIL holder's blocked instants); the first hop's is the chain's
    share: float = 0.0
    address: str = ""  # a socket's peer as the kernel names it ("127.0.0.1:8000"), else ""
    # the processes serving or holding it: those read beside the service first, then those the
    # kernel names that were not read
    pids: tuple[int, ...] = ()
    thread: int | None = field(default=None, metadata=OPTIONAL)  # the serving thread's tid, where named
    # how close to its capacity the processes read beside the service ran, 0-1 (their mean
    # ServerProcess.saturation); absent where none was read
    saturation: float | None = field(default=None, metadata=OPTIONAL)
    # the worker threads serving it (an executor's, a capacity limiter's) and how many were busy
    # on average; absent where no pool serves it
    workers: int | None = field(default=None, metadata=OPTIONAL)
    workers_busy: float | None = field(default=None, metadata=OPTIONAL)
    # the code most often holding it while others waited (the GIL's top holder), where named
    held_by: str | None = field(default=None, metadata=OPTIONAL)


@dataclass(frozen=True)
class WaitChain:
    """Threads of one process waiting on one thing, every hop to where their wait ends."""

    pid: int | None  # the process whose threads wait
    threads: int  # how many of its threads wait on the first hop
    share: float  # of those threads' /proc ticks, the mean share spent waiting on the first hop
    thread_seconds: float  # that time summed over them, in thread-seconds of the window
    hops: tuple[ChainHop, ...]
    end: ChainEnd
    line: str  # the chain in one line (model/chain_words.chain_line)
    # asyncio request tasks waiting on the first hop, on average (model/task_chains.py): then
    # `threads` is 0, `share` is of the tasks' time and `thread_seconds` is task-seconds
    tasks: float | None = field(default=None, metadata=OPTIONAL)
