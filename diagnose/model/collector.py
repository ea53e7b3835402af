"""The cyclic garbage collector, measured from outside: its share of the CPU from native frames.

CPython's collector runs inside whichever thread allocated the container that tipped the young
generation's count over its threshold (3.11: in the allocation itself; 3.12+: at the next eval
breaker), holding the GIL. In a Python-only profile its time lands on that thread's Python line:
smeared over the flame graph as "running Python", and the other threads' waits for the GIL
behind it look like contention. Native frames name it: a sample whose stack passes through one
of the collector's functions in the interpreter (libpython, or the python executable of a static
build) is the collector's, whatever Python line is above it.

The functions, by CPython version (checked with `nm` on the builds under ~/.pyenv/versions/):
3.11 and 3.12 name `gc_collect_main` (Modules/gcmodule.c; `collect`, `collect_with_callback` and
`collect_generations` before 3.11), `invoke_gc_callback`, `visit_decref`, `visit_reachable`,
`visit_move`; 3.12 adds `_Py_RunGC` (the eval breaker's entry); 3.13 (Python/gc.c) `_PyGC_Collect`,
`gc_collect_main`, `remove_unreachable`; 3.14's incremental collector `gc_collect_young`,
`gc_collect_increment`, `gc_collect_full`, `gc_collect_region`. `deduce_unreachable`,
`subtract_refs`, `move_unreachable`, `update_refs`, `delete_garbage`, `finalize_garbage`,
`handle_weakrefs` are inlined in these builds but named in others. The module's `gc.collect()`
(`gc_collect`, `gc_collect_impl`) is the collector called by code: counted, and told apart.

A build stripped of its static symbols (Debian's /usr/bin/python3.11) names none of them: the
collector is then not readable (`CollectorShare.readable`), never "0%".

Which generation a collection collected is an argument of `gc_collect_main`: native frames do not
carry it, so the share per generation is not readable from outside (`gc.callbacks` inside the
process gives it: fixtures/workloads/gc_heavy.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
import numpy as np

from diagnose.classify.state import FULL_SYMBOL_MARKERS, every_stack_state
from diagnose.model.confidence import wilson
from diagnose.model.os_summary import CollectorState, ProcessOS
from diagnose.samples.profile import Frame, Profile
from diagnose.vocab import RUNNING, ThreadState
from diagnose.model.line_samples import LineSamples

# The collector's own functions (any CPython from 3.8 to 3.14, default and free-threaded builds).
COLLECTOR_FUNCTIONS = frozenset({
    # the collection itself
    "gc_collect_main", "collect", "collect_with_callback", "gc_collect_with_callback",
    "collect_generations", "gc_collect_generations", "gc_collect_region", "gc_collect_young",
    "gc_collect_increment", "gc_collect_full", "gc_collect_internal", "_PyGC_Collect",
    "PyGC_Collect", "_PyGC_CollectNoFail", "_PyGC_CollectIfEnabled", "_Py_RunGC",
    # its phases, where a build keeps them out of line
    "deduce_unreachable", "deduce_unreachable_heap", "update_refs", "subtract_refs",
    "move_unreachable", "visit_decref", "visit_reachable", "visit_move", "remove_unreachable",
    "move_legacy_finalizers", "move_legacy_finalizer_reachable", "handle_legacy_finalizers",
    "finalize_garbage", "delete_garbage", "handle_weakrefs", "check_garbage", "clear_freelists",
    "_PyGC_ClearAllFreeLists", "untrack_dicts", "untrack_tuples", "invoke_gc_callback",
    "gc_visit_heaps", "mark_stacks", "mark_global_roots", "mark_at_start",
    # gc.collect() called by code
    "gc_collect", "gc_collect_impl",
})
EXPLICIT_FUNCTIONS = frozenset({"gc_collect", "gc_collect_impl"})
# Where the collector lives: libpython, the python executable (a static build), or its C source
# (a build with debug information names the file).
_INTERPRETER = re.compile(r"(libpython|(^|/)python\d*(\.\d+)?[dmt]?$|gcmodule\.c$|Python/gc(_free_threading)?\.c$)")
# Compiler clones keep the function's name before the suffix (invoke_gc_callback.isra.0).
_CLONE = re.compile(r"\.(isra|constprop|part|cold|lto_priv)(\.\d+)*.*$")


def collector_function(frame: Frame) -> str | None:
    """The collector function `frame` runs, or None."""
    if not frame.native or not _INTERPRETER.search(frame.file or ""):
        return None
    name = _CLONE.sub("", frame.function)
    return name if name in COLLECTOR_FUNCTIONS else None


@dataclass(frozen=True)
class CollectorStacks:
    """Per stack of a native profile: it passes through the collector; through gc.collect()
    called by code; and the index (in the stack) of the innermost Python frame over the
    collector's first frame, -1 for none."""

    collecting: np.ndarray  # bool
    explicit: np.ndarray  # bool
    site: np.ndarray  # int64


