"""lock_contention: request threads spend their time blocked acquiring a lock.

What it finds:
    The share of request threads' samples blocked acquiring a lock inside request handling
    (the lock-like waits of vocab.LOCK_KINDS), the site every request queues on and what its
    holder was doing. Pools (queue, semaphore) and logging handler locks have their own checks;
    a join is not a lock (its waiter waits for the thread that produces the result). When the
    lock holders run in a native library's thread pool that admits one caller at a time, it
    says so.

Why it matters:
    A serialized section caps the speed-up whatever the thread count (Amdahl: a 20% serialized
    section caps it at 5x), so adding threads only lengthens the queue on the lock.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum
from typing import TYPE_CHECKING

from diagnose.checks import backend_saturated
from diagnose.checks.calibration import fix_words
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.leads import Lead, choose, declared
from diagnose.checks.measurements import OMITTED, Measurements, Omitted
from diagnose.checks.spec import CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.base import Finding, Site, amdahl, pct, short_path
from diagnose.checks.wait_share import WaitShare, wait_finding, where
from diagnose.model.os_state import FILE_LOCK_CALL
from diagnose.samples import source
from diagnose.model.held_locks import Taken, acquired_at, held_at
from diagnose.model.native_pools import SERIALIZES_CALLERS
from diagnose.model.kernel_waits import ServingPeer, WaitObject, serving_peer
from diagnose.model.servers import ServerProcess
from diagnose.vocab import LOCK_KINDS, ResourceKind, ThreadState, WaitKind
from diagnose.samples.profile import Frame
from diagnose.model.waits import describe
from diagnose.report.model.findings import Fix
from diagnose.report.model.sections import WaitSite

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis
    from diagnose.model.native_pools import PoolSplit

ID = "lock_contention"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "Request threads queue on a lock"
    what: str = "Share of request threads' samples blocked acquiring a lock inside request handling."
    advice: tuple[str, ...] = (
        ("The top site is the lock every request queues on: shrink its critical section to the shared state alone, "
         "and never do IO or model compute while holding it."),
        ("If the lock protects a model instance, use a pool of instances (about half the physical cores, 2-4 "
         "intra-op threads each) or thread-local copies instead of one global lock."),
        ("For statistics or counters updated under the lock, keep per-thread counters and merge them periodically "
         "(thousands of acquisitions per second become a few)."),
        ("Amdahl: a 20% serialized section caps the speed-up at 5x whatever the thread count, so remove serial "
         "sections before adding threads."),
    )
    low: float = 0.05
    high: float = 0.4


@dataclass(frozen=True, kw_only=True)
class LockEvidence(Measurements):
    # with the kernel's file-lock waits the samples missed, where its share outranks theirs
    lock_wait_share: float = key("share of request-thread time waiting on locks", U.PERCENT, estimable=True)
    lock_wait_thread_seconds: float = key("time waiting on locks, summed over threads",
                                          U.SECONDS, estimable=True)
    request_threads: int = shared_key()
    threads_waiting: int = shared_key()
    estimated: bool = shared_key()
    kernel_file_lock_share: float | Omitted = key(
        "share of request-thread time asleep on a file lock (the kernel)", U.PERCENT, optional=True)
    top_site_max_concurrent_waiters: int | Omitted = key(
        "most threads waiting at once at the top lock", U.THREADS, optional=True)
    holder: str | Omitted = shared_key(optional=True)
    critical_section_library: str | Omitted = key("library the critical section runs in", U.TEXT,
                                                  optional=True)
    fix: Fix | Omitted = shared_key(optional=True)
    serving_process: str | Omitted = key("the process the lock's holder waits on (the kernel)", U.TEXT,
                                         optional=True)


EVIDENCE = declarations(LockEvidence)


SERIALIZING_MIN_SAMPLES = 3  # holders seen inside the library: enough to know where they are
# Of the caller's wait in a serializing pool, the share a one-thread pool sheds: the rest is the
# pool's threads computing part of the call (calibrated, benchmarks/README.md "Calibration").
SHED_OF_WAIT = 0.5
HELD_CALL_MIN_SHARE = 0.3  # of the waiting instants: the holder's call that the advice names
MAX_CALL_TEXT = 80  # a source line longer than this is named by its C call instead
_BLOCKED = (ThreadState.IO, ThreadState.IDLE, ThreadState.LOCK)


@dataclass(frozen=True)
class HeldCall:
    """The call a lock's holder made inside the lock's block while others waited."""

    call: str  # the function the critical section called ("fetch_features")
    blocked: bool  # the holder was blocked in it (IO, sleep, another wait), not computing
    advice: str


def held_call(site: WaitSite) -> HeldCall | None:
    """The call the lock's holder was in while others waited (model/waits.py's top holder, the
    frame its critical section called), when the source shows that call inside the `with` block
    of the waited lock; None when no holder path explains enough of the wait, or the source
    cannot confirm it."""
    holder = next((h for h in site.holders if h.share >= HELD_CALL_MIN_SHARE and len(h.stack) >= 2
                   and h.stack[0] == site.function and h.scope_line), None)
    lock = acquired_at(site.file, site.line) if holder is not None else None
    if holder is None or lock is None:
        return None
    if not any(s.identity == lock.identity for s in held_at(site.file, holder.scope_line)):
        return None  # the holder was in the function, but not inside this lock's block
    call = holder.stack[1]
    if holder.function == site.function and holder.file == site.file:
        # The critical section itself made the call (a C function: `time.sleep`, a socket
        # read): its source line names it better than the C symbol does.
        text = source.getline(site.file, holder.scope_line).split("#", 1)[0].strip()
        call = text if 0 < len(text) <= MAX_CALL_TEXT else call
    where = f"{short_path(site.file)}:{lock.line}"
    share = f"{100 * holder.share:.0f}% of the instants threads waited"
    blocked = holder.state in _BLOCKED
    if blocked:
        why = (f"the lock's holder was blocked in `{call}` (waiting, not computing) in {share}, so "
               f"every waiting request waits for that call too. Read what it needs under the "
               f"lock, release the lock, then make the call")
    else:
        why = (f"the lock's holder was in `{call}` in {share}. Do that work outside the lock (on a "
               f"copy of the shared state) and hold the lock only to read or publish the result")
    block = (f"the `with {lock.name}:` block" if lock.taken == Taken.WITH
             else f"the section between `{lock.name}.acquire()` and its release")
    return HeldCall(call, blocked, f"Move `{call}` out of {block} ({where}): {why}.")


def _frame_of(analysis: Analysis, site: WaitSite) -> int:
    """The frame id of the site's acquiring Python frame (-1 when the profile has none)."""
    return analysis.profile.frame_id(Frame(site.function, site.file, site.line, False))


