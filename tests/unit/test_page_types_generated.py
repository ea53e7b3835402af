"""The page's types (reports/static/page/report.gen.d.ts) are generated from the report's
dataclasses (scripts/gen_page_types.py), and TypeScript checks the page's script against them:
a field renamed or added in Python without regenerating fails here, and a field the page reads
that the report no longer has fails the page's type check."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from types import ModuleType

import pytest

from diagnose.report.model.codec import OPTIONAL, OPTIONAL_EMPTY, encode, key
from tests.conftest import REPO

PAGE_DIR = REPO / "reports" / "static" / "page"
GENERATED = PAGE_DIR / "report.gen.d.ts"
TSC = REPO / "node_modules" / ".bin" / "tsc"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_page_types", REPO / "scripts" / "gen_page_types.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_the_committed_types_are_what_the_dataclasses_generate():
    generated = _generator().render()
    assert GENERATED.read_text(encoding="utf-8") == generated, (
        "reports/static/page/report.gen.d.ts is out of date: run python scripts/gen_page_types.py")


@dataclass(frozen=True)
class Inner:
    """An inner part. Its second sentence is not in the comment."""

    share: float


@dataclass(frozen=True)
class Outer:
    name: str
    count: int | None
    flags: tuple[bool, ...]
    pair: tuple[int, int] | None
    by_name: dict[str, Inner]
    inner: Inner | None = field(default=None, metadata=OPTIONAL)
    notes: tuple[str, ...] = field(default=(), metadata=OPTIONAL_EMPTY)
    renamed: str = field(default="", metadata=key("written_as"))
    anything: object = None


def test_a_field_is_typed_as_the_codec_writes_it():
    text = _generator().render((Outer,))
    outer = text[text.index("interface Outer {"):text.index("}", text.index("interface Outer {"))]
    for line in ("name: string;", "count: number | null;", "flags: boolean[];",
                 "pair: [number, number] | null;", "by_name: Record<string, Inner>;",
                 "inner?: Inner;", "notes?: string[];", "written_as: string;",
                 "anything: JsonValue;"):
        assert line in outer, (line, outer)
    assert "/** An inner part. (" in text and "second sentence" not in text
    # the codec writes what the types say
    written = encode(Outer("a", None, (True,), (1, 2), {"x": Inner(0.5)}, renamed="r"))
    assert written == {"name": "a", "count": None, "flags": [True], "pair": [1, 2],
                       "by_name": {"x": {"share": 0.5}}, "written_as": "r", "anything": None}


def _renamed_in(text: str, interface: str, name: str, new: str) -> str:
    """`text` with the field `name` of `interface` renamed `new` (or, for a type alias, the
    string literal "name")."""
    start = text.index(f"  interface {interface} {{\n") if f"interface {interface} " in text \
        else text.index(f"  type {interface} = ")
    end = text.index("\n  }\n", start) if "interface" in text[start:start + 14] else text.index(";\n", start)
    block = text[start:end]
    changed = re.sub(rf"(\n    ){name}(\??:)", rf"\1{new}\2", block) if "interface" in block[:14] \
        else block.replace(f'"{name}"', f'"{new}"')
    assert changed != block, (interface, name)
    return text[:start] + changed + text[end:]


# (interface, field): fields of the report's parts that a part of the page reads
RENAMED = [("Finding", "predicted_gain"),       # verdict.js: the predicted gain
           ("Verdict", "co_primary_reason"),    # verdict.js: the co-primary finding's reason
           ("Observer", "target_cores"),        # verdict.js: the observer block's data-*
           ("WaitSite", "holder_scope"),        # waits.js
           ("Process", "cpu_cores"),            # processes.js
           ("EventLoop", "idle_share"),         # loops.js: LOOP_PARTS names it as a string
           ("Stage", "starved_share"),          # structure.js: STAGE_WAITS names it
           ("WaitNode", "running_share"),       # waitgraph.js
           ("ThreadOs", "runqueue_wait_s"),     # timeline.js: the thread table's column
           ("TimelineLane", "runs"),            # timeline.js: the timeline's lanes
           ("ResourceKind", "cpu_quota")]       # waitgraph.js: a resource kind's words


@pytest.mark.skipif(not TSC.exists(), reason="no node_modules/.bin/tsc (`npm ci` installs it; "
                    "scripts/test.sh does): the page's type check cannot run")
def test_a_field_renamed_in_the_generated_types_fails_the_pages_type_check(tmp_path):
    page = tmp_path / "page"
    shutil.copytree(PAGE_DIR, page)
    text = GENERATED.read_text(encoding="utf-8")
    for interface, name in RENAMED:
        text = _renamed_in(text, interface, name, name + "_renamed")
    (page / GENERATED.name).write_text(text, encoding="utf-8")
    result = subprocess.run([str(TSC), "-p", str(page), "--pretty", "false"],
                            capture_output=True, text=True, timeout=180, cwd=tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    errors = [line for line in out.splitlines() if ": error TS" in line]
    for interface, name in RENAMED:
        assert any(re.search(rf"\b{name}\b", line) for line in errors), (
            f"renaming {interface}.{name} did not fail the page's type check:\n{out}")


def test_the_types_are_never_part_of_the_page():
    from diagnose.render.html import PAGE_SCRIPT, page_script

    assert all(not part.endswith(".d") and part != GENERATED.stem for part in PAGE_SCRIPT)
    script = page_script()
    assert "declare namespace Model" not in script and "interface PageData" not in script
    # nor shipped: the wheel's page files are the *.js parts (pyproject's package-data)
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert '"static/page/*.js"' in pyproject and ".d.ts" not in pyproject
