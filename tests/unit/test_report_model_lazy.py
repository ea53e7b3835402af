"""The report model's names load from their modules when first asked for: the attach's start-up
takes its light types (run.Target, sections.CallSite) without the whole report model."""

from __future__ import annotations

import subprocess
import sys

import diagnose.report.model as model


def test_every_exported_name_is_found_in_its_module():
    assert sorted(model.__all__) == sorted(model._WHERE)
    for name in model.__all__:
        value = getattr(model, name)
        assert getattr(sys.modules[f"diagnose.report.model.{model._WHERE[name]}"], name) is value


def test_the_attachs_start_up_imports_leave_the_report_itself_unloaded():
    script = ("import sys; import diagnose.cli, diagnose.collect.capture; "
              "print('diagnose.report.model.report' in sys.modules, "
              "'diagnose.report.model.findings' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
