"""The wheel ships rules/ and reports/ inside the package and adds no other top-level name."""

import subprocess
import sys
import zipfile

import pytest

from diagnose.render.html import PAGE_SCRIPT
from tests.conftest import REPO

pytestmark = pytest.mark.slow  # builds the wheel


def _backend_installed() -> bool:
    """pyproject's build requirements are importable here, so the wheel can be built with them
    as they are instead of pip installing them into a fresh isolated environment first (that
    install is most of the build's time)."""
    try:
        import setuptools
        import wheel  # noqa: F401
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 68  # pyproject's build-system floor


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    isolation = ["--no-build-isolation"] if _backend_installed() else []
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", *isolation,
                    "-w", str(out), str(REPO)], check=True, capture_output=True, timeout=300)
    return next(out.glob("diagnose-*.whl"))


def test_only_diagnose_is_a_top_level_import_name(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top_level == {"diagnose"}


def test_rules_templates_assets_and_demo_are_in_the_wheel(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    for needed in ("diagnose/_rules/categories.toml", "diagnose/_rules/checks.toml",
                   "diagnose/_reports/report.html.j2",
                   "diagnose/_reports/static/report.css", "diagnose/demo/inference_service.py",
                   "diagnose/_reports/sweep.html.j2", "diagnose/_reports/experiment.html.j2",
                   "diagnose/_reports/diff.html.j2", "diagnose/_reports/_macros.html.j2",
                   "diagnose/_reports/static/sweep.css", "diagnose/load/loadgen.py"):
        assert needed in names, needed
    for part in PAGE_SCRIPT:
        assert f"diagnose/_reports/static/page/{part}.js" in names, part


def test_no_command_writes_its_reports_among_the_page_templates_by_default():
    from diagnose.cli import main

    defaults = {}
    for name, command in main.commands.items():
        for param in command.params:
            if param.name == "output_dir":
                defaults[name] = str(param.default)
    assert defaults, "no command has --output-dir"
    assert set(defaults.values()) == {"diagnose-reports"}, defaults


def test_the_wheel_ships_the_rules_generated_from_the_checks(wheel):
    """A user copies the installed rules/checks.toml as the reference of the keys to override:
    it is the file generated from the checks' declarations (checks/settings.py `rules_toml`)."""
    from diagnose.checks.settings import rules_toml
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("diagnose/_rules/checks.toml").decode("utf-8") == rules_toml()
