"""cores_taken: other processes held the cores; the service's threads were runnable and got none.

What it finds:
    The service's threads waited long for a core per CPU-second they ran, a material share of
    its cores' time (schedstat's run-queue wait, the service's processes together), while the
    machine left (almost) no core idle (/proc/stat) and other processes held a large share of
    its cores: the machine's cores less its idle time, the service's CPU (its reaped children's too) and diagnose's own
    (itself and its recorders). The score is the weakest of these, and nothing when the
    service's own runnable threads outnumbered its usable cores: its wait is then its own
    threads' (scheduler_overhead). A recording made since the neighbour scan names the processes
    that used most CPU over the window, with their nice values; an older one says "other
    processes".

Why it matters:
    A runnable thread that gets no core runs no request: the service is as slow as the cores it
    is left, however healthy its code. Its samples do not show it (a thread waiting for a core
    shows the line it will run next), so every finding on its own threads reads as if nothing
    were wrong, and a native call looks busy.

What to do instead:
    The finding names the processes that held the cores and their priority, the cores the
    service wanted and got, and what giving it its cores would buy (an estimate).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from diagnose.checks.base import MAX_AMDAHL, Finding, Lever, LeverKind, NotApplicable, make_finding, ramp
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements
from diagnose.checks.spec import NOT_MEASURED, CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis
    from diagnose.model.cores_held import CoresHeld, Neighbour

ID = "cores_taken"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "Other processes held the cores"
    what: str = ("Run-queue wait per CPU-second of the service's threads, the share of the machine's cores other "
                 "processes held and the cores the machine left idle; the score is the weakest of the three, "
                 "nothing when the service's own runnable threads outnumber its cores.")
    advice: tuple[str, ...] = (
        ("Give the service its cores: separate cores for it and its neighbours (taskset -c, docker "
         "--cpuset-cpus), another node, or Kubernetes guaranteed QoS with the static CPU manager."),
        ("Lower the neighbours' priority where they are batch work: renice +19 -p PID, or run them under "
         "SCHED_IDLE (chrt --idle 0 CMD) or SCHED_BATCH, so that the service's threads run first (nice orders "
         "one cgroup's processes; across services or containers, CPUWeight= / cpu.weight does)."),
        ("Then re-measure: with its cores back the service's own findings (its locks, the GIL, its pools) read "
         "as they are, not through the wait for a core."),
    )
    # run-queue wait per CPU-second run (schedstat), all of the service's threads: a thread beside
    # one busy neighbour of its own nice per core waits about 1 s per second it runs, beside two 2 s;
    # at 5 it runs a sixth of the time it wants. A busy CI machine's ambient load reached 2.2
    # (compute_bound beside a declared busy loop): that is the weather, its own verdict stands.
    wait_low: float = 1.0
    wait_high: float = 5.0
    # ...and that wait in cores (its seconds over the window's) per usable core: a thread that
    # runs a few milliseconds between long sleeps can wait long per CPU-second and lose nothing
    # (a lock's holder waiting on a remote backend: 3.1 s per CPU-second, 0.05 of its cores)
    waiting_low: float = 0.1
    waiting_high: float = 0.4
    # share of the machine's cores the other processes held
    others_low: float = 0.25
    others_high: float = 0.6
    # cores the machine left idle: none of it at `idle_low`, the premise gone at `idle_high`
    idle_low: float = 0.1
    idle_high: float = 0.5
    # the service's own runnable threads per usable core: beyond `own_low` part of its wait is its
    # own threads' (scheduler_overhead), beyond `own_high` all of it
    own_low: float = 1.2
    own_high: float = 2.0


@dataclass(frozen=True, kw_only=True)
class CoresTakenEvidence(Measurements):
    # the first rows are the ones a short summary shows: what it got, what it waited, who held the rest
    runqueue_wait_per_cpu_second: float = key("time waiting for a core, per CPU-second run", U.SECONDS)
    cores_in_use: float = key("cores in use", U.CORES, none=NOT_MEASURED)
    # the machine's cores less its idle time, the service's and diagnose's own (CoresHeld.others_cores)
    other_processes_cores: float = key("cores other processes held", U.CORES)
    holders: dict[str, float] | None = key("processes that used most CPU (pid, nice, command)", U.CORES,
                                           none="not recorded")
    wanted_cores: float = key("cores its threads wanted (CPU + run-queue wait, at most the usable cores)",
                              U.CORES)
    runqueue_wait_s: float | None = key("time waiting for a core (run queue), summed over threads", U.SECONDS)
    waiting_cores: float = key("cores' worth of time waiting for a core (run-queue wait over the window)", U.CORES)
    cpu_s: float = key("CPU time used", U.SECONDS)
    mean_runnable_threads: float = key("runnable threads (mean)", U.THREADS)
    usable_cores: float = shared_key()
    runnable_per_core: float | None = shared_key()
    machine_cores: int = key("cores on the machine (online CPUs; an older recording: the affinity's count)",
                             U.CORES)
    machine_idle_cores: float | None = key("cores the machine left idle", U.CORES, none=NOT_MEASURED)
    observer_cores: float | None = key("cores diagnose and its recorders used", U.CORES, none=NOT_MEASURED)
    other_processes_share: float = key("share of the machine's cores other processes held", U.PERCENT,
                                       interval=False)
    neighbours_cores: float | None = key("cores the other processes alive over the window used, by their "
                                         "/proc/PID/stat", U.CORES, none="not recorded")

EVIDENCE = declarations(CoresTakenEvidence)


def _holder(n: Neighbour) -> str:
    return f"pid {n.pid} (nice {n.nice:+d}) {n.command}"


# A holder named in the summary used at least this many cores: the scan lists whoever ran at all.
NAMED_MIN_CORES = 0.05
SHORT_COMMAND = 60  # characters of a command line in the summary (the evidence has 200)


def _short(command: str) -> str:
    return command if len(command) <= SHORT_COMMAND else command[:SHORT_COMMAND - 1] + "\u2026"


def _named(held: CoresHeld, limit: int = 2) -> str:
    """The processes that held most, in words: measured where the recording named them."""
    top = held.neighbours.top if held.neighbours is not None else ()
    named = [n for n in top[:limit] if held.cores_of(n.cpu_s) >= NAMED_MIN_CORES]
    if not named:
        return (f"other processes held {held.others_cores:.2f} of the machine's {held.machine_cores} cores "
                + ("(none alone by the neighbour scan: the kernel's threads, short-lived processes or a "
                   "hypervisor's steal)" if held.neighbours is not None else "(not named: an older recording)"))
    return "; ".join(f"pid {n.pid} ({_short(n.command)}, nice {n.nice}) used {held.cores_of(n.cpu_s):.2f} cores"
                     for n in named)


def _score(wait: float, waiting: float, others_share: float, idle: float, own: float,
           settings: Settings) -> float:
    """The weakest of: the wait for a core (per CPU-second, and in cores), the others' share of
    the cores, the machine leaving no core idle, and the service's own threads not outnumbering
    its cores."""
    return min(ramp(wait, settings.wait_low, settings.wait_high),
               ramp(waiting, settings.waiting_low, settings.waiting_high),
               ramp(others_share, settings.others_low, settings.others_high),
               100.0 - ramp(idle, settings.idle_low, settings.idle_high),
               100.0 - ramp(own, settings.own_low, settings.own_high))


def run(analysis: Analysis, settings: Settings) -> Finding | NotApplicable:
    """How long the service's threads waited for a core the other processes held, and who held it."""
    held = analysis.cores_held
    if held is None:
        return NotApplicable(ID, "needs the machine's idle time beside the service's OS counters (`attach`)")
    os_ = held.service
    if os_.runqueue_wait_s is None:
        return NotApplicable(ID, "needs per-thread OS counters (schedstat), only taken by `attach`")
    window, usable, wait_s = max(os_.window_s, 1e-6), os_.usable_cores, os_.runqueue_wait_s
    ratio = os_.runqueue_ratio or 0.0
    used, waiting = held.service_cores, wait_s / window
    # The cores it wanted: what it ran plus what its threads waited for a core, over the window
    # (each second waited is a runnable thread's), at most its usable cores.
    wanted = max(used, min(usable, (os_.cpu_s + wait_s) / window))
    own = os_.mean_runnable / usable if usable else 0.0
    share = held.others_cores / held.machine_cores if held.machine_cores else 0.0
    score = _score(ratio, waiting / usable if usable else 0.0, share, held.idle_cores, own, settings)
    neighbours = held.neighbours
    evidence = CoresTakenEvidence(
        runqueue_wait_per_cpu_second=ratio, runqueue_wait_s=wait_s, waiting_cores=waiting, cpu_s=os_.cpu_s,
        cores_in_use=used, wanted_cores=wanted, mean_runnable_threads=os_.mean_runnable, usable_cores=usable,
        runnable_per_core=own, machine_cores=held.machine_cores, machine_idle_cores=held.idle_cores,
        observer_cores=held.observer_cores, other_processes_cores=held.others_cores, other_processes_share=share,
        neighbours_cores=held.cores_of(neighbours.cpu_s) if neighbours is not None else None,
        holders=({_holder(n): round(held.cores_of(n.cpu_s), 3) for n in neighbours.top}
                 if neighbours is not None else None))
    at_least = "at least " if os_.runqueue_ratio_floor else ""
    summary = (f"the service ran {used:.2f} cores while its threads waited {at_least}{ratio:.1f} s for a core per "
               f"CPU-second, {held.idle_cores:.2f} cores idle; {_named(held)}")
    gain = wanted / used if used > 0 else None
    observer = (f", diagnose's own {held.observer_cores:.2f}" if held.observer_cores is not None
                else "; diagnose's own not measured, counted as the others'")
    basis = (f"estimate: its threads ran {used:.2f} cores and waited for a core {waiting:.2f} cores' "
             f"worth (schedstat), so with its {usable:g} usable cores free they could have run "
             f"{wanted:.2f}" + (f": about {gain:.2f}x, if the work they wait to run is CPU work" if gain else "")
             + f"; other processes held {held.others_cores:.2f} of the machine's {held.machine_cores} cores "
             f"({held.idle_cores:.2f} idle{observer})")
    # A service that ran a twentieth of what it wanted says "large", not a figure (as Amdahl's cap)
    capped = min(MAX_AMDAHL, max(1.0, gain)) if gain is not None else None
    levers = [Lever(LeverKind.MORE_CORES, round(capped, 2), "with its cores back from the others",
                    basis)] if capped is not None else []
    finding = make_finding(ID, settings, score, summary, evidence, advice=_advice(held, settings),
                           gain=(capped, basis), levers=levers)
    if gain is not None and gain > MAX_AMDAHL:
        finding = replace(finding, gain_floor=(f"the figure is capped at {MAX_AMDAHL:g}x (the counters say "
                                               f"{gain:.1f}x): a service left this little of the CPU it "
                                               f"wanted is starved, by more than a figure can say"))
    return finding


def _advice(held: CoresHeld, settings: Settings) -> list[str]:
    """The settings' advice, its second naming the neighbours the summary names."""
    advice = list(settings.advice)
    top = held.neighbours.top if held.neighbours is not None else ()
    greedy = [n for n in top[:3] if held.cores_of(n.cpu_s) >= NAMED_MIN_CORES]
    if greedy:
        niced = ", ".join(f"pid {n.pid} at nice {n.nice}" for n in greedy)
        advice[1] = (f"Lower the neighbours' priority where they are batch work ({niced}; a lower nice runs "
                     f"first): renice +19 -p {greedy[0].pid}, or run them under SCHED_IDLE (chrt --idle 0 CMD) "
                     f"or SCHED_BATCH, so that the service's threads run first (nice orders one cgroup's "
                     f"processes; across services or containers, CPUWeight= / cpu.weight does).")
    return advice

SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 needs=(Input.SCHEDSTAT,), uses=(Input.OS_COUNTERS,), machine_wide=True)
