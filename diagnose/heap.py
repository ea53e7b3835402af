"""The C heap's reuse of freed memory during an analysis (glibc only).

An analysis of millions of samples makes and drops arrays of one to tens of MB by the
thousand. glibc serves each one above its mmap threshold with a fresh mapping, and gives the
top of the heap back once a free leaves 128 KiB there: either way the next array of that size
faults its pages in again, which on a large recording cost as much system time as the whole
analysis' user time in some phases. Keeping freed memory for reuse removes most of it; the
peak is the same (the arrays are not held longer, only their pages).
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's upper bound on 64-bit: larger arrays stay mappings
TRIM_THRESHOLD = 1 << 30  # the heap's top is given back only when this much is free there
TOP_PAD = 64 << 20  # the heap grows by this much more at a time: fewer brk calls
_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def keep_freed_memory() -> bool:
    """Tunes glibc's heap for the analysis; True when it did. Not on another C library, and
    not when the user tunes it already (any of glibc's MALLOC_* variables set)."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):  # set by glibc alone
            return False
    except (ValueError, OSError, AttributeError):
        return False
    if any(name in os.environ for name in _ENV):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # the mmap threshold first: setting any parameter ends glibc's own adjustment of it
    return all(bool(mallopt(param, value)) for param, value in (
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD)))
