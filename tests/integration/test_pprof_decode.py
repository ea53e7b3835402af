"""`diagnose export --format pprof` end to end: the real CLI writes the file, and protoc (the C++
protobuf compiler, a decoder independent of the Python code that wrote it) reads it back; and
`go tool pprof`, the reference reader, opens the files `analyze --pprof` writes for recorded
profiles (a forked tree among them) and shows the report's samples, stacks, totals and labels.
The CLI runs in this process (click's test runner): the files it writes are what is read back."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field, replace

import pytest

from diagnose.errors import ExitCode
from diagnose.report.model import Report, StackRow
from tests.conftest import RECORDED, REPO, invoke_cli
from tests.integration.typed import read_report

pytestmark = [pytest.mark.integration]

PROTO = REPO / "diagnose" / "export" / "profile.proto"
PROTOC = shutil.which("protoc")
requires_protoc = pytest.mark.skipif(
    PROTOC is None, reason="protoc not installed (Debian protobuf-compiler; "
                           "scripts/install-test-tools.sh installs it)")


@pytest.fixture(scope="module")
def written_report(tmp_path_factory) -> tuple:
    """A report of a recorded profile, written by the CLI: (.json path, .html path)."""
    out = tmp_path_factory.mktemp("pprof")
    proc, _ = invoke_cli("analyze", RECORDED / "lock_contention.speedscope.json",
                      "--procfs", RECORDED / "lock_contention.procfs.json", "-o", out,
                      check_json=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    json_path = next(p for p in out.glob("*.json") if not p.name.endswith(".speedscope.json"))
    return json_path, json_path.with_suffix(".html")


def export(*args):
    proc, _ = invoke_cli("export", *args, check_json=False, timeout=60)
    return proc


# --- protoc's text format, read back into plain values --------------------------------------

_ESCAPE = re.compile(rb"\\([0-7]{1,3}|x[0-9a-fA-F]{1,2}|.)")
_SIMPLE = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b'"': b'"', b"'": b"'", b"\\": b"\\"}


def _unquote(text: str) -> str:
    def one(match):
        code = match.group(1)
        if code[:1].isdigit():
            return bytes([int(code, 8)])
        if code[:1] == b"x":
            return bytes([int(code[1:], 16)])
        return _SIMPLE[code]
    return _ESCAPE.sub(one, text[1:-1].encode("ascii")).decode("utf-8")


def parse_text_format(text: str) -> dict:
    """protoc --decode's output as nested dicts: field name -> list of values or messages."""
    root: dict = {}
    stack = [root]
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line == "}":
            stack.pop()
        elif line.endswith("{"):
            child: dict = {}
            stack[-1].setdefault(line[:-1].strip(), []).append(child)
            stack.append(child)
        else:
            name, value = line.split(": ", 1)
            value = _unquote(value) if value.startswith('"') else int(value)
            stack[-1].setdefault(name, []).append(value)
    assert stack == [root], "unbalanced braces in protoc's output"
    return root


def protoc_decode(pb_gz) -> dict:
    proc = subprocess.run([PROTOC, f"--proto_path={PROTO.parent}",
                           "--decode=perftools.profiles.Profile", PROTO.name],
                          input=gzip.decompress(pb_gz.read_bytes()), capture_output=True,
                          timeout=60, check=True)
    return parse_text_format(proc.stdout.decode("ascii"))


def first(message: dict, field: str, default=0):
    """A singular field: proto3 omits it from the text when it holds its default."""
    return message.get(field, [default])[0]


def repeated(message: dict, field: str) -> list:
    """A repeated field: absent from the text when empty."""
    return message.get(field, [])


@dataclass(frozen=True)
class Row:
    """One decoded pprof sample: its functions leaf first, its values and its labels."""

    functions: list[str]
    values: list[int]
    labels: dict[str, object]


def decoded_rows(profile: dict) -> list[Row]:
    strings = repeated(profile, "string_table")
    functions = {first(f, "id"): f for f in repeated(profile, "function")}
    locations = {first(loc, "id"): loc for loc in repeated(profile, "location")}
    rows = []
    for sample in repeated(profile, "sample"):
        names = [strings[first(functions[first(first(locations[lid], "line"), "function_id")],
                               "name")] for lid in repeated(sample, "location_id")]
        labels = {}
        for label in repeated(sample, "label"):
            key = strings[first(label, "key")]
            labels[key] = first(label, "num") if "num" in label else strings[first(label, "str")]
        rows.append(Row(names, repeated(sample, "value"), labels))
    return rows


