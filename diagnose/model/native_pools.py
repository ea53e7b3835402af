"""Inside native compute libraries: kernels versus thread-pool synchronisation.

A busy core is not always compute. A BLAS / OpenMP / ONNX Runtime / torch pool that is too big
for the work (small matrices, several callers, a lock in front) spends its time handing work to
its threads and waiting for them: OpenBLAS's `inner_thread` / `exec_blas` spinning for its pool,
`sched_yield` and futex waits under them, libgomp / libiomp barriers. Only native samples show
it: the leaf of each sample that passes through such a library is either a compute kernel
(`sgemm_kernel_*`, `*_copy`, dnnl jit code, ...) or the pool's synchronisation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from diagnose.model.confidence import wilson
from diagnose.samples.native_libraries import LIBRARIES
from diagnose.samples.profile import Profile

_SYNC_FUNCTIONS = re.compile(
    r"^(inner_thread|exec_blas(_async(_wait)?)?|blas_thread_server|blas_thread_init|"
    r"gomp_(barrier|team|thread|sem|mutex|ptrlock)\w*|GOMP_(barrier|parallel_end)\w*|"
    r"__kmp_(wait|yield|suspend|barrier|fork_barrier|join_barrier|hyper_barrier)\w*|"
    r".*ThreadPool.*(Wait|Spin|Block|Schedule|RunInParallel).*|"
    r"(__)?sched_yield|.*futex.*|(__)?pthread_(cond|mutex|spin|barrier)\w*|__lll_lock_wait\w*|"
    r"do_futex_wait\w*|(__)?nanosleep|sem_(timed)?wait\w*)$")
_RUNTIME_LIBRARY = re.compile(r"libgomp|libiomp|libomp\.", re.I)  # its own leaves are waits
MIN_SAMPLES = 10  # native samples in pool libraries needed before the split is considered
CONFIDENCE_Z = 1.96  # the split is judged by its 95% Wilson interval, not by its point value
# Threaded OpenBLAS admits one caller into its pool at a time: concurrent callers queue inside it.
SERIALIZES_CALLERS = ("OpenBLAS",)


@dataclass(frozen=True)
class PoolSplit:
    library: str
    knob: str
    kernel_samples: int
    sync_samples: int
    sync_functions: dict[str, int] = field(default_factory=dict)  # leaf function -> samples
    kernel_functions: dict[str, int] = field(default_factory=dict)

    @property
    def samples(self) -> int:
        return self.kernel_samples + self.sync_samples

    @property
    def sync_share(self) -> float:
        return self.sync_samples / self.samples if self.samples else 0.0

    @property
    def enough(self) -> bool:
        return self.samples >= MIN_SAMPLES

    @property
    def sync_share_low(self) -> float:
        """Lower end of the 95% Wilson interval of the sync share: what the samples make sure of."""
        if not self.samples:
            return 0.0
        return wilson(self.sync_share, self.samples, CONFIDENCE_Z)[0]


def _library(path: str) -> tuple[str, str] | None:
    """(library, knob) of the pool library `path` belongs to, or None."""
    return next(((name, knob) for name, pattern, knob in LIBRARIES if pattern.search(path)), None)


@dataclass
class _Tally:
    """One library's native samples, counted as the stacks are read."""

    kernel: int = 0
    sync: int = 0
    kernel_functions: dict[str, int] = field(default_factory=dict)  # leaf function -> samples
    sync_functions: dict[str, int] = field(default_factory=dict)


# (library, knob, "sync" or "kernel", leaf name) of a stack through a pool library
_Verdict = tuple[str, str, str, str]


def pool_split(native: Profile | None, tids: set[int] | None = None) -> list[PoolSplit]:
    """Per library, the native samples (of threads `tids`, or all) whose stacks pass through it,
    split by their leaf into kernels and synchronisation; largest first."""
    if native is None or not native.threads:
        return []
    verdicts: dict[np.integer, _Verdict | None] = {}  # by the stack id np.flatnonzero gives
    tallies: dict[tuple[str, str], _Tally] = {}
    for track in native.threads:
        if tids is not None and track.tid not in tids:
            continue
        counts: np.ndarray | list[int] = (np.bincount(track.stack_ids, minlength=len(native.stacks))
                                          if len(track.stack_ids) else [])
        for sid in np.flatnonzero(counts):
            if sid not in verdicts:
                verdicts[sid] = _classify(native, int(sid))
            verdict = verdicts[sid]
            if verdict is None:
                continue
            library, knob, kind, leaf = verdict
            entry = tallies.setdefault((library, knob), _Tally())
            if kind == "sync":
                entry.sync += int(counts[sid])
            else:
                entry.kernel += int(counts[sid])
            functions = entry.sync_functions if kind == "sync" else entry.kernel_functions
            functions[leaf] = functions.get(leaf, 0) + int(counts[sid])
    splits = [PoolSplit(lib, knob, e.kernel, e.sync, _top(e.sync_functions), _top(e.kernel_functions))
              for (lib, knob), e in tallies.items()]
    return sorted(splits, key=lambda s: -s.samples)


def _top(functions: dict[str, int], limit: int = 5) -> dict[str, int]:
    return dict(sorted(functions.items(), key=lambda kv: -kv[1])[:limit])


def _classify(native: Profile, sid: int) -> _Verdict | None:
    frames = [native.frames[i] for i in native.stacks[sid]]
    tail_start = max((i for i, f in enumerate(frames) if not f.native), default=-1) + 1
    tail = frames[tail_start:]
    inside = [found for found in map(_library, (f.file for f in tail)) if found]
    if not inside:
        return None
    library, knob = inside[0]
    leaf = tail[-1]
    # The leaf is a pool function or a wait primitive (sched_yield, futex under inner_thread),
    # or lies in the OpenMP runtime itself (stripped libgomp shows bare addresses).
    sync = (_SYNC_FUNCTIONS.match(leaf.function) is not None
            or _RUNTIME_LIBRARY.search(leaf.file) is not None)
    name = leaf.function if not leaf.function.startswith("0x") else f"{leaf.file.rsplit('/', 1)[-1]}"
    return library, knob, "sync" if sync else "kernel", name
