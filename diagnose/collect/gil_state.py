"""Who holds the GIL, read from the interpreter's own state at a /proc tick.

CPython keeps the GIL in a small struct: `locked`, and `last_holder`, the thread state that took
it last (3.11: in `_PyRuntime.ceval.gil`; 3.12+: behind `interp->ceval.gil`). While `locked` is
set, `last_holder`'s `native_thread_id` is the holder's kernel thread id. Two reads of the
target's memory (/proc/PID/mem, nothing in the target stops), plus one per thread state not
seen before. The kernel can then say what that very thread does: on a CPU, or asleep on a
mutex, a socket, a timer, while the others sleep on the GIL.

The offsets come from CPython's headers (scripts/gen_cpython_offsets.py), for 3.11-3.13.
"""

from __future__ import annotations

import struct

from diagnose.collect.asyncio_tasks.layout import UnsupportedLayout, generated_layout, target_layout
from diagnose.collect.asyncio_tasks.remote import RemoteMemory, RemoteReadError

GIL_FREE = 0  # the GIL was not held at the read
UNKNOWN = -1  # not read, or the holder changed between the tick's two reads
_MAX_TSTATES = 4096  # thread states remembered (a thread pool that churns keeps few alive)


class GilStateReader:
    """Reads the GIL's holder of one process; `holder()` after a successful `open()`."""

    def __init__(self, pid: int, memory: RemoteMemory, gil_address: int, last_holder: int,
                 locked: int, native_thread_id: int):
        self.pid = pid
        self._mem = memory
        self._gil = gil_address
        self._holder_at = last_holder
        self._locked_at = locked
        self._span = max(last_holder + 8, locked + 4) - min(last_holder, locked)
        self._base = min(last_holder, locked)
        self._tid_at = native_thread_id
        self._tids: dict[int, int] = {}  # thread state address -> its kernel thread id

    @classmethod
    def open(cls, pid: int) -> GilStateReader | None:
        """None where the target is no CPython 3.11-3.13 this can read (no symbols, another
        version, a garbage pointer)."""
        try:
            from diagnose.collect.asyncio_tasks.binary import InterpreterNotFound, find_interpreter
        except ImportError:  # pyelftools missing
            return None
        try:
            interpreter = find_interpreter(pid)
            layout = generated_layout(interpreter.minor)
        except (InterpreterNotFound, UnsupportedLayout, OSError):
            return None
        try:
            memory = RemoteMemory(pid)
        except RemoteReadError:
            return None
        try:
            if interpreter.minor >= 13:  # the build's own offsets where it publishes them
                layout = target_layout(memory, interpreter.runtime_address, interpreter.minor)
            if layout.runtime_gil >= 0:
                gil = interpreter.runtime_address + layout.runtime_gil
            else:
                interp = memory.ptr(interpreter.runtime_address + layout.runtime_interpreters_head)
                gil = memory.ptr(interp + layout.interp_ceval_gil)
            reader = cls(pid, memory, gil, layout.gil_last_holder, layout.gil_locked,
                         layout.tstate_native_thread_id)
            reader.holder()  # readable now, or not at all
        except (RemoteReadError, UnsupportedLayout):
            memory.close()
            return None
        return reader

    def holder(self) -> int:
        """The holder's kernel thread id, GIL_FREE, or UNKNOWN (a read failed)."""
        try:
            data = self._mem.read(self._gil + self._base, self._span)
        except RemoteReadError:
            return UNKNOWN
        locked = struct.unpack_from("<i", data, self._locked_at - self._base)[0]
        if not locked:
            return GIL_FREE
        tstate = struct.unpack_from("<Q", data, self._holder_at - self._base)[0]
        tid = self._tids.get(tstate)
        if tid is None:
            try:
                tid = self._mem.ptr(tstate + self._tid_at)
            except RemoteReadError:
                return UNKNOWN
            if len(self._tids) >= _MAX_TSTATES:
                self._tids.clear()
            self._tids[tstate] = tid
        return tid if 0 < tid < 1 << 22 else UNKNOWN

    def close(self) -> None:
        self._mem.close()
