"""The processes that serve the service's sockets, as /proc measured them beside it.

A request thread asleep in `recv()` waits for the process at the connection's other end. When
that process is on this host (collect/sockets.py finds the ones listening on the peer's
address), it was read like the service's own processes for the rest of the window, without its
stacks: its threads' CPU, and what each of its blocked threads waited on (the kernel's syscall
record, decoded as for the service). Here that becomes a `ServerProcess`: how busy it was, and
whether it was at its capacity — its busiest thread on a core the whole window (one serving
thread, an event loop), all its usable cores busy, or its Python threads queued on its GIL while
it ran a core's worth.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnose.collect.procfs import ProcRecord, TreeRecord
from diagnose.model.kernel_waits import Blocking, WaitObject, kernel_view
from diagnose.model.os_summary import summarize
from diagnose.vocab import ResourceKind
from diagnose.report.redact import redact_argv  # a pure function on strings: any layer may redact

GIL_BOUND_SHARE = 0.2  # its blocked-or-running threads waited this share on its GIL: Python-bound
BUSY_THREAD_CORES = 0.5  # a thread that ran half a core or more is one of its busy threads


@dataclass(frozen=True)
class ServerProcess:
    """One local process serving the service's connections, over the span it was read."""

    pid: int
    command: tuple[str, ...]
    addresses: tuple[str, ...]  # the peers it serves, as the sockets name them ("tcp 127.0.0.1:8000")
    window_s: float  # the span it was read, from when the service was first seen waiting on it
    cpu_cores: float  # its CPU over that span (/proc), in cores
    usable_cores: float
    threads: int
    busy_threads: int  # threads that ran BUSY_THREAD_CORES or more
    busiest_thread: str  # that thread's name (comm)
    busiest_thread_cores: float
    # that thread's share of the window running or runnable (CPU plus run-queue wait, schedstat):
    # on a machine whose cores are taken, a serving thread at capacity waits for a core too
    busiest_thread_busy: float
    gil_share: float  # of its threads' /proc ticks (idle ones aside), the share waiting on its GIL
    top_wait: str  # what its threads waited on most (the kernel's words), "" when nothing
    top_wait_share: float  # that wait's share of its threads' ticks
    followed: bool = False  # sampled as part of the service (attach --follow-peers): its stacks too
    # the wait `top_wait` names, as decoded, so a chain can follow it (model/chains.py)
    top_wait_object: WaitObject | None = None

    @property
    def saturation(self) -> float:
        """How close to its capacity it ran, 0-1: its busiest thread's share of the window running
        or runnable, its share
        of its usable cores, or, with its threads queued on its GIL, its cores over the one core
        the GIL lets Python run on; the largest of these."""
        gil_bound = self.cpu_cores if self.gil_share >= GIL_BOUND_SHARE else 0.0
        cores = self.cpu_cores / self.usable_cores if self.usable_cores else 0.0
        return min(1.0, max(self.busiest_thread_busy, cores, gil_bound))

    @property
    def program(self) -> str:
        """The command as a reader recognises it, secrets redacted: each path by its last part
        (`python feature_backend.py --port 8000`); `command` keeps it whole."""
        return " ".join(part.rsplit("/", 1)[-1] if part.startswith("/") else part
                        for part in redact_argv(list(self.command)))


def server_processes(tree: TreeRecord | None) -> dict[int, ServerProcess]:
    """Every server process the window read, by pid."""
    if tree is None:
        return {}
    out = {}
    # a followed peer was sampled as one of the service's own processes: its record is there
    serving = {p for pids in tree.servers.values() for p in pids}
    followed = {p: tree.records[p] for p in tree.followed if p in serving and p in tree.records}
    for pid, record in [*tree.server_records.items(), *followed.items()]:
        if not record.first:
            continue
        os_ = summarize(record)
        window = max(os_.window_s, 1e-6)
        per_thread = sorted(((t.cpu_s / window, t.comm, (t.cpu_s + (t.runqueue_wait_s or 0.0)) / window)
                             for t in os_.threads.values()), reverse=True)
        busiest_cores, busiest, busiest_busy = per_thread[0] if per_thread else (0.0, "", 0.0)
        gil_share, top, top_share, top_object = _own_waits(record, tree)
        out[pid] = ServerProcess(
            pid, tuple(tree.server_cmdlines.get(pid) or tree.cmdlines.get(pid) or ()),
            tuple(sorted(a for a, pids in tree.servers.items() if pid in pids)),
            round(window, 3), round(os_.cpu_s / window, 4), os_.usable_cores, len(os_.threads),
            sum(1 for cores, _, _ in per_thread if cores >= BUSY_THREAD_CORES), busiest,
            round(min(1.0, busiest_cores), 4), round(min(1.0, busiest_busy), 4), round(gil_share, 4), top,
            round(top_share, 4), followed=pid in followed, top_wait_object=top_object)
    return out


def _own_waits(record: ProcRecord, tree: TreeRecord) -> tuple[float, str, float, WaitObject | None]:
    """Of its threads' ticks (those idle for work aside): the share on its GIL, and its most
    observed wait (its label, share and the first object seen with that label)."""
    kernel = kernel_view(record, tree)
    if kernel is None:
        return 0.0, "", 0.0, None
    ticks = gil = 0
    waits: dict[str, int] = {}
    objects: dict[str, WaitObject] = {}
    for tid, thread in kernel.threads.items():
        if any(o.blocking == Blocking.IDLE for o, _ in thread.objects[:1]):
            continue  # a thread waiting for connections serves none
        ticks += max(kernel.ticks.get(tid, thread.observations), thread.observations)
        for obj, n in thread.objects:
            if obj.resource == ResourceKind.GIL:
                gil += n
            # a socket no local process serves is most often its own client's: waiting for work
            served = obj.resource != ResourceKind.SOCKET or obj.holders
            if obj.blocking not in (Blocking.RUNNING, Blocking.IDLE) and served:
                waits[obj.label] = waits.get(obj.label, 0) + n
                objects.setdefault(obj.label, obj)
    if not ticks:
        return 0.0, "", 0.0, None
    top = max(waits, key=lambda k: waits[k], default="")
    return gil / ticks, top, (waits[top] / ticks if top else 0.0), objects.get(top)

