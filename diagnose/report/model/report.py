"""The report: one frozen value from the checks to every output (docs/report-data.md).

`Report.to_json()` is the .json file and the page's data; `Report.from_json(data)` reads this
schema version and the previous one (reports already attached to tickets still diff and
export). Anything that is not a report is BadProfile (exit 6) naming what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from diagnose.report.model.codec import OPTIONAL, JsonValue, decode_document, encode
from diagnose.report.model.findings import Finding, Verdict
from diagnose.report.model.run import Load, Sampling, Target
from diagnose.report.model.sections import (EventLoop, NotApplicable, Process, ProcessTasks,
                                            Stacks, Structure, Thread, WaitSite)
from diagnose.report.model.wait_graph import WaitGraph

# 2: the schema is declared by this package (same keys as 1; see docs/report-data.md, "Schema
# versions"). 1: the dict built by render/json_report.py until then.
SCHEMA_VERSION = 2
READS = (1, 2)

# Without these a file is not a report: the comparison, the gate and the outputs read them.
REQUIRED = ("schema_version", "sampling", "verdict", "findings", "threads")


@dataclass(frozen=True, kw_only=True)
class Report:
    schema_version: int
    target: Target = Target()
    sampling: Sampling
    verdict: Verdict
    findings: tuple[Finding, ...]
    waits: tuple[WaitSite, ...] = ()  # request threads' wait sites, most waited first
    processes: tuple[Process, ...] = ()
    structure: tuple[Structure, ...] = ()  # one per process with stages
    event_loops: tuple[EventLoop, ...] = ()
    tasks: tuple[ProcessTasks, ...] = ()  # asyncio tasks by await site, per process read
    not_applicable: tuple[NotApplicable, ...] = ()
    threads: tuple[Thread, ...] = ()
    stacks: Stacks = Stacks()
    load: Load | None = field(default=None, metadata=OPTIONAL)
    # who waits for what across threads, tasks and processes, from the kernel (model/wait_graph.py)
    wait_graph: WaitGraph | None = field(default=None, metadata=OPTIONAL)

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = encode(self)
        return out

    @classmethod
    def from_json(cls, data: Any) -> Report:
        """The report in `data` (a parsed .json report, this version or the previous one).
        NotAReport (a BadProfile) names the first key missing or of the wrong shape."""
        report = decode_document(cls, data, REQUIRED)
        # Read from either version, the model is this one's.
        return replace(report, schema_version=SCHEMA_VERSION)

    def finding(self, finding_id: str) -> Finding | None:
        return next((f for f in self.findings if f.id == finding_id), None)
