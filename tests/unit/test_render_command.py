"""`diagnose render REPORT`: the page and the summary rebuilt from a saved report alone are the
files `analyze` (and `attach`, through the same writer) wrote, byte for byte; the page's data
carries each table once; a file that is not a report is one line and exit 6; a report written
before the page's own tables renders what it can and says so."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from diagnose.errors import ExitCode
from diagnose.render.page_tables import EARLIER_REPORT_NOTE
from diagnose.report.model import Report
from tests.conftest import RECORDED, invoke_cli

_DATA_BLOCK = re.compile(r'<script type="application/json" id="diagnose-data">(.*?)</script>', re.S)


def _analyzed(tmp_path: Path, name: str, procfs: str | None) -> tuple[Path, Path, Path]:
    out = tmp_path / "analyzed"
    args = ["analyze", RECORDED / name, "-o", out]
    if procfs is not None:
        args[2:2] = ["--procfs", RECORDED / procfs]
    proc, _ = invoke_cli(*args)
    assert proc.returncode == 0, proc.stderr
    json_path = next(p for p in out.glob("*.json") if not p.name.endswith(".speedscope.json"))
    base = json_path.name.removesuffix(".json")
    return json_path, out / f"{base}.html", out / f"{base}.md"


@pytest.mark.parametrize("name, procfs", [
    ("lock_contention.speedscope.json", "lock_contention.procfs.json"),  # one process
    ("fork_tree.chrometrace.json", "fork_tree.procfs.json"),  # a master and workers, timestamps
])
def test_render_rebuilds_the_page_and_summary_byte_for_byte(tmp_path, name, procfs):
    json_path, html_path, md_path = _analyzed(tmp_path, name, procfs)
    out = tmp_path / "rendered"
    proc, _ = invoke_cli("render", json_path, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    rendered_html, rendered_md = out / html_path.name, out / md_path.name
    assert proc.stdout.splitlines() == [str(rendered_html), str(rendered_md)]
    assert rendered_html.read_bytes() == html_path.read_bytes()
    assert rendered_md.read_bytes() == md_path.read_bytes()
    # from the page itself (a ticket's attachment) as well
    again = tmp_path / "from-page"
    proc, _ = invoke_cli("render", rendered_html, "--out", again)
    assert proc.returncode == 0, proc.stderr
    assert (again / html_path.name).read_bytes() == html_path.read_bytes()


def test_the_page_carries_each_table_once(tmp_path):
    json_path, html_path, _ = _analyzed(tmp_path, "lock_contention.speedscope.json",
                                        "lock_contention.procfs.json")
    data = json.loads(_DATA_BLOCK.search(html_path.read_text(encoding="utf-8")).group(1))
    # no table beside the report's: the threads, states, samples and timeline are in it
    assert not {"threads", "states", "categories", "flame", "timeline", "generated_at"} & set(data)
    assert {"report", "evidence_text", "vocabulary"} <= set(data)
    # the page's report is the .json file's, its own tables included
    assert data["report"] == json.loads(json_path.read_text(encoding="utf-8"))
    report = Report.from_json(data["report"])
    assert report.page is not None and report.page.generated_at
    assert len(report.page.frame_categories) == len(report.stacks.frames)
    assert len(report.page.stack_threads) == len(report.stacks.samples)
    for row, thread in zip(report.stacks.samples, report.page.stack_threads):
        assert (report.threads[thread].tid, report.threads[thread].name) == (row.tid, row.thread)
    assert {lane.thread for lane in report.page.timeline.lanes} <= set(range(len(report.threads)))


def test_render_beside_the_report_replaces_its_page_with_the_same_bytes(tmp_path):
    json_path, html_path, md_path = _analyzed(tmp_path, "lock_contention.speedscope.json", None)
    before = html_path.read_bytes(), md_path.read_bytes()
    proc, _ = invoke_cli("render", json_path)
    assert proc.returncode == 0, proc.stderr
    assert (html_path.read_bytes(), md_path.read_bytes()) == before


@pytest.mark.parametrize("content, said", [
    ("not a report at all", "neither JSON nor an HTML page"),
    ('{"schema_version": 2}', "without sampling, verdict, findings, threads"),
    ("{", "not valid JSON"),
])
def test_a_file_that_is_not_a_report_is_one_line_and_exit_6(tmp_path, content, said):
    bad = tmp_path / "bad.json"
    bad.write_text(content, encoding="utf-8")
    proc, _ = invoke_cli("render", bad, "--out", tmp_path / "out")
    assert proc.returncode == ExitCode.BAD_PROFILE
    assert proc.stderr.startswith("error: ") and said in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_missing_file_is_exit_6(tmp_path):
    proc, _ = invoke_cli("render", tmp_path / "nowhere.json")
    assert proc.returncode == ExitCode.BAD_PROFILE
    assert "nowhere.json" in proc.stderr and "Traceback" not in proc.stderr


def test_a_report_from_before_the_page_tables_renders_without_them_and_says_so(tmp_path):
    json_path, _, md_path = _analyzed(tmp_path, "lock_contention.speedscope.json", None)
    data = json.loads(json_path.read_text(encoding="utf-8"))
    del data["page"]
    old = tmp_path / "old" / json_path.name
    old.parent.mkdir()
    old.write_text(json.dumps(data), encoding="utf-8")
    shutil.copy(md_path, tmp_path / "attached.md")
    proc, _ = invoke_cli("render", old)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("warning: ") and "older diagnose" in proc.stderr
    html = (old.parent / md_path.name.replace(".md", ".html")).read_text(encoding="utf-8")
    page = Report.from_json(json.loads(_DATA_BLOCK.search(html).group(1))["report"])
    assert EARLIER_REPORT_NOTE in page.sampling.notes  # the page's run facts say so
    assert page.page is not None and page.page.timeline.steps == 0
    assert len(page.page.stack_threads) == len(page.stacks.samples)
    assert -1 not in page.page.stack_threads  # each row's thread found by its facts
    # the summary reads the report alone: the same as it was
    assert (old.parent / md_path.name).read_bytes() == md_path.read_bytes()


def test_render_has_help():
    proc, _ = invoke_cli("render", "--help")
    assert proc.returncode == 0
    assert "byte for byte" in proc.stdout and "--out" in proc.stdout
