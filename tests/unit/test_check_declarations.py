"""Each check declares its inputs, settings and evidence (diagnose/checks/spec.py): the
declarations match what the code does, and the shipped rules file and docs/checks.md are
generated from them."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
import tomllib
from pathlib import Path

import pytest

from diagnose.checks import doc, registry
from diagnose.checks.declare import declarations, optional_keys
from diagnose.checks.measurements import Measurements
from diagnose.checks.shared_evidence import MERGED
from diagnose.checks.settings import merged, rules_toml, schema
from diagnose.checks.spec import INSTEAD, REQUIREMENTS, SECTIONS, CheckSettings
from diagnose.classify.rules_file import shipped
from tests.conftest import REPO

CHECKS_DIR = REPO / "diagnose" / "checks"
SPECS = {spec.id: spec for spec in registry.SPECS}


def merged_keys(path: Path) -> set[str]:
    """The keys a module writes into a finding's evidence as a mapping, `evidence.update({...})`:
    the service's merge (checks/service_verdict.py) adds its fields that way."""
    keys: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "evidence"):
            for arg in node.args:
                if isinstance(arg, ast.Dict):
                    keys |= {k.value for k in arg.keys if isinstance(k, ast.Constant)}
    return keys


def evidence_classes(check_id: str) -> list[type[Measurements]]:
    """The evidence dataclasses a check module declares (checks/measurements.py)."""
    module = importlib.import_module(f"diagnose.checks.{check_id}")
    return [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, Measurements)
            and v.__module__ == module.__name__]


def keywords_set(path: Path) -> set[str]:
    """The keyword arguments of every call in a module: where an evidence dataclass is built or
    replaced, the optional keys the check sets."""
    return {kw.arg for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) for kw in node.keywords if kw.arg}


def test_the_scans_find_the_keys_written():
    assert set(MERGED) == merged_keys(CHECKS_DIR / "service_verdict.py")
    assert "kernel_file_lock_share" in keywords_set(CHECKS_DIR / "lock_contention.py")
    assert {c.__name__ for c in evidence_classes("deadlock")} == {"DeadlockEvidence", "KernelKnotEvidence"}


def test_every_check_module_is_declared():
    modules = {p.stem for p in CHECKS_DIR.glob("*.py")
               if re.search(r'^ID = "', p.read_text(encoding="utf-8"), re.M)}
    assert modules == set(SPECS)


@pytest.mark.parametrize("check_id", sorted(SPECS))
def test_a_check_declares_exactly_the_evidence_it_writes(check_id):
    """EVIDENCE is the check's evidence dataclasses' fields (each typed and labelled there), and
    a key the check may leave out is set somewhere in the check."""
    classes = evidence_classes(check_id)
    assert classes, "declare the check's evidence as a dataclass (checks/measurements.py)"
    assert dict(SPECS[check_id].evidence) == declarations(*classes)
    unset = set().union(*map(optional_keys, classes)) - keywords_set(CHECKS_DIR / f"{check_id}.py")
    assert sorted(unset) == [], "the check never writes these"


def test_every_evidence_key_reads_one_way():
    labels = registry.evidence_labels()  # raises when two checks declare a key differently
    assert len(labels) > 100
    for key, evidence in labels.items():
        assert evidence.label != key and "_" not in evidence.label and evidence.label.strip() == evidence.label


SHIPPED = tomllib.loads((REPO / "rules" / "checks.toml").read_text(encoding="utf-8"))["checks"]
TEXTS = {f.name for f in dataclasses.fields(CheckSettings)}


def test_rules_checks_toml_is_generated_from_the_declarations():
    committed = (REPO / "rules" / "checks.toml").read_text(encoding="utf-8")
    assert committed == rules_toml(), "stale: run `python -m diagnose.checks.doc`"


@pytest.mark.parametrize("check_id", sorted(SPECS))
def test_the_shipped_table_is_the_declared_defaults(check_id):
    """The generated file reads back as the Settings class's defaults, value and kind, which are
    the settings of a run without --rules."""
    spec = SPECS[check_id]
    table = SHIPPED[check_id]
    fields = {f.name: f.default for f in dataclasses.fields(spec.settings)}
    assert set(fields) == set(table)
    for key, value in table.items():
        declared = fields[key]
        assert (list(declared) if isinstance(declared, tuple) else declared) == value, key
        assert type(declared) is (tuple if isinstance(value, list) else type(value)), key
    assert merged()[check_id] == spec.defaults
    assert spec.title == table["title"] and spec.title and spec.defaults.what


@pytest.mark.parametrize("check_id", sorted(SPECS))
def test_the_docstring_does_not_repeat_the_declared_advice(check_id):
    """The advice every finding gives is declared once (Settings.advice); the docstring's `What to
    do instead` is only the advice built from the data."""
    spec = SPECS[check_id]
    instead = " ".join(spec.sections().get(INSTEAD, "").split())
    for advice in spec.defaults.advice:
        assert " ".join(advice.split()) not in instead, advice
        assert " ".join(advice.split()[:6]) not in instead, advice  # nor its opening words


def test_the_rules_schema_is_the_settings_classes():
    """A --rules file is validated against the Settings classes; the shipped tables, what the
    validation falls back to where no schema is passed, agree with them."""
    assert set(schema()) == set(SHIPPED)
    assert schema() == shipped()[0]
    assert schema()["lock_contention"] == {"title": "string", "what": "string",
                                           "advice": "list of strings", "low": "number",
                                           "high": "number"}


@pytest.mark.parametrize("check_id", sorted(SPECS))
def test_the_docstring_says_what_why_and_instead(check_id):
    """What it finds and why it matters in the docstring; what to do instead there (the advice
    built from the data) or in the declared advice, or both."""
    spec = SPECS[check_id]
    sections = spec.sections()
    assert [name for name in SECTIONS if name in sections] == list(sections)
    assert all(len(sections.get(name, "")) > 40 for name in SECTIONS if name != INSTEAD)
    assert len(sections.get(INSTEAD, "")) > 40 or spec.defaults.advice


def test_every_needed_input_has_its_reason():
    for spec in registry.CHECKS:
        assert all(needed in REQUIREMENTS for needed in spec.needs), spec.id


def test_docs_checks_md_is_generated_from_the_declarations():
    committed = (REPO / "docs" / "checks.md").read_text(encoding="utf-8")
    assert committed == doc.render(), "stale: run `python -m diagnose.checks.doc`"
