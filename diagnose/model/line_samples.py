"""A Python line with the samples seen at it: where the collector struck, where threads entered
the kernel, where children were started (model/collector.py, syscall_sites.py, children.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LineSamples:
    """A Python line (its function, file and line) and the samples of the process's threads
    there that the view counted."""

    function: str
    file: str
    line: int
    samples: int
