"""How the C heap and numpy get memory during an analysis (Linux; a no-op elsewhere).

An analysis of millions of samples makes and drops arrays of one to tens of MB by the
thousand. Two defaults made the kernel's work (system time) as large as a third of the 10M
recording's CPU:

- glibc serves each array above its mmap threshold with a fresh mapping, and gives the top of
  the heap back once a free leaves 128 KiB there: the next array of that size faults its pages
  in again. Kept for reuse, most of those faults go (235k to 138k on the 10M file).
- numpy asks for transparent huge pages on every array of 4 MiB or more: each short-lived
  array then has its 2 MiB pages zeroed whole (about 0.7 s of system time in the wait-site
  search at 10M). Ordinary pages cost less for arrays that live for one pass.

The peak is the same: no array is held longer, only freed pages are kept for the next one.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's upper bound on 64-bit: larger arrays stay mappings
TRIM_THRESHOLD = 1 << 30  # the heap's top is given back only when this much is free there
TOP_PAD = 64 << 20  # the heap grows by this much more at a time: fewer brk calls
_MALLOC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
_HUGEPAGE_ENV = "NUMPY_MADVISE_HUGEPAGE"


def tune_for_analysis() -> tuple[bool, bool]:
    """Both tunings below; (heap tuned, huge pages off)."""
    return keep_freed_memory(), no_huge_pages_for_arrays()


def keep_freed_memory() -> bool:
    """Tunes glibc's heap for the analysis; True when it did. Not on another C library, and
    not when the user tunes it already (any of glibc's MALLOC_* variables set)."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):  # set by glibc alone
            return False
    except (ValueError, OSError, AttributeError):
        return False
    if any(name in os.environ for name in _MALLOC_ENV):
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


def no_huge_pages_for_arrays() -> bool:
    """numpy's arrays on ordinary pages; True when set here. Left alone when the user chose
    (NUMPY_MADVISE_HUGEPAGE set) or numpy has no such switch."""
    if _HUGEPAGE_ENV in os.environ:
        return False
    core = getattr(np, "_core", None) or getattr(np, "core", None)
    switch = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if switch is None:
        return False
    switch(False)
    return True
