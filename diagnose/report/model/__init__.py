"""The report as frozen, typed values (report.py is the whole), read from and written to JSON by
one codec (codec.py).

Its names are loaded from their modules when first asked for (PEP 562): the attach's start-up
uses a few light types (run.Target, sections.CallSite) and should not pay ~25 ms, on the way to
the first sample, for the whole report model it needs only after the window."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from diagnose.report.model.account import CpuAccount, CpuShare
    from diagnose.report.model.codec import NotAReport
    from diagnose.report.model.findings import (EvidenceValue, EvidenceValues, Finding, Fix,
                                                Interval, Lever, NotApplicable, Site, Verdict,
                                                severity_for)
    from diagnose.report.model.labels import Evidence, Unit
    from diagnose.report.model.report import READS, SCHEMA_VERSION, Report
    from diagnose.report.model.run import (Load, Observer, PlannedProcess, Sampling, StateSources,
                                            Target)
    from diagnose.report.model.sections import (CallSite, Callback, Edge, EventLoop, Holder,
                                                Process, ProcessTasks, StackFrame,
                                                StackRow, Stacks, Stage, Structure, TaskAwaitSite,
                                                Thread, ThreadOs, TopFinding, WaitSite)

_MODULE_OF = {
    "account": ("CpuAccount", "CpuShare"),
    "codec": ("NotAReport",),
    "findings": ("EvidenceValue", "EvidenceValues", "Finding", "Fix", "Interval", "Lever",
                 "NotApplicable", "Site", "Verdict", "severity_for"),
    "labels": ("Evidence", "Unit"),
    "report": ("READS", "SCHEMA_VERSION", "Report"),
    "run": ("Load", "Observer", "PlannedProcess", "Sampling", "StateSources", "Target"),
    "sections": ("CallSite", "Callback", "Edge", "EventLoop", "Holder", "Process", "ProcessTasks",
                 "StackFrame", "StackRow", "Stacks", "Stage", "Structure", "TaskAwaitSite",
                 "Thread", "ThreadOs", "TopFinding", "WaitSite"),
}
_WHERE = {name: module for module, names in _MODULE_OF.items() for name in names}

__all__ = ["CpuAccount", "CpuShare",
           "NotAReport", "EvidenceValue", "EvidenceValues", "Evidence", "Unit", "severity_for",
           "Finding", "Fix", "Interval", "Lever", "Site", "Verdict",
           "READS", "SCHEMA_VERSION", "Report", "Load", "Observer", "PlannedProcess", "Sampling",
           "StateSources", "Target", "CallSite", "Callback", "Edge", "EventLoop", "Holder",
           "NotApplicable", "Process", "ProcessTasks", "TaskAwaitSite", "StackFrame", "StackRow",
           "Stacks", "Stage", "Structure", "Thread", "ThreadOs", "TopFinding", "WaitSite"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