def row_labels(row: StackRow) -> dict[str, object]:
    """The labels a stack row is exported with (export/pprof.py): those it has."""
    labels = {"thread": row.thread, "role": row.role, "state": row.state,
              "category": row.category, "pid": row.pid, "tid": row.tid}
    return {key: value for key, value in labels.items() if value is not None}


# --- tests ------------------------------------------------------------------------------------

@requires_protoc
def test_protoc_reads_back_the_totals_labels_and_stacks_of_the_json_report(written_report,
                                                                          tmp_path):
    json_path, _ = written_report
    target = tmp_path / "lock.pb.gz"
    proc = export(json_path, "--format", "pprof", "-o", target)
    assert proc.returncode == 0, proc.stderr
    report = read_report(json_path)
    stacks = report.stacks
    profile = protoc_decode(target)
    strings = repeated(profile, "string_table")

    assert strings[0] == ""
    assert [(strings[first(t, "type")], strings[first(t, "unit")])
            for t in repeated(profile, "sample_type")] == [("samples", "count"), ("wall", "nanoseconds")]
    period = first(profile, "period")
    assert stacks.interval_s is not None and period == round(stacks.interval_s * 1e9)

    rows = decoded_rows(profile)
    total = sum(row.count for row in stacks.samples)
    assert sum(row.values[0] for row in rows) == total == report.sampling.thread_samples
    assert sum(row.values[1] for row in rows) == total * period

    assert len(rows) == len(stacks.samples)
    for row, expected in zip(rows, stacks.samples):
        assert row.values == [expected.count, expected.count * period]
        assert row.labels == {"thread": expected.thread, "role": expected.role,
                              "state": expected.state, "category": expected.category,
                              "pid": expected.pid, "tid": expected.tid}
        assert row.functions == [stacks.frames[i].function for i in reversed(expected.stack)]
    # one full stack spelled out: a request thread in the model, leaf first
    model = next(r for r in rows if r.labels.get("category") == "model")
    assert model.functions[0] == "Model.predict"
    assert model.functions[-1] == "Thread._bootstrap"


@requires_protoc
def test_protoc_reads_back_non_ascii_thread_names(tmp_path, written_report):
    json_path, _ = written_report
    report = read_report(json_path)
    samples = report.stacks.samples
    samples = (replace(samples[0], thread="wörker «1»"),) + samples[1:]
    report = replace(report, stacks=replace(report.stacks, samples=samples))
    renamed = tmp_path / "renamed.json"
    renamed.write_text(json.dumps(report.to_json()), encoding="utf-8")
    proc = export(renamed)
    assert proc.returncode == 0, proc.stderr
    assert decoded_rows(protoc_decode(tmp_path / "renamed.pb.gz"))[0].labels.get("thread") == (
        "wörker «1»")


def test_html_report_exports_the_same_profile_as_its_json(written_report, tmp_path):
    json_path, html_path = written_report
    from_json, from_html = tmp_path / "a.pb.gz", tmp_path / "b.pb.gz"
    assert export(json_path, "-o", from_json).returncode == 0
    proc = export(html_path, "-o", from_html)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(from_html)
    assert from_html.read_bytes() == from_json.read_bytes()


def test_default_output_sits_beside_the_report_and_never_replaces_a_file(written_report,
                                                                         tmp_path):
    json_path, html_path = written_report
    local_json = tmp_path / json_path.name
    local_html = tmp_path / html_path.name
    shutil.copyfile(json_path, local_json)
    shutil.copyfile(html_path, local_html)
    stem = json_path.name[:-len(".json")]

    printed = [export(path).stdout.strip() for path in (local_json, local_html, local_json)]
    assert printed == [str(tmp_path / f"{stem}.pb.gz"), str(tmp_path / f"{stem}-2.pb.gz"),
                       str(tmp_path / f"{stem}-3.pb.gz")]
    assert len({(tmp_path / f"{stem}{n}.pb.gz").read_bytes() for n in ("", "-2", "-3")}) == 1


def test_explicit_output_that_exists_is_refused_and_kept(written_report, tmp_path):
    json_path, _ = written_report
    taken = tmp_path / "taken.pb.gz"
    taken.write_bytes(b"keep me")
    proc = export(json_path, "-o", taken)
    assert proc.returncode == ExitCode.OUTPUT_FAILED
    assert proc.stderr.strip() == f"error: {taken} exists: remove it or name another file with -o"
    assert taken.read_bytes() == b"keep me"


