"""Every report also writes its ticket summary, `<base>.md`, beside the JSON: through the CLI,
under the same claimed name, and with the same handling of a file that cannot be written."""

from __future__ import annotations

import os

import pytest
from markdown_it import MarkdownIt

from diagnose.collect.run_context import RunContext
from diagnose.run import pipeline
from diagnose.errors import OutputFailed
from diagnose.render.markdown import MAX_BYTES
from tests.conftest import RECORDED
from tests.integration.typed import invoke_report, read_report

pytestmark = [pytest.mark.integration]

PROFILE = RECORDED / "underloaded.speedscope.json"
BASE = "diagnose-42-20260101-000000"


def rendered_text(markdown: str) -> str:
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    return " ".join("".join(child.content for child in token.children
                            if child.type in ("text", "code_inline"))
                    for token in tokens if token.type == "inline")


def names(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def analysed():
    return pipeline.analyze([PROFILE], None, RunContext(), None, live=False)


def write(out_dir):
    service, results, per_process, categorizer = analysed()
    return pipeline.write_outputs(service, results, per_process, categorizer, [PROFILE], out_dir,
                                  BASE, None, keep_raw=False, move_profile=False)


def test_analyze_writes_the_ticket_summary_beside_the_json(out_dir):
    # a recording whose request threads queue on a lock: the summary has a wait site to show
    proc, report = invoke_report("analyze", RECORDED / "lock_contention.native.speedscope.json",
                                 "--procfs", RECORDED / "lock_contention.procfs.json", "-o",
                                 out_dir, "--json")
    assert proc.returncode == 0, proc.stderr
    stem = next(n for n in names(out_dir) if n.endswith(".html")).removesuffix(".html")
    assert names(out_dir) == [f"{stem}.html", f"{stem}.json", f"{stem}.md",
                              f"{stem}.speedscope.json"]
    summary = (out_dir / f"{stem}.md").read_text(encoding="utf-8")
    assert len(summary.encode("utf-8")) < MAX_BYTES
    assert "<table>" in MarkdownIt("commonmark").enable("table").render(summary)
    shown = rendered_text(summary)
    assert report is not None and report.verdict.headline in shown
    assert report.waits and report.waits[0].function in shown
    assert f"Open {stem}.html in a browser" in shown


def test_an_earlier_summary_alone_keeps_its_name_taken(out_dir):
    out_dir.mkdir(parents=True)
    (out_dir / f"{BASE}.md").write_text("earlier ticket summary\n")
    outputs = write(out_dir)
    assert outputs.markdown.name == f"{BASE}-2.md" and outputs.json.name == f"{BASE}-2.json"
    assert (out_dir / f"{BASE}.md").read_text() == "earlier ticket summary\n"
    assert read_report(outputs.json).verdict == outputs.report.verdict


def test_a_summary_that_cannot_be_written_is_named_and_the_json_is_kept(out_dir):
    out_dir.mkdir(parents=True)
    # A directory where the summary's temporary file goes: writing it fails, nothing else does.
    (out_dir / f".{BASE}.md.{os.getpid()}.tmp").mkdir()
    with pytest.raises(OutputFailed) as failed:
        write(out_dir)
    assert failed.value.message == (
        f"could not write {out_dir / f'{BASE}.md'}: Is a directory; "
        f"kept {BASE}.speedscope.json, {BASE}.json")
    assert [n for n in names(out_dir) if not n.startswith(".")] == [f"{BASE}.json",
                                                                    f"{BASE}.speedscope.json"]
    assert read_report(out_dir / f"{BASE}.json").verdict.primary