class Rank(IntEnum):
    """Where each lead ranks among the finding's advice (checks/leads.py), first to last: the
    further along the lock's chain a lever acts, the earlier it comes, since the nearer ones
    cannot help until it is pulled."""

    SERIALIZING_POOL = 0  # without the lock the callers would queue inside the library instead
    FILE_LOCK = 1  # the guard serialises whole processes: no thread-level change reaches past it
    SERVING_PROCESS = 2  # the section is a call to another process that serves one at a time
    BLOCKED_HOLDER = 3  # the holder sleeps in a call under the lock: moving the call is the fix
    SHRINK_SECTION = 4  # the declared first advice: shrink the critical section
    COMPUTING_HOLDER = 5  # the holder computes under the lock: the general advice leads
    DECLARED = 6  # the rest of the declared advice, in its order
    # Knobs without words of their own, read before the chain: any lever above that names a knob
    # is closer to the cause (a pool of model instances is the declared second advice).
    POOL_KNOB = 7


def run(analysis: Analysis, settings: Settings) -> Finding:
    """The lock's chain, read link by link, each adding to the summary, evidence and leads: the
    waits, a file lock the kernel saw, the library pool the holders run in, the call the holder
    made, and the process it waits on. The advice and its knob are chosen from the leads once."""
    req = analysis.request_samples()
    measured = _measured(analysis)
    waits = measured.waits
    files = _file_lock_waits(analysis, waits, measured.share)
    share, file_lock = files.share, files.lock
    head = _summary(waits, files)
    summary = head.text
    serializing = _serializing_pool(analysis)
    gain = _pool_gain(serializing) if serializing is not None else None  # None: the serial gain
    leads = [*declared(settings.advice[:1], Rank.SHRINK_SECTION, "the declared first advice"),
             *declared(settings.advice[1:], Rank.DECLARED, "the declared advice"),
             *_pool_knob(analysis, serializing, waits)]
    held = held_call(waits[0]) if waits else None
    if held is not None:
        # A lock held across a blocking call: moving the call out is the fix (and the knob, unless
        # a serializing pool's size is). Compute under the lock: the general advice leads.
        leads.append(Lead(Rank.BLOCKED_HOLDER, "the holder sleeps in the call", held.advice,
                          Fix("call_outside_lock", held.call) if serializing is None else None)
                     if held.blocked else
                     Lead(Rank.COMPUTING_HOLDER, "the holder computes in the call", held.advice))
    peer = (serving_peer(analysis.kernel, [int(t) for t in analysis.request_threads["tid"]])
            if waits and file_lock is None else None)
    backend = _saturated_backend(analysis, peer) if peer is not None else None
    serving: str | Omitted = OMITTED
    if peer is not None and backend is not None and peer.occupancy >= PEER_OCCUPANCY:
        # lock -> its holder -> a socket -> a backend at its capacity: the end of the chain
        idle = analysis.os.machine_idle_cores if analysis.os is not None else None
        chain = _behind_a_backend(peer, backend, share, idle)
        summary, gain = summary + chain.summary, chain.gain
        serving = chain.serving
        leads.append(chain.lead)
    elif (peer is not None and peer.occupancy >= PEER_OCCUPANCY
          and peer.resource.resource != ResourceKind.SOCKET):
        # a socket to a backend with room: the call out of the lock (held_call) is the lever
        chain = _one_at_a_time(analysis, peer)
        summary += chain.summary
        serving = chain.serving
        leads.append(chain.lead)
    leads += _leading(file_lock, serializing)
    chosen = choose(leads)
    evidence = LockEvidence(
        lock_wait_share=share,
        lock_wait_thread_seconds=measured.thread_seconds,
        request_threads=int(len(analysis.request_threads)),
        threads_waiting=max((w.threads for w in waits), default=0),
        estimated=bool(req[req["state"] == ThreadState.LOCK]["estimated"].any()),
        kernel_file_lock_share=files.kernel_share,
        top_site_max_concurrent_waiters=head.top_waiters,
        holder=head.holder,
        critical_section_library=serializing.library if serializing is not None else OMITTED,
        fix=chosen.fix if chosen.fix is not None else OMITTED,
        serving_process=serving)
    # The share with the kernel's file-lock waits the samples missed.
    return wait_finding(ID, settings, analysis, replace(measured, share=share), "lock_wait_share", summary, evidence,
                        "waiting on locks", gain=gain, advice=list(chosen.advice),
                        lead=[files.kernel_site] if files.kernel_site is not None else [])


