"""Who held the machine's cores over the window: the service, diagnose itself, everything else.

The kernel counts the machine's idle time (/proc/stat, ProcRecord.machine_idle_s); the service's
CPU and run-queue wait are its threads' (schedstat); diagnose measures its own CPU and its
recorders' (collect/observer_cpu.py); what is left of the machine's cores other processes held.
A recording made since the neighbour scan (collect/neighbours.py) also names the processes that
used most of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnose.collect.neighbours import Neighbour, Neighbours
from diagnose.collect.procfs import TreeRecord
from diagnose.collect.run_context import LiveSampling, RunContext
from diagnose.model.os_summary import ProcessOS

__all__ = ["CoresHeld", "Neighbour", "Neighbours", "cores_held"]


@dataclass(frozen=True)
class CoresHeld:
    """The machine's cores over the window, by who held them."""

    service: ProcessOS  # every process of the service together (os_summary.combine)
    machine_cores: int
    machine_cores_measured: bool  # False: an older recording; the affinity's count stands in
    idle_cores: float  # the machine's idle + iowait time over the window
    observer_cores: float | None  # diagnose and its recorders; None: not measured (a file's replay)
    neighbours: Neighbours | None  # the other processes by name; None in older recordings

    @property
    def service_cores(self) -> float:
        return self.service.cpu_s / self.service.window_s if self.service.window_s > 0 else 0.0

    @property
    def children_cores(self) -> float:
        """The service's children it reaped in the window (a tool run per request): the
        service's own work, not another process's."""
        reaped = self.service.reaped_children_s or 0.0
        return reaped / self.service.window_s if self.service.window_s > 0 else 0.0

    @property
    def others_cores(self) -> float:
        """The machine's cores less its idle time, the service's (its reaped children's too) and
        diagnose's own: the other processes', short-lived ones, the kernel's own threads and a
        hypervisor's steal included."""
        return max(0.0, self.machine_cores - self.idle_cores - self.service_cores - self.children_cores
                   - (self.observer_cores or 0.0))

    def cores_of(self, cpu_s: float) -> float:
        """A neighbour's CPU seconds as cores over the scan's window."""
        window = self.neighbours.window_s if self.neighbours is not None else self.service.window_s
        return cpu_s / window if window > 0 else 0.0


def cores_held(tree: TreeRecord | None, service: ProcessOS | None, run: RunContext | None) -> CoresHeld | None:
    """The window's cores by holder; None without the machine's idle time (no /proc record, or
    one that did not read it)."""
    if service is None or service.machine_idle_cores is None:
        return None
    neighbours = tree.neighbours if tree is not None else None
    cpu = run.sampling.capture.cpu if run is not None and isinstance(run.sampling, LiveSampling) else None
    observer = cpu.cpu_s / cpu.window_s if cpu is not None and cpu.window_s > 0 else None
    return CoresHeld(service=service,
                     machine_cores=neighbours.machine_cores if neighbours is not None else service.cores,
                     machine_cores_measured=neighbours is not None,
                     idle_cores=service.machine_idle_cores, observer_cores=observer, neighbours=neighbours)
