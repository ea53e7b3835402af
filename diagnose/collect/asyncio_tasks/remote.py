"""Bounded reads of another process's memory through /proc/PID/mem (we are root; nothing in
the target runs or stops). Every failure - a freed page, a garbage pointer, the process gone -
is a RemoteReadError the walkers catch; nothing else escapes."""

from __future__ import annotations

import os
import struct

MAX_READ = 1 << 20  # one read never asks for more than this: a garbage length stays harmless
_PTR = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")


class RemoteReadError(Exception):
    """A read of the target's memory failed or returned less than asked (torn, gone, garbage)."""


class RemoteMemory:
    def __init__(self, pid: int):
        self.pid = pid
        self.reads = 0
        try:
            self._fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
        except OSError as exc:
            raise RemoteReadError(f"cannot open the memory of pid {pid}: {exc.strerror}") from exc

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> RemoteMemory:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def read(self, address: int, size: int) -> bytes:
        if size <= 0 or size > MAX_READ:
            raise RemoteReadError(f"refused read of {size} bytes")
        if address < 4096 or address + size > (1 << 47):  # null page, non-canonical user address
            raise RemoteReadError(f"bad address {address:#x}")
        self.reads += 1
        try:
            data = os.pread(self._fd, size, address)
        except (OSError, OverflowError, ValueError) as exc:
            raise RemoteReadError(f"read {address:#x}+{size}: {exc}") from exc
        if len(data) != size:
            raise RemoteReadError(f"short read at {address:#x}: {len(data)} of {size}")
        return data

    def ptr(self, address: int) -> int:
        return int(_PTR.unpack(self.read(address, 8))[0])

    def i64(self, address: int) -> int:
        return int(_I64.unpack(self.read(address, 8))[0])

    def i32(self, address: int) -> int:
        return int(_I32.unpack(self.read(address, 4))[0])


def ptr_at(data: bytes, offset: int) -> int:
    return int(_PTR.unpack_from(data, offset)[0])


def i64_at(data: bytes, offset: int) -> int:
    return int(_I64.unpack_from(data, offset)[0])


def i32_at(data: bytes, offset: int) -> int:
    return int(_I32.unpack_from(data, offset)[0])


def u32_at(data: bytes, offset: int) -> int:
    return int(_U32.unpack_from(data, offset)[0])