def _measured(analysis: Analysis) -> WaitShare:
    """The request threads' lock waits, but for a deadlock's or a knot's: those threads and their
    victims wait forever, not in turn (the deadlock check's)."""
    hung = {t.site_frame for d in analysis.deadlocks for t in (*d.threads, *(v.thread for v in d.victims))}
    # So do a knot's (model/knots.py: a lock holder waiting for a future its job needs, ...).
    hung |= {h.wait.site_frame for k in analysis.knots if not k.only_locks for h in (*k.members, *k.victims)}
    return WaitShare.of(analysis, LOCK_KINDS, lambda w: _frame_of(analysis, w) not in hung)


@dataclass(frozen=True)
class _FileLockWaits:
    """The lock waits' share once the kernel's file-lock waits are counted, and the file lock."""

    share: float  # of request-thread time, the kernel's file-lock share where it outranks
    lock: WaitObject | None  # the file lock the threads waited for (the kernel)
    kernel: KernelFileLock | None  # the kernel's count of the request threads' file-lock waits
    kernel_site: Site | None  # where the kernel's share outranks: the line taking the lock
    kernel_share: float | Omitted = OMITTED  # the kernel's share, where it outranks the samples'


def _file_lock_waits(analysis: Analysis, waits: tuple[WaitSite, ...], share: float) -> _FileLockWaits:
    """The kernel counts a file lock's waits on every /proc tick; a sparse sample may have caught
    few of them at their line (settle_with_kernel could not tell where): the kernel's share
    outranks the samples', and the line is the one whose source takes the file lock."""
    file_lock = _file_lock(analysis) if waits and waits[0].kind == WaitKind.FILE_LOCK else None
    kernel_file = _kernel_file_lock(analysis)
    sampled_file = sum(w.share for w in waits if w.kind == WaitKind.FILE_LOCK)
    if kernel_file is not None and kernel_file.share > sampled_file + KERNEL_MARGIN:
        return _FileLockWaits(share + kernel_file.share - sampled_file, kernel_file.lock, kernel_file,
                              kernel_file.site, round(kernel_file.share, 4))
    return _FileLockWaits(share, file_lock, kernel_file, None)


