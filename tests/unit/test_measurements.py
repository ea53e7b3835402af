"""A check's evidence dataclass becomes the finding's {key: value} one way (checks/measurements.py),
with the labels declared on its fields (checks/declare.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from diagnose.checks.base import make_finding
from diagnose.checks.declare import declarations, key, optional_keys, shared_key
from diagnose.checks.measurements import OMITTED, Measurements, Omitted, written
from diagnose.checks.shared_evidence import SHARED
from diagnose.checks.spec import CheckSettings
from diagnose.checks.spec import Unit as U
from diagnose.report.model.findings import Fix


@dataclass(frozen=True, kw_only=True)
class _Example(Measurements):
    share: float = key("a share", U.PERCENT, estimable=True)
    holder: str | Omitted = shared_key(optional=True)
    handler: str | None | Omitted = key("a handler", U.TEXT, none="not seen", optional=True)
    fix: Fix | tuple[Fix, ...] | Omitted = shared_key(optional=True)


def test_the_fields_are_the_keys_in_order_and_an_omitted_one_is_left_out():
    assert written(_Example(share=0.5, handler=None)) == {"share": 0.5, "handler": None}
    assert list(written(_Example(share=0.5, holder="h", handler="x"))) == ["share", "holder", "handler"]
    assert written(_Example(share=0.5, holder=OMITTED)) == {"share": 0.5}


def test_a_fix_is_written_as_the_json_has_it():
    assert written(_Example(share=0.0, fix=Fix("stage_threads", 3, stage="decode")))["fix"] == {
        "knob": "stage_threads", "stage": "decode", "value": 3}
    both = written(_Example(share=0.0, fix=(Fix("gc_freeze", True), Fix("gc_threshold", [1, 2]))))
    assert both["fix"] == [{"knob": "gc_freeze", "value": True}, {"knob": "gc_threshold", "value": [1, 2]}]


def test_the_labels_are_declared_on_the_fields():
    table = declarations(_Example)
    assert list(table) == ["share", "holder", "handler", "fix"]
    assert table["share"].label == "a share" and table["share"].estimable
    assert table["holder"] == SHARED["holder"] and table["handler"].none == "not seen"
    assert optional_keys(_Example) == {"holder", "handler", "fix"}


def test_a_field_without_a_label_is_refused():
    @dataclass(frozen=True, kw_only=True)
    class Unlabelled(Measurements):
        share: float

    with pytest.raises(TypeError):
        declarations(Unlabelled)


def test_make_finding_takes_the_dataclass():
    finding = make_finding("x", CheckSettings(title="x"), 50, "words",
                           _Example(share=0.25, fix=Fix("workers", 4)))
    assert finding.evidence.as_dict() == {"share": 0.25, "fix": {"knob": "workers", "value": 4}}
    assert finding.fixes == (Fix("workers", 4),)
