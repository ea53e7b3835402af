"""The checks and the analysis views build the report model's own values (one definition of each
class), enums stay enums through the codec, and the model imports nothing of the checks: a saved
report carries the labels of its evidence keys."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

from diagnose.checks import base, engine
from diagnose.model import event_loops, structure, waits
from diagnose.vocab import Confidence, LeverKind, ProcessRole, Severity
from diagnose.report import model
from diagnose.report.model import Finding, Lever, Report, Verdict
from diagnose.report.model.codec import decode
from tests.conftest import REPO

REPORT_CLASSES = ("Finding", "Lever", "Site", "NotApplicable", "Verdict", "WaitSite", "Holder",
                  "Stage", "Structure", "Edge", "EventLoop", "Callback", "CallSite")


def test_each_report_class_is_defined_once_in_the_report_model():
    defined: dict[str, list[str]] = {}
    for path in sorted((REPO / "diagnose").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and node.name in REPORT_CLASSES:
                defined.setdefault(node.name, []).append(str(path.relative_to(REPO)))
    assert {name: len(paths) for name, paths in defined.items()} == dict.fromkeys(REPORT_CLASSES, 1)
    assert all(p.startswith("diagnose/report/model/") for paths in defined.values() for p in paths)


def test_the_checks_and_views_hand_out_the_report_models_classes():
    assert base.Finding is model.Finding and base.Lever is model.Lever and base.Site is model.Site
    assert base.NotApplicable is model.NotApplicable and engine.Verdict is model.Verdict
    assert waits.WaitSite is model.WaitSite and waits.Holder is model.Holder
    assert structure.Stage is model.Stage and structure.Structure is model.Structure
    assert event_loops.EventLoop is model.EventLoop and event_loops.CallSite is model.CallSite


def test_the_model_imports_neither_the_checks_nor_pandas():
    code = ("import sys, diagnose.report.model; "
            "print(sorted(m for m in sys.modules if m == 'pandas' or m == 'numpy' "
            "or m.startswith('diagnose.checks')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_enums_stay_enums_through_the_codec_and_unknown_words_read_as_written():
    finding = Finding("x", "t", 80, "critical", "s", {"share": 0.5},
                      levers=(Lever(LeverKind.MORE_CORES, 1.234, "from more cores", "b"),))
    back = decode(Finding, json.loads(json.dumps(finding.to_dict())))
    assert back.severity is Severity.CRITICAL and back.levers[0].kind is LeverKind.MORE_CORES
    assert back.levers[0].gain == 1.23 and back == finding
    verdict = decode(Verdict, {"primary": "x", "severity": "warning", "confidence": "low"})
    assert verdict.severity is Severity.WARNING and verdict.confidence is Confidence.LOW
    edited = decode(Finding, {"id": "x", "severity": "dire"})
    assert edited.severity == "dire" and edited.to_dict()["severity"] == "dire"


def _report(**extra) -> dict:
    return {"schema_version": 2, "sampling": {}, "threads": [],
            "verdict": {"primary": "lock_contention"},
            "processes": [{"pid": 1, "role": "worker"}],
            "findings": [{"id": "lock_contention", "evidence": {"lock_wait_share": 0.5,
                                                                "new_key_s": 2.0}}], **extra}


def test_a_report_renders_with_the_labels_it_carries():
    labels = {"lock_wait_share": {"label": "time on locks", "unit": "percent", "estimable": True,
                                  "interval": True, "none": "-", "row": True}}
    report = Report.from_json(_report(evidence_labels=labels))
    share, new = report.findings[0].evidence
    assert (share.label, share.unit, share.estimable) == ("time on locks", "percent", True)
    assert (new.label, new.unit) == ("new key", "seconds")  # no label: made from the key
    assert report.processes[0].role is ProcessRole.WORKER
    assert report.to_json()["evidence_labels"] == labels
    assert Report.from_json(report.to_json()) == report


def test_a_report_written_before_labels_were_carried_takes_the_declared_ones_when_given():
    declared = {"lock_wait_share": model.Evidence("declared words", model.Unit.PERCENT),
                "unused_key": model.Evidence("not in this report", model.Unit.NUMBER)}
    bare = Report.from_json(_report())
    assert bare.findings[0].evidence.value("lock_wait_share").label == "lock wait share"
    older = Report.from_json(_report(), older_labels=lambda: declared)
    assert older.findings[0].evidence.value("lock_wait_share").label == "declared words"
    assert list(older.to_json()["evidence_labels"]) == ["lock_wait_share"]  # the keys it uses
