"""A thread's kernel id from the pthread id py-spy names it by.

py-spy names a thread by its kernel id where it can read it: in blocking mode (it asks
libunwind), or from CPython 3.11 on (the thread state keeps `native_thread_id`). With
--nonblocking on CPython 3.6-3.10 it names threads by their pthread id instead: the address of
glibc's `struct pthread` in the target. Then no sampled thread matches a /proc tid, and every
per-thread counter (CPU, run-queue wait, what the kernel says it waits on) is lost to the join.

glibc keeps the kernel's id in that struct (`tid`, at 0x2d0 on x86_64 since glibc 2.x), so one
read of the target's memory per thread names it (/proc/PID/mem; nothing in the target stops).
The offset is found, not assumed: it is the one at which the pthread ids hold the most distinct
thread ids of the process, and an id only counts where it is one of the process's own threads.
Forked workers share their threads' pthread ids (the same addresses in copies of one address
space), so the map is per process.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from pathlib import Path

from diagnose.collect.asyncio_tasks.remote import RemoteMemory, RemoteReadError
from diagnose.collect.procfs import TreeRecord

# The struct's first bytes read per thread: glibc's tid field lies at 0x2d0 on x86_64 (0xd0 on
# aarch64); sizeof(struct pthread) is 0x900 there, so this read stays inside the struct.
SCAN_BYTES = 0x400
GLIBC_X86_64_TID_OFFSET = 0x2D0
_TID = struct.Struct("<i")
# py-spy's --threads pseudo-frame with a pthread id: `thread (0x7FA4CB7FE6C0): request-7`
_PTHREAD_PSEUDO = re.compile(rb"thread \((0x[0-9A-Fa-f]+)\)")
_MARK = b"thread (0x"


def pthread_ids_in(paths: Iterable[Path]) -> set[int]:
    """The pthread ids py-spy's recordings name threads by; empty where they name kernel ids."""
    found: set[int] = set()
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if _MARK in data:  # a cheap test first: most recordings carry kernel ids
            found.update(int(m.group(1), 16) for m in _PTHREAD_PSEUDO.finditer(data))
    return found


def kernel_tids(pid: int, pthread_ids: Iterable[int], tids: set[int]) -> dict[int, int]:
    """pthread id -> kernel thread id (as the process itself numbers its threads: `tids`), for
    the ids that name one of `tids` in `pid`'s memory; empty where the memory is unreadable."""
    try:
        memory = RemoteMemory(pid)
    except RemoteReadError:
        return {}
    with memory:
        structs: dict[int, bytes] = {}
        for pthread_id in pthread_ids:
            try:
                structs[pthread_id] = memory.read(pthread_id, SCAN_BYTES)
            except RemoteReadError:
                continue  # not an address of this process (another worker's thread, or gone)
    return _best_offset_map(structs, tids)


def _best_offset_map(structs: dict[int, bytes], tids: set[int]) -> dict[int, int]:
    best: dict[int, int] = {}
    for offset in _offsets():
        found: dict[int, int] = {}
        for pthread_id, data in structs.items():
            value = _TID.unpack_from(data, offset)[0]
            if value in tids:
                found[pthread_id] = value
        if len(set(found.values())) < len(found):
            continue  # a field every thread shares (the process id), not each thread's own id
        if len(found) > len(best):
            best = found
    return best


def _offsets() -> Iterable[int]:
    """glibc's known offset first, so that it wins a tie."""
    yield GLIBC_X86_64_TID_OFFSET
    yield from (o for o in range(0, SCAN_BYTES - _TID.size + 1, _TID.size)
                if o != GLIBC_X86_64_TID_OFFSET)


def name_threads(tree: TreeRecord, recordings: Iterable[Path]) -> None:
    """Each sampled process's map from the recordings' pthread ids to its own threads' kernel
    ids (ProcRecord.pthread_tids), read while the processes still run; nothing where the
    recordings name kernel ids already."""
    pthread_ids = pthread_ids_in(recordings)
    if not pthread_ids:
        return
    for pid, record in tree.records.items():
        if record.target_exited:
            continue
        inner = record.ns_tids.get  # the struct holds the id inside the process's pid namespace
        tids = {inner(t, t) for t in (*record.thread_names, *record.first)}
        record.pthread_tids = kernel_tids(pid, pthread_ids, tids)