@dataclass(frozen=True)
class _Head:
    """The finding's first sentence and what it says of the lock's holder (its evidence)."""

    text: str
    holder: str | Omitted = OMITTED
    top_waiters: int | Omitted = OMITTED  # the most threads waiting at once at the top site


def _summary(waits: tuple[WaitSite, ...], files: _FileLockWaits) -> _Head:
    """The finding's first sentence, and the evidence of the holder: the file lock the kernel
    saw where its share outranks the top site's, else the top site (a file lock by its name)."""
    share, file_lock, kernel_file, kernel_site = files.share, files.lock, files.kernel, files.kernel_site
    if kernel_site is not None and (not waits or kernel_file is not None and waits[0].share < kernel_file.share):
        held_by = (f", held by process {', '.join(map(str, file_lock.holders[:4]))}"
                   if file_lock is not None and file_lock.holders else "")
        assert file_lock is not None
        summary = (f"{pct(share)} of request-thread time waits for a {file_lock.label} at "
                   f"{short_path(kernel_site.file)}:{kernel_site.line} ({kernel_site.function}){held_by} "
                   f"(the kernel: {file_lock.syscall} on it in {pct(kernel_file.share if kernel_file else 0)} "
                   f"of the threads' /proc ticks)")
        return _Head(summary, holder=f"{file_lock.label}{held_by}")
    if not waits:
        return _Head(f"{pct(share)} of request-thread time waits on locks")
    top = waits[0]
    summary = f"{pct(share)} of request-thread time waits on the lock at {where(top)}"
    if file_lock is not None:
        # The kernel names the lock (a file) and who held it (/proc/locks): another process.
        held_by = (f", held by process {', '.join(map(str, file_lock.holders[:4]))}"
                   if file_lock.holders else "")
        summary = (f"{pct(share)} of request-thread time waits for a {file_lock.label} at "
                   f"{where(top)}{held_by} (the kernel: {file_lock.syscall} on it)")
        return _Head(summary, holder=f"{file_lock.label}{held_by}", top_waiters=top.max_concurrent)
    return _Head(summary, holder=describe(top), top_waiters=top.max_concurrent)


def _serializing_pool(analysis: Analysis) -> PoolSplit | None:
    """The library pool the lock's holders run in, where it admits one caller at a time. A
    threaded pool only: a library pinned to one thread (no pool threads) serializes nothing."""
    return next((sp for sp in analysis.pool_splits
                 if sp.samples >= SERIALIZING_MIN_SAMPLES and sp.library in SERIALIZES_CALLERS),
                None) if analysis.native_threads else None


