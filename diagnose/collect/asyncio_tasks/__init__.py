"""Asyncio tasks read from another process's memory (CPython 3.11-3.13), without running code
in it and without pausing it: the reader behind `collect/task_recording.py`.

remote.py reads bounded byte ranges; binary.py finds `_PyRuntime` and the version from the
binary's ELF symbols; layout.py holds the struct offsets (generated from CPython's headers, the
3.13 `_Py_DebugOffsets`, and layout_probe.py's run-time calibration of the C Task object);
objects.py reads Python objects (str, int, dict, set, attributes); linetable.py decodes the
3.11+ location table; walk.py turns the task set into TaskStates; awaited.py names what a task
waits on; sampler.py reads a pid a few times a second over the window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from diagnose.collect.asyncio_tasks.sampler import AsyncioTaskSampler, read_tasks_once

__all__ = ["AsyncioTaskSampler", "read_tasks_once"]


def __getattr__(name: str) -> object:
    """The sampler on first use (PEP 562): importing a submodule (layout, remote: what the GIL
    and collector readers use, and the analysis through the records) runs this package first,
    and the sampler's imports (the task walker, the ELF reader) are ~40 ms it does not need."""
    if name in __all__:
        from diagnose.collect.asyncio_tasks import sampler

        return getattr(sampler, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