def test_output_into_a_missing_directory_exits_11(written_report, tmp_path):
    json_path, _ = written_report
    proc = export(json_path, "-o", tmp_path / "missing" / "out.pb.gz")
    assert proc.returncode == ExitCode.OUTPUT_FAILED
    assert proc.stderr.startswith("error: could not write") and "Traceback" not in proc.stderr


@pytest.mark.parametrize("content", ['{"not": "a report"}', "just text", ""])
def test_a_file_that_is_not_a_report_exits_6_with_one_line(tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    proc = export(bad)
    assert proc.returncode == ExitCode.BAD_PROFILE
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error: ")
    assert list(tmp_path.iterdir()) == [bad]  # no output claimed


def test_a_report_without_stacks_exits_6(written_report, tmp_path):
    json_path, _ = written_report
    data = json.loads(json_path.read_text())
    report = {key: value for key, value in data.items() if key != "stacks"}
    older = tmp_path / "older.json"
    older.write_text(json.dumps(report))
    proc = export(older)
    assert proc.returncode == ExitCode.BAD_PROFILE
    assert "stacks" in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == [older]


def test_only_pprof_is_a_format(written_report):
    json_path, _ = written_report
    proc = export(json_path, "--format", "svg")
    assert proc.returncode == ExitCode.USAGE
    assert "pprof" in proc.stderr


# --- go tool pprof: the reference reader ------------------------------------------------------

GO = shutil.which("go")
requires_go = pytest.mark.skipif(
    GO is None, reason="go not installed (Debian golang-go; scripts/install-test-tools.sh "
                       "installs it): go tool pprof is the reference reader of pprof files")
# fork_tree: a forked tree recorded by py-spy's chrometrace output (three processes)
ANALYSED = {"lock_contention": "lock_contention.speedscope.json",
            "fork_tree": "fork_tree.chrometrace.json"}


@pytest.fixture(scope="module", params=sorted(ANALYSED))
def analysed_with_pprof(request, tmp_path_factory) -> tuple:
    """`analyze REC --pprof --json -o DIR` on a recorded profile: (the JSON report, the .pb.gz)."""
    name = request.param
    out = tmp_path_factory.mktemp(f"gopprof-{name}")
    proc, _ = invoke_cli("analyze", RECORDED / ANALYSED[name], "--procfs",
                      RECORDED / f"{name}.procfs.json", "--pprof", "--json", "-o", out,
                      check_json=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    json_path = next(p for p in out.glob("*.json") if not p.name.endswith(".speedscope.json"))
    (pb_gz,) = out.glob("*.pb.gz")
    return read_report(json_path), pb_gz


def go_pprof(*args) -> str:
    """`go tool pprof ARGS`: its stdout (stderr says "Main binary filename not available.": the
    frames are symbolized already and there is no binary)."""
    proc = subprocess.run([GO, "tool", "pprof", *map(str, args)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": ""})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def expected_rows(report: Report) -> list[tuple]:
    """The report's stacks as (count, functions leaf first, labels), sorted."""
    stacks = report.stacks
    rows = []
    for row in stacks.samples:
        labels = {key: str(value) for key, value in row_labels(row).items()}
        rows.append((row.count, tuple(stacks.frames[i].function for i in reversed(row.stack)),
                     labels))
    return sorted(rows, key=repr)


_RAW_LOCATION = re.compile(r"^\s*(\d+): 0x[0-9a-f]+ M=\d+ (.+?) (\S+):(\d+) s=\d+(?:\((.*)\))?$")
_RAW_SAMPLE = re.compile(r"^\s*(\d+)\s+(\d+): ([\d ]+)$")
_RAW_LABEL = re.compile(r"(\w+):\[([^\]]*)\]")


@dataclass(frozen=True)
class RawSample:
    values: list[int]
    locations: list[int]
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RawLocation:
    function: str
    file: str
    line: int
    system_name: str | None


@dataclass(frozen=True)
class Raw:
    header: dict[str, str]
    samples: list[RawSample]
    locations: dict[int, RawLocation]


def parse_raw(text: str) -> Raw:
    """`go tool pprof -raw`: the header fields, the samples and the locations it read."""
    header: dict[str, str] = {}
    samples: list[RawSample] = []
    locations: dict[int, RawLocation] = {}
    section = "header"
    for line in text.splitlines():
        if line in ("Samples:", "Locations", "Mappings"):
            section = line.rstrip(":")
        elif section == "header" and ": " in line:
            key, value = line.split(": ", 1)
            header[key] = value
        elif section == "Samples" and (match := _RAW_SAMPLE.match(line)):
            samples.append(RawSample([int(match.group(1)), int(match.group(2))],
                                     [int(x) for x in match.group(3).split()]))
        elif section == "Samples" and _RAW_LABEL.search(line):
            samples[-1].labels.update(_RAW_LABEL.findall(line))
        elif section == "Locations" and (match := _RAW_LOCATION.match(line)):
            locations[int(match.group(1))] = RawLocation(match.group(2), match.group(3),
                                                         int(match.group(4)), match.group(5))
    return Raw(header, samples, locations)


@requires_go
def test_go_pprof_raw_reads_every_sample_with_its_stack_values_and_labels(analysed_with_pprof):
    report, pb_gz = analysed_with_pprof
    raw = parse_raw(go_pprof("-raw", pb_gz))
    period = round(report.stacks.interval_s * 1e9)
    assert raw.header["PeriodType"] == "wall nanoseconds"
    assert int(raw.header["Period"]) == period
    assert raw.header["Comment"] == f"diagnose: {report.verdict.headline}"
    got = sorted(((s.values[0], tuple(raw.locations[i].function for i in s.locations),
                   s.labels) for s in raw.samples), key=repr)
    assert got == expected_rows(report)
    assert all(s.values[1] == s.values[0] * period for s in raw.samples)
    # the frames' files and lines as the report has them; no name left to pprof's C++ heuristics
    frames = {(f.function, f.file, f.line) for f in report.stacks.frames}
    assert {(loc.function, loc.file, loc.line) for loc in raw.locations.values()} == frames
    assert "<module>" in {loc.function for loc in raw.locations.values()}


_TOP_ROW = re.compile(r"^\s*(\d+)\s+[\d.]+%\s+[\d.]+%\s+(\d+)\s+[\d.]+%\s+(.+)$")


@requires_go
def test_go_pprof_top_totals_and_functions_are_the_reports(analysed_with_pprof):
    report, pb_gz = analysed_with_pprof
    text = go_pprof("-top", "-nodefraction=0", "-sample_index=samples", pb_gz)
    total = report.sampling.thread_samples
    assert f"Total samples = {total} " in text
    assert f"Showing nodes accounting for {total}, 100% of {total} total" in text
    assert f"Duration: {report.sampling.duration_s:.2f}s" in text
    flat: dict = {}
    cum: dict = {}
    for count, functions, _ in expected_rows(report):
        flat[functions[0]] = flat.get(functions[0], 0) + count
        for name in set(functions):
            cum[name] = cum.get(name, 0) + count
    rows = {m.group(3): (int(m.group(1)), int(m.group(2)))
            for m in map(_TOP_ROW.match, text.splitlines()) if m}
    assert rows == {name: (flat.get(name, 0), cum[name]) for name in cum}
    assert "<unknown>" not in rows
    # the default view is wall time: every sample stands for one interval
    period = round(report.stacks.interval_s * 1e9)
    assert f"Total samples = {total * period}ns " in go_pprof("-top", "-unit=ns", pb_gz)


_TAG_TOTAL = re.compile(r"^\s*(\w+): Total (\d+)(?:\.0)?$")
_TAG_ROW = re.compile(r"^\s*(\d+)(?:\.0)? \(\s*[\d.]+%\): (.*)$")


@requires_go
def test_go_pprof_tags_and_tagfocus_select_the_reports_threads_and_states(analysed_with_pprof):
    report, pb_gz = analysed_with_pprof
    rows = expected_rows(report)
    tags: dict = {}
    key = None
    for line in go_pprof("-tags", "-sample_index=samples", pb_gz).splitlines():
        if match := _TAG_TOTAL.match(line):
            key = match.group(1)
            tags[key] = {}
        elif key and (match := _TAG_ROW.match(line)):
            tags[key][match.group(2)] = int(match.group(1))
    expected: dict = {}
    for count, _, labels in rows:
        for name, value in labels.items():
            expected.setdefault(name, {})
            expected[name][value] = expected[name].get(value, 0) + count
    assert tags == expected
    # -tagfocus keeps one process's (numeric label) and one state's (string label) samples
    for label in ("pid", "state"):
        value, count = min(expected[label].items())
        text = go_pprof("-top", "-nodefraction=0", "-sample_index=samples",
                        f"-tagfocus={label}={value}", pb_gz)
        total = report.sampling.thread_samples
        assert f"Showing nodes accounting for {count}, " in text and f"of {total} total" in text
