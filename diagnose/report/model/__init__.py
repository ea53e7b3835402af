"""The report as frozen, typed values (report.py is the whole), read from and written to JSON by
one codec (codec.py)."""

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

__all__ = ["CpuAccount", "CpuShare",
           "NotAReport", "EvidenceValue", "EvidenceValues", "Evidence", "Unit", "severity_for",
           "Finding", "Fix", "Interval", "Lever", "Site", "Verdict",
           "READS", "SCHEMA_VERSION", "Report", "Load", "Observer", "PlannedProcess", "Sampling",
           "StateSources", "Target", "CallSite", "Callback", "Edge", "EventLoop", "Holder",
           "NotApplicable", "Process", "ProcessTasks", "TaskAwaitSite", "StackFrame", "StackRow",
           "Stacks", "Stage", "Structure", "Thread", "ThreadOs", "TopFinding", "WaitSite"]