def _pool_knob(analysis: Analysis, serializing: PoolSplit | None, waits: tuple[WaitSite, ...]) -> list[Lead]:
    """The knob before the holder's call is read: a one-thread pool for a serializing pool, else
    a pool of model instances (the declared second advice)."""
    if serializing is not None:
        return [Lead(Rank.POOL_KNOB, "the serializing pool's size", fix=Fix(serializing.knob, 1))]
    if waits:
        return [Lead(Rank.POOL_KNOB, "a pool of model instances (the declared advice)",
                     fix=Fix("model_instances", max(2, int(len(analysis.request_threads)) // 2)))]
    return []


def _pool_gain(serializing: PoolSplit) -> tuple[float, str]:
    """What a one-thread pool buys where the lock's holders run in a serializing pool."""
    # The next resource: the critical section runs in a library pool that admits one caller
    # at a time, so without the lock the callers queue inside the library instead.
    # What the first advice (a one-thread pool) buys: each call sheds the pool's
    # synchronisation, judged on the low end of its 95% interval. While the caller waits,
    # the pool's threads (no Python sample sees them) compute part of the call that one
    # thread must then do itself, so not all of the wait is shed: half of it is the
    # calibrated figure (SHED_OF_WAIT), all of it the upper bound.
    sure = serializing.sync_share_low
    pool_gain = amdahl(SHED_OF_WAIT * sure)
    return (pool_gain, f"calibrated: the lock holders run in {serializing.library}'s thread pool, "
                       f"which admits one caller at a time, so removing the lock alone buys "
                       f"nothing; {serializing.knob}=1 sheds the pool's synchronisation, "
                       f"{100 * serializing.sync_share:.0f}% of its {serializing.samples} native "
                       f"samples (at least {100 * sure:.0f}% at 95% confidence), but while the "
                       f"caller waits the pool's threads, which no sample sees, compute part of "
                       f"the call one thread must then do itself: half that wait shed buys "
                       f"about {pool_gain:.2f}x (calibrated: "
                       f"{fix_words(ID, f'{serializing.knob}=1') or 'none measured yet'}); "
                       f"all of it shed, at most {amdahl(sure):.2f}x (an upper bound)")


@dataclass(frozen=True)
class _Chain:
    """What the process at the far end of the lock's chain adds: to the summary, the evidence
    (`serving_process`) and the leads; and, for a backend, the gain."""

    summary: str
    serving: str
    lead: Lead
    gain: tuple[float, str] | None = None


def _one_at_a_time(analysis: Analysis, peer: ServingPeer) -> _Chain:
    """The kernel: while the others wait on the lock, one thread at a time waits on a pipe or a
    child another process serves: the lock admits one request at a time to it."""
    served = peer.resource.label
    advice = (f"The lock admits one request at a time to another process ({served}), "
              f"and that process is the bottleneck: it is busy "
              f"{pct(min(1.0, peer.occupancy))} of the window serving one request at a "
              f"time. Shrinking the critical section cannot help (the call to it is the "
              f"section): run several of them (a pool of processes, each with its own "
              f"pipe and lock), batch several requests per call, or make it faster.")
    return _Chain(f"; while one thread at a time waits on {served} ({pct(min(1.0, peer.occupancy))} "
                  f"of the window, the kernel): the process at its other end serves them one by one",
                  served,
                  Lead(Rank.SERVING_PROCESS, "the section is a call to a process serving one at a time",
                       advice, Fix("sidecars", max(2, int(len(analysis.request_threads)) // 2))))


def _leading(file_lock: WaitObject | None, serializing: PoolSplit | None) -> list[Lead]:
    """The leads that come before whatever else was found: a serializing pool's (words only: its
    knob is read before the chain), then a cross-process file lock's (and its knob)."""
    leads = []
    if file_lock is not None:
        leads.append(Lead(Rank.FILE_LOCK, "the file lock serialises whole processes",
                          f"The {file_lock.label} serialises every process that takes it: while one "
                          f"holds it the others sleep in the kernel, so the workers run its section "
                          f"one at a time whatever their number. Drop the cross-process guard where "
                          f"the work does not need it (a CPU model needs no 'one process on the "
                          f"device' lock), or hold it only around the shared resource itself.",
                          Fix("file_lock", file_lock.label)))
    if serializing is not None:
        leads.append(Lead(Rank.SERIALIZING_POOL, "without the lock the callers queue in the library",
                          f"The critical section runs in {serializing.library}'s thread pool, which "
                          f"admits one caller at a time: removing the lock alone will not help (the "
                          f"threads would queue inside {serializing.library}). First size the pool to "
                          f"the work: start the service with {serializing.knob}=1 and re-measure; then "
                          f"shrink the critical section or use a pool of model instances."))
    return leads


PEER_OCCUPANCY = 0.5  # threads on a serving process at once, on average: it serves them in turn
# A backend's load, of its capacity, at which it is the chain's end: where backend_saturated
# starts to score (its busiest thread running or runnable, on a machine whose cores are taken)
BACKEND_AT_CAPACITY = backend_saturated.Settings.saturation_low


def _saturated_backend(analysis: Analysis, peer: ServingPeer) -> ServerProcess | None:
    """The local server at the other end of the socket the lock's holder waits on, where it ran
    at its capacity (model/servers.py); None for a pipe, a child, or a backend with room."""
    if peer.resource.resource != ResourceKind.SOCKET:
        return None
    servers = [analysis.servers[p] for p in peer.resource.holders if p in analysis.servers]
    busiest = max(servers, key=lambda s: s.saturation, default=None)
    return busiest if busiest is not None and busiest.saturation >= BACKEND_AT_CAPACITY else None


def _behind_a_backend(peer: ServingPeer, backend: ServerProcess, share: float,
                      idle_cores: float | None) -> _Chain:
    """The lock's holder waits on a backend that already serves at its capacity: taking the call
    out of the lock would move the queue to the backend, not shorten it. The lever is the
    backend's capacity; the lock comes second."""
    where = peer.resource.label
    load = (f"its busiest thread ran {backend.busiest_thread_cores:.2f} cores, "
            f"{pct(backend.saturation)} of its capacity")
    summary = (f"; the lock's holder waits on {where} ({pct(min(1.0, peer.occupancy))} of the window, "
               f"the kernel), served by pid {backend.pid} `{backend.program}`, at its capacity: {load}")
    advice = (f"The lock's holder waits on the {where} (the backend, pid {backend.pid}), and the "
              f"backend is at its capacity ({load}): it serves the requests one after another "
              f"whether the lock lets one or all of them through. Run more of the backend "
              f"(processes sharing its port, or replicas) and then take the call out of the "
              f"lock (a client per thread) so the requests reach them side by side; taking "
              f"the call out of the lock alone buys only the backend's idle moments between "
              f"requests (its busiest thread ran {pct(min(1.0, backend.busiest_thread_cores))} "
              f"of the window), then the queue moves to the backend.")
    lead = Lead(Rank.SERVING_PROCESS, "the backend serves one at a time whatever the lock lets through",
                advice, Fix("backend_processes", 2))
    # The advice's two steps together: twice the backend's capacity, reached side by side; no
    # more than the waits allow (Amdahl) or the idle cores feed (a copy needs its own core).
    copies = 2
    bounds = [float(copies), amdahl(share)]
    words = (f"estimate: {copies} backend processes for 1, reached side by side once the call is out "
             f"of the lock: at most {copies}x; the threads wait {pct(share)} of the time (at most "
             f"{amdahl(share):.1f}x)")
    if idle_cores is not None and backend.cpu_cores > 0:
        bounds.append((backend.cpu_cores + idle_cores) / backend.cpu_cores)
        words += f", {idle_cores:.2f} idle cores for the copy beside its {backend.cpu_cores:.2f}"
    alone = 1.0 / max(min(1.0, backend.busiest_thread_cores), 1e-3)
    words += (f"; the call taken out of the lock alone: about {alone:.2f}x (the backend's busiest thread "
              f"ran {pct(min(1.0, backend.busiest_thread_cores))} of the window: its idle moments between "
              f"requests)")
    return _Chain(summary, f"{where}: pid {backend.pid} `{backend.program}` ({load})", lead,
                  (max(1.0, min(bounds)), words))


KERNEL_MARGIN = 0.02  # a kernel share this much above the samples' is what the samples missed


@dataclass(frozen=True)
class KernelFileLock:
    lock: WaitObject
    share: float  # of the request threads' /proc ticks, asleep waiting for it
    site: Site | None  # the line that takes it, read from the source of the threads' stacks


def _kernel_file_lock(analysis: Analysis) -> KernelFileLock | None:
    """The share of the request threads' /proc ticks the kernel saw asleep on file locks."""
    kernel = analysis.kernel
    lock = _file_lock(analysis)
    if kernel is None or lock is None:
        return None
    tids = [int(t) for t in analysis.request_threads["tid"]]
    if not tids:
        return None
    shares = []
    for tid in tids:
        waits = kernel.threads.get(tid)
        seen = kernel.ticks.get(tid, waits.observations if waits else 0)
        held = sum(n for o, n in waits.objects if o.resource == ResourceKind.FILE_LOCK) if waits else 0
        shares.append(held / seen if seen else 0.0)
    share = sum(shares) / len(shares)
    return KernelFileLock(lock, share, _file_lock_site(analysis, tids, share))


def _file_lock_site(analysis: Analysis, tids: list[int], share: float) -> Site | None:
    """The innermost Python line of these threads' samples whose source takes a file lock."""
    req = analysis.request_samples()
    rows = req[req["tid"].isin(tids) & (req["site"] >= 0)]
    if rows.empty:
        return None
    for frame_id, _ in rows.groupby("site")["count"].sum().sort_values(ascending=False).items():
        frame = analysis.frame(int(frame_id))
        if FILE_LOCK_CALL.search(source.getline(frame.file, frame.line)):
            return Site(frame.function, frame.file, frame.line, round(share, 4))
    return None


def _file_lock(analysis: Analysis) -> WaitObject | None:
    """The file lock the kernel saw this process's threads wait for most, with its holders."""
    kernel = analysis.kernel
    if kernel is None:
        return None
    counts: dict[WaitObject, int] = {}
    for waits in kernel.threads.values():
        for obj, n in waits.objects:
            if obj.resource == ResourceKind.FILE_LOCK:
                counts[obj] = counts.get(obj, 0) + n
    return max(counts, key=lambda o: counts[o]) if counts else None


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 needs=(Input.REQUEST_SAMPLES,), uses=(Input.NATIVE_FRAMES, Input.OS_COUNTERS),
                 floor_without=(Input.NATIVE_FRAMES, Input.OS_COUNTERS))