def collector_stacks(profile: Profile) -> CollectorStacks:
    """Which stacks of `profile` are the collector's, computed once per profile."""
    kept = profile.memo("collector stacks")
    known: CollectorStacks | None = kept.get(len(profile.stacks))
    if known is not None:
        return known
    names = [collector_function(f) for f in profile.frames]
    in_collector = np.array([n is not None for n in names], dtype=bool)
    explicit_frame = np.array([n in EXPLICIT_FUNCTIONS for n in names], dtype=bool)
    collecting = (profile.stacks_with_any(in_collector) if in_collector.any()
                  else np.zeros(len(profile.stacks), dtype=bool))
    explicit = (profile.stacks_with_any(explicit_frame) if explicit_frame.any()
                else np.zeros(len(profile.stacks), dtype=bool))
    site = np.full(len(profile.stacks), -1, dtype=np.int64)
    for sid in np.flatnonzero(collecting):
        stack = profile.stacks[int(sid)]
        first = next(i for i, fid in enumerate(stack) if in_collector[fid])
        site[sid] = next((i for i in range(first - 1, -1, -1) if not profile.frames[stack[i]].native), -1)
    known = kept[len(profile.stacks)] = CollectorStacks(collecting, explicit, site)
    return known


@dataclass(frozen=True)
class CollectorShare:
    """The collector's share of a process's running samples (native frames), and what that is in
    CPU by the process's counters.

    `share` is of the samples in which a Python thread of the process ran (Python or native
    code: on a core, or runnable and holding the GIL): the collector's share of the CPU those
    threads were given, measured by native samples; `interval` its 95% Wilson interval. `cpu_s`
    applies it to those threads' CPU by /proc (user time where the recording has it): an
    estimate; `share_of_cpu` is that over the process's whole CPU.

    `held` is what the process's memory said over the window (collect/gc_state.py): the share of
    the window a collection was in progress (holding the GIL), over many more polls than there
    are native samples, and the collections of each generation; None where it was not read.
    Without native samples (`samples` 0) only `held` is known."""

    readable: bool  # the interpreter names the collector's functions (its symbols are kept)
    samples: int  # native thread-samples of the process's Python threads
    running_samples: int  # of which running
    collector_samples: int  # of which in the collector
    native_samples: int  # of which running native code outside the collector
    explicit_samples: int  # of those, in gc.collect() called by code
    share: float  # collector_samples / running_samples
    interval: tuple[float, float]
    sites: tuple[LineSamples, ...]  # where it ran, most samples first
    functions: tuple[tuple[str, int], ...]  # the collector's innermost function per sample
    python_threads_cpu_s: float | None = None  # the CPU `share` is applied to (counters)
    process_cpu_s: float | None = None
    cpu_s: float | None = None  # the collector's CPU: an estimate
    share_of_cpu: float | None = None  # of the process's CPU: an estimate
    held: CollectorState | None = None
    # the lines calling gc.collect() (the explicit samples' sites), most samples first
    explicit_sites: tuple[LineSamples, ...] = ()

    @property
    def held_share(self) -> float | None:
        """The share of the window a collection was in progress, read from memory (None: not
        read)."""
        return self.held.collecting_share if self.held is not None and self.held.polls else None

    @property
    def explicit_share(self) -> float:
        """Of the collector's samples, those in gc.collect() called by code."""
        return self.explicit_samples / self.collector_samples if self.collector_samples else 0.0


def _weights(native: Profile, tids: set[int], pid: int | None) -> np.ndarray:
    """Samples per stack of the threads `tids` (of process `pid`, when the profile tags them)."""
    counts = np.zeros(len(native.stacks), dtype=np.float64)
    for track in native.threads:
        if track.tid not in tids or (pid is not None and track.pid is not None and track.pid != pid):
            continue
        if not len(track.stack_ids):
            continue
        weights = track.counts if track.counts is not None else None
        counts += np.bincount(track.stack_ids, weights=weights, minlength=len(native.stacks))
    return counts


