"""What a process pool's transfers cost, beside its tasks.

A `ProcessPoolExecutor`, a `multiprocessing.Pool` or a DataLoader moves every task and result
through the library's transport. In the parent a thread of the library's own (model/
library_threads.py: the queue feeder, the pool's task and result handlers, the executor's
manager) pickles each task's arguments and writes them into a pipe; a worker reads them under
the call queue's lock and unpickles them, runs the task, and sends the result back the same way.
None of that is the task, and the parent's feeder is one thread for the whole pool: an 8 MB
array per task made a pool of two serve 40 tasks a second for a task of microseconds, most of
it the kernel's time mapping and copying the pages (fixtures/servers/pool_transfer.py).

Measured, OS counters first:
- the parent's transport threads' CPU (/proc per-thread counters);
- the workers' CPU (/proc), split by their loop thread's busy samples: those whose innermost
  Python frame is the transport's (multiprocessing, concurrent.futures' process pool, pickle)
  with no frame of the task under the worker loop, against the rest (the task, and library work
  that is not transport, such as a DataLoader's collate); their own library threads (a worker's
  queue feeder) count as transport whole;
- the bytes the workers' read calls took in (/proc/PID/io rchar: the task pipe), and per call.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnose import vocab
from diagnose.model.analysis import Analysis
from diagnose.model.os_summary import ProcessOS, sum_known
from diagnose.model.process_pipeline import ProcessPipeline, is_library_frame, worker_loop
from diagnose.model.service import Service
from diagnose.samples.profile import Frame

# Files of the pool's transport: the pipes, queues and locks tasks travel through, and pickle.
TRANSPORT_FILES = ("multiprocessing/", "concurrent/futures/process.py", "/pickle.py", "/copyreg.py")


@dataclass(frozen=True)
class PoolTransfer:
    """A process pipeline's transport against its work, over the window."""

    pipeline: ProcessPipeline
    parent_transport_cpu_s: float  # the parent's library transport threads (/proc)
    worker_cpu_s: float  # the worker processes' CPU (/proc)
    worker_transport_cpu_s: float  # of it: their library threads', and their loop's transport share
    worker_busy_samples: int  # busy samples of the workers' loop threads
    worker_transport_samples: int  # of them: in the transport, no task frame under the loop
    worker_read_bytes: int | None  # the workers' read calls' bytes (/proc/PID/io rchar); None unknown
    worker_read_calls: int | None
    window_s: float

    @property
    def transport_cpu_s(self) -> float:
        return self.parent_transport_cpu_s + self.worker_transport_cpu_s

    @property
    def pool_cpu_s(self) -> float:
        """The pool's whole CPU: the parent's transport threads and the workers."""
        return self.parent_transport_cpu_s + self.worker_cpu_s

    @property
    def transport_share(self) -> float:
        """The transport's share of the pool's CPU."""
        return self.transport_cpu_s / self.pool_cpu_s if self.pool_cpu_s > 0 else 0.0

    @property
    def worker_transport_share(self) -> float | None:
        """The transport's share of the workers' busy samples; None without any."""
        return (self.worker_transport_samples / self.worker_busy_samples if self.worker_busy_samples
                else None)

    @property
    def read_bytes_per_s(self) -> float | None:
        return (self.worker_read_bytes / self.window_s if self.worker_read_bytes is not None and self.window_s
                else None)

    @property
    def bytes_per_read(self) -> float | None:
        return (self.worker_read_bytes / self.worker_read_calls
                if self.worker_read_bytes is not None and self.worker_read_calls else None)


def is_transport_file(path: str) -> bool:
    """A file of the pool's transport (TRANSPORT_FILES)."""
    return any(part in path for part in TRANSPORT_FILES)


def _transport_of(frames: list[Frame]) -> bool | None:
    """A stack inside a worker loop: True in the pool's transport, False running the task; None
    outside any worker loop."""
    found = worker_loop(frames)
    if found is None:
        return None
    index, _framework = found
    if any(not is_library_frame(f) for f in frames[index + 1:]):
        return False  # the task (or code it calls) runs
    leaf = next((f for f in reversed(frames) if not f.native), None)
    return leaf is not None and is_transport_file(leaf.file)


def in_transport(frames: list[Frame]) -> bool:
    """A worker's stack inside the pool's transport: its innermost Python frame is the
    transport's and no frame of the task runs under the worker loop."""
    return bool(_transport_of(frames))


def _library_threads_cpu(analysis: Analysis) -> float:
    """CPU of the process's library transport threads, by their /proc counters."""
    os_ = analysis.os
    if os_ is None or "role" not in analysis.threads:
        return 0.0
    library = analysis.threads[analysis.threads["role"] == vocab.ThreadRole.LIBRARY]
    return float(sum(os_.threads[int(tid)].cpu_s for tid in library["tid"] if os_.counted(int(tid))))


def _worker_samples(analysis: Analysis) -> tuple[int, int]:
    """(busy samples of threads in a worker loop, those in the transport)."""
    profile = analysis.profile
    samples = analysis.samples
    busy_rows = samples[samples["state"].isin(vocab.BUSY).to_numpy()]
    verdicts: dict[int, bool | None] = {}  # stack id -> in transport (None: not in a worker loop)
    busy, transport = 0, 0
    for sid, count in zip(busy_rows["stack"].to_numpy(), busy_rows["count"].to_numpy()):
        sid = int(sid)
        if sid not in verdicts:
            verdicts[sid] = _transport_of([profile.frames[i] for i in profile.stacks[sid]])
        verdict = verdicts[sid]
        if verdict is None:
            continue
        busy += int(count)
        transport += int(count) if verdict else 0
    return busy, transport


def _worker_transport_cpu(analysis: Analysis, os_: ProcessOS, busy: int, transport: int) -> float:
    """The transport's part of a worker's CPU: its library threads' whole, the rest by the loop
    thread's transport share."""
    library = _library_threads_cpu(analysis)
    rest = max(0.0, os_.cpu_s - library)
    return library + (rest * transport / busy if busy else 0.0)


def find_pool_transfer(pipeline: ProcessPipeline | None, service: Service) -> PoolTransfer | None:
    """The pool's transport against its work; None without a pool or the workers' counters."""
    if pipeline is None:
        return None
    by_pid = {v.pid: v for v in service.processes}
    parent = by_pid.get(pipeline.consumer_pid)
    workers = [by_pid[pid] for pid in pipeline.producer_pids if pid in by_pid]
    counters = [os_ for os_ in (w.analysis.os for w in workers) if os_ is not None]
    if parent is None or not workers or len(counters) < len(workers):
        return None
    busy = transport = 0
    worker_transport = 0.0
    for view, os_ in zip(workers, counters):
        own_busy, own_transport = _worker_samples(view.analysis)
        busy, transport = busy + own_busy, transport + own_transport
        worker_transport += _worker_transport_cpu(view.analysis, os_, own_busy, own_transport)
    return PoolTransfer(
        pipeline=pipeline, parent_transport_cpu_s=_library_threads_cpu(parent.analysis),
        worker_cpu_s=sum(os_.cpu_s for os_ in counters), worker_transport_cpu_s=worker_transport,
        worker_busy_samples=busy, worker_transport_samples=transport,
        worker_read_bytes=sum_known([os_.read_bytes for os_ in counters]),
        worker_read_calls=sum_known([os_.read_calls for os_ in counters]),
        window_s=max(os_.window_s for os_ in counters))
