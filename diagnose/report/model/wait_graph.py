"""The wait-for graph of a service (model/wait_graph.py builds it; the page draws it).

Nodes are groups of threads (threads of one process that spent the window the same way),
processes, and the resources they wait on: the GIL, a lock (a futex), a file lock, a pipe, a
socket, a child process, a timer, a capacity (asyncio tasks' semaphores and limiters).
Edges say who waits for what (`waits_for`, with the share of the waiters' window), and who holds
or serves a resource (`held_by`: a file lock's holder, a lock's holder thread; `served_by`: the
process at a pipe's other end, a child). A knot is a set of nodes that wait only on each other
while none of them runs: a hang.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from diagnose.vocab import GraphEdgeKind as EdgeKind
from diagnose.vocab import NodeKind, ResourceKind
from diagnose.report.model.codec import OPTIONAL

__all__ = ["EdgeKind", "NodeKind", "ResourceKind", "WaitEdge", "WaitGraph", "WaitNode"]


@dataclass(frozen=True)
class WaitNode:
    id: str
    kind: NodeKind
    label: str                       # what the page prints on the node
    pid: int | None = None
    threads: int = 0                 # threads (or tasks) the node stands for
    resource: ResourceKind | None = field(default=None, metadata=OPTIONAL)
    # the code where the node waits or holds (function file:line), from the stacks
    site: str = ""
    # of the node's thread time: on a CPU, by /proc (threads and processes only)
    running_share: float | None = field(default=None, metadata=OPTIONAL)
    detail: str = ""                 # the kernel's words: syscall, address, path, peer


@dataclass(frozen=True)
class WaitEdge:
    source: str
    target: str
    kind: EdgeKind
    # waits_for: the share of the source's thread time spent waiting on the target, and that
    # time in thread-seconds; held_by / served_by: the share of observations it held / served
    share: float = 0.0
    thread_seconds: float = 0.0


@dataclass(frozen=True)
class WaitGraph:
    nodes: tuple[WaitNode, ...] = ()
    edges: tuple[WaitEdge, ...] = ()
    # node ids of each knot: waiting only on each other, none running
    knots: tuple[tuple[str, ...], ...] = ()
    bottleneck: str | None = field(default=None, metadata=OPTIONAL)  # a resource node id
    # the bottleneck in words, with its holder chain ("3 workers wait for a file lock held by
    # worker 4711 in forward")
    summary: str = ""
    # kernel observations behind the graph (threads x ticks), and the machine's syscall table
    observations: int = 0
