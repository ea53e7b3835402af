"""Python's cyclic garbage collector, paused while a profile is analysed.

Reading a recording of hundreds of thousands of distinct stacks makes millions of small,
long-lived objects (frame tuples, per-stack results) that hold no reference cycles; every few
thousand allocations the collector walks them again, which cost a fifth of the analysis of a
300,000-stack file. Reference counting still frees everything that is not in a cycle, and
the collector runs again when the analysis is over (peak memory measured unchanged on the
benchmark's profiles: benchmarks/README.md)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pauses the collector for the block; leaves it as it was found (a nested pause, or a
    caller that disabled it, stays paused)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
