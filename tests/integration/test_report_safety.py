"""Names from the profiled process are untrusted: they reach the report as inert text only."""

from __future__ import annotations

import json
import re

import pytest

from diagnose.report.model import Report
from tests.integration.conftest import SECRETS, requires_ptrace, shared_hostile_names
from tests.integration.typed import as_report

pytestmark = [pytest.mark.integration, requires_ptrace]



@pytest.fixture(scope="module")
def hostile_report(captures):
    html_path, report = shared_hostile_names(captures)  # shared with the browser's tests
    html = html_path.read_text(encoding="utf-8")
    saved = next(html_path.parent.glob("*[0-9].json")).read_text(encoding="utf-8")
    return report, html, saved


def test_hostile_thread_and_function_names_are_in_the_data_but_never_markup(hostile_report):
    report, html, _ = hostile_report
    names = {t.name for t in as_report(report).threads}
    assert "</script><img src=x onerror=alert(1)>" in names
    assert "<img src" not in html and "</script><img" not in html
    # exactly the page's own script elements: the data block and the inline code
    assert len(re.findall(r"<script\b", html)) == 2
    data = re.search(r'<script type="application/json" id="diagnose-data">(.*?)</script>', html, re.S)
    decoded = Report.from_json(json.loads(data.group(1))["report"])  # each table once: the report's
    assert "</script><img src=x onerror=alert(1)>" in {t.name for t in decoded.threads}
    functions = {f.function for f in decoded.stacks.frames}
    assert "<module>" in functions and "<img src=x onerror=alert(2)>" in functions


def test_secrets_on_the_command_line_reach_no_output(hostile_report):
    report, html, saved = hostile_report
    assert "***" in as_report(report).target.cmdline
    for secret in SECRETS:
        assert secret not in html
        assert secret not in saved
        assert secret not in json.dumps(report)


# A target started with a secret in each shape a command line carries one: a flag's next
# argument, an inline `--name=value`, a URL's password; and a child (not Python, so the /proc
# record keeps its command line apart) started with one too.
SECRET_ARGV = ["--api-key", "sk-live-abcdef123456789", "--password=hunter2hunter2",
               "postgres://user:s3cr3tpass@db/x"]
ARGV_SECRETS = ["abcdef123456789", "hunter2hunter2", "s3cr3tpass"]
_SECRET_ARGS_SERVICE = """\
import os, subprocess, sys, time
child = subprocess.Popen(["sh", "-c", "sleep 60; :", "worker", "--token=hunter2hunter2"])
print(f"READY pid={os.getpid()}", flush=True)
try:
    time.sleep(60)
finally:
    child.kill()
"""


def _files_with(directory, secrets: list[str]) -> dict[str, list[str]]:
    """Each file under `directory` (read as bytes, a .gz decompressed) -> the secrets it holds."""
    import gzip

    found = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
        held = [s for s in secrets if s.encode() in data]
        if held:
            found[path.name] = held
    return found


def test_a_secret_in_the_targets_command_line_is_in_no_file_the_attach_writes(tmp_path):
    """Every file `attach --keep-raw --pprof` writes (the report's, and the kept recordings it
    can be replayed from), and every file a replay of those writes, holds none of the target's
    secrets; the program's name is still there, and the replay reads the kept files."""
    import sys

    from tests.conftest import invoke_cli_report
    from tests.integration.conftest import running
    from tests.integration.typed import run_report

    program = tmp_path / "secret_args_service.py"
    program.write_text(_SECRET_ARGS_SERVICE)
    out = tmp_path / "out"
    with running([sys.executable, str(program), *SECRET_ARGV]) as pid:
        proc, live = run_report("attach", pid, "--duration", "2", "--keep-raw", "--pprof",
                                "--json", "--output-dir", out)
    assert proc.returncode == 0 and live is not None, proc.stderr
    suffixes = {p.name.split(".", 1)[1] for p in out.iterdir()}
    assert {"procfs.json", "sampling.json", "chrometrace.json", "pb.gz", "md"} <= suffixes
    assert _files_with(out, ARGV_SECRETS) == {}
    kept = {s: next(out.glob(f"*[0-9].{s}")) for s in ("procfs.json", "sampling.json")}
    for path in kept.values():  # redacted, not dropped: what the analysis reads is there
        assert "secret_args_service.py" in path.read_text() and "--api-key" in path.read_text()
    assert "sleep 60; :" in kept["procfs.json"].read_text()  # the child's command, masked only
    assert "secret_args_service.py" in live.target.cmdline and "***" in live.target.cmdline

    replay_dir = tmp_path / "replay"
    replayed, report = invoke_cli_report(
        "analyze", next(out.glob("*.chrometrace.json")), "--procfs", kept["procfs.json"],
        "--sampling", kept["sampling.json"], "--pprof", "--json", "-o", replay_dir)
    assert replayed.returncode == 0 and report is not None, replayed.stderr
    assert report.target.cmdline == live.target.cmdline
    assert report.verdict.primary == live.verdict.primary
    assert _files_with(replay_dir, ARGV_SECRETS) == {}
