"""What the views of one process's samples read from it: the Analysis (model/analysis.py), by
the names they use.

The Analysis computes its views (wait sites, structure, event loops, deadlocks) by importing
their modules; those modules name this protocol rather than the class, so the dependency runs
one way and they can be handed anything of this shape.
"""

from __future__ import annotations

from typing import Protocol

import pandas as pd

from diagnose.model.kernel_waits import KernelView
from diagnose.model.os_summary import ProcessOS
from diagnose.samples.profile import Frame, Profile
from diagnose.model.table import StackTable
from diagnose.vocab import ProcessRole


class SampledProcess(Protocol):
    profile: Profile
    stacks: StackTable  # per distinct stack: its classification
    samples: pd.DataFrame  # one row per sample: model/table.py's SAMPLE_COLUMNS
    threads: pd.DataFrame  # per thread: tid, pid, name, role, samples, one column per state
    os: ProcessOS | None  # /proc's numbers; None offline
    kernel: KernelView | None  # what the kernel saw each blocked thread wait on; None offline
    process_role: ProcessRole

    @property
    def gil_holding_stacks(self) -> frozenset[int]:
        """Stacks in C code the interpreter named the GIL's holder at (model/gil_holder.py)."""
        ...

    def request_samples(self) -> pd.DataFrame:
        """The request threads' rows of `samples`."""
        ...

    def frame(self, frame_id: int) -> Frame:
        ...