def collector_share(native: Profile | None, tids: set[int], pid: int | None,
                    os_: ProcessOS | None) -> CollectorShare | None:
    """The collector's share of the running samples of a process's Python threads `tids` (of
    process `pid`, where the profile tags its threads), in `native`, a profile with native
    frames of the window; `os_`, the process's /proc counters (with what its memory said of the
    collector, when read). None with neither native samples of those threads nor the collector's
    state."""
    held = os_.collector if os_ is not None and os_.collector is not None and os_.collector.polls else None
    counts = (_weights(native, tids, pid) if native is not None and native.native
              else np.zeros(0, dtype=np.float64))
    total = int(round(counts.sum()))
    if not total:
        if held is None:
            return None
        return CollectorShare(readable=False, samples=0, running_samples=0, collector_samples=0,
                              native_samples=0, explicit_samples=0, share=0.0, interval=(0.0, 1.0),
                              sites=(), functions=(), held=held)
    assert native is not None
    stacks = collector_stacks(native)
    readable = bool(stacks.collecting.any()) or any(f.function in FULL_SYMBOL_MARKERS
                                                    for f in native.frames)
    states = every_stack_state(native, any(f.function in FULL_SYMBOL_MARKERS for f in native.frames))
    running = np.isin(states.state, list(RUNNING))
    running_samples = int(round(counts[running].sum()))
    collecting = running & stacks.collecting
    collector_samples = int(round(counts[collecting].sum()))
    explicit_samples = int(round(counts[collecting & stacks.explicit].sum()))
    native_running = running & ~stacks.collecting & (states.state == ThreadState.NATIVE)
    native_samples = int(round(counts[native_running].sum()))
    share = collector_samples / running_samples if running_samples else 0.0
    cpu = _python_threads_cpu(os_, tids)
    process_cpu = os_.cpu_s if os_ is not None else None
    cpu_s = share * cpu if cpu is not None else None
    return CollectorShare(
        readable=readable, samples=total, running_samples=running_samples,
        collector_samples=collector_samples, native_samples=native_samples,
        explicit_samples=explicit_samples, share=share,
        interval=wilson(share, running_samples) if running_samples else (0.0, 1.0),
        sites=_sites(native, stacks, counts, collecting), functions=_functions(native, counts, collecting),
        python_threads_cpu_s=cpu, process_cpu_s=process_cpu, cpu_s=cpu_s,
        share_of_cpu=(cpu_s / process_cpu) if cpu_s is not None and process_cpu else None, held=held,
        explicit_sites=_sites(native, stacks, counts, collecting & stacks.explicit) if explicit_samples else ())


def _python_threads_cpu(os_: ProcessOS | None, tids: set[int]) -> float | None:
    """The CPU the process's Python threads ran over the window, by /proc: user time where the
    recording has it (the collector runs in user mode), else user and kernel time together."""
    if os_ is None:
        return None
    threads = [t for tid, t in os_.threads.items() if tid in tids]
    if not threads:
        return None
    if all(t.user_s is not None for t in threads):
        return float(sum(t.user_s or 0.0 for t in threads))
    return float(sum(t.cpu_s for t in threads))


def _sites(native: Profile, stacks: CollectorStacks, counts: np.ndarray, collecting: np.ndarray,
           limit: int = 5) -> tuple[LineSamples, ...]:
    tally: dict[tuple[str, str, int], float] = {}
    for sid in np.flatnonzero(collecting & (counts > 0)):
        at = int(stacks.site[sid])
        if at < 0:
            continue
        frame = native.frames[native.stacks[int(sid)][at]]
        key = (frame.function, frame.file, frame.line)
        tally[key] = tally.get(key, 0.0) + float(counts[sid])
    ranked = sorted(tally.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    return tuple(LineSamples(f, file, line, int(round(n))) for (f, file, line), n in ranked)


def _functions(native: Profile, counts: np.ndarray, collecting: np.ndarray,
               limit: int = 5) -> tuple[tuple[str, int], ...]:
    """The innermost collector function of each collector sample (or the leaf under it: a
    type's traverse function), counted."""
    tally: dict[str, float] = {}
    for sid in np.flatnonzero(collecting & (counts > 0)):
        leaf = native.frames[native.stacks[int(sid)][-1]]
        name = _CLONE.sub("", leaf.function)
        tally[name] = tally.get(name, 0.0) + float(counts[sid])
    ranked = sorted(tally.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    return tuple((name, int(round(n))) for name, n in ranked)
