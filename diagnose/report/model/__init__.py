"""The report as frozen, typed values (report.py is the whole), read from and written to JSON by
one codec (codec.py)."""

from diagnose.report.model.codec import NotAReport
from diagnose.report.model.findings import (EvidenceValue, Finding, Fix, Interval, Lever, Site,
                                            Verdict)
from diagnose.report.model.report import READS, SCHEMA_VERSION, Report
from diagnose.report.model.run import (Load, Observer, PlannedProcess, Sampling, StateSources,
                                        Target)
from diagnose.report.model.sections import (CallSite, Callback, Edge, EventLoop, Holder,
                                            NotApplicable, Process, ProcessTasks, StackFrame,
                                            StackRow, Stacks, Stage, Structure, TaskAwaitSite,
                                            Thread, ThreadOs, TopFinding, WaitSite)

__all__ = ["NotAReport", "EvidenceValue", "Finding", "Fix", "Interval", "Lever", "Site", "Verdict",
           "READS", "SCHEMA_VERSION", "Report", "Load", "Observer", "PlannedProcess", "Sampling",
           "StateSources", "Target", "CallSite", "Callback", "Edge", "EventLoop", "Holder",
           "NotApplicable", "Process", "ProcessTasks", "TaskAwaitSite", "StackFrame", "StackRow",
           "Stacks", "Stage", "Structure", "Thread", "ThreadOs", "TopFinding", "WaitSite"]
