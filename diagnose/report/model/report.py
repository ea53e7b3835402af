"""The report: one frozen value from the checks to every output (docs/report-data.md).

`Report.to_json()` is the .json file and the page's data; `Report.from_json(data)` reads this
schema version and the previous one (reports already attached to tickets still diff and
export). Anything that is not a report is BadProfile (exit 6) naming what is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from diagnose.report.model.account import CpuAccount
from diagnose.report.model.wait_chains import WaitChain
from diagnose.report.model.codec import OPTIONAL, OPTIONAL_EMPTY, JsonValue, decode_document, encode
from diagnose.report.model.findings import Finding, NotApplicable, Verdict, labelled
from diagnose.report.model.labels import Evidence
from diagnose.report.model.page import Page
from diagnose.report.model.run import Load, Sampling, Target
from diagnose.report.model.sections import (EventLoop, Process, ProcessTasks,
                                            Stacks, Structure, Thread, WaitSite)
from diagnose.report.model.wait_graph import WaitGraph

# 2: the schema is declared by this package (same keys as 1; see docs/report-data.md, "Schema
# versions"). 1: the dict built by render/json_report.py until then.
SCHEMA_VERSION = 2
READS = (1, 2)

# Without these a file is not a report: the comparison, the gate and the outputs read them.
REQUIRED = ("schema_version", "sampling", "verdict", "findings", "threads")
LABELS_KEY = "evidence_labels"


@dataclass(frozen=True, kw_only=True)
class Report:
    schema_version: int
    target: Target = Target()
    sampling: Sampling
    verdict: Verdict
    findings: tuple[Finding, ...]
    # where every core-second the kernel counted went (model/cpu_account.py); absent where the
    # recording lacks the process-level counters (older recordings, no /proc record)
    cpu_account: CpuAccount | None = field(default=None, metadata=OPTIONAL)
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
    # where the waits end: the chains of waits that matter, every process's, most thread-time
    # first (model/reported_chains.py); absent where none was followed (offline, no kernel record)
    chains: tuple[WaitChain, ...] = field(default=(), metadata=OPTIONAL_EMPTY)
    # The label and unit of each evidence key the findings use, from the checks that declare
    # them, written with the report so it renders with its own labels (a key without one is
    # labelled from the key itself). The findings' values carry these labels.
    evidence_labels: Mapping[str, Evidence] = field(default_factory=dict)

    def __post_init__(self) -> None:
        findings = labelled(self.findings, self.evidence_labels)
        if any(a is not b for a, b in zip(findings, self.findings)):
            object.__setattr__(self, "findings", findings)
    # what only the page draws (model/page.py): absent in reports written before it
    page: Page | None = field(default=None, metadata=OPTIONAL)

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = encode(self)
        return out

    @classmethod
    def from_json(cls, data: Any,
                  older_labels: Callable[[], Mapping[str, Evidence]] | None = None) -> Report:
        """The report in `data` (a parsed .json report, this version or the previous one).
        NotAReport (a BadProfile) names the first key missing or of the wrong shape.
        `older_labels`: the evidence labels for a report written before reports carried their
        own (no `evidence_labels`); without it, such a report's keys are labelled from the keys."""
        report = decode_document(cls, data, REQUIRED)
        labels = report.evidence_labels
        if older_labels is not None and isinstance(data, dict) and LABELS_KEY not in data:
            declared = older_labels()
            labels = {key: declared[key] for f in report.findings for key in f.evidence.keys()
                      if key in declared}
        # Read from either version, the model is this one's.
        return replace(report, schema_version=SCHEMA_VERSION, evidence_labels=labels)

    def finding(self, finding_id: str) -> Finding | None:
        return next((f for f in self.findings if f.id == finding_id), None)
