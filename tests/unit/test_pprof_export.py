"""pprof export: the Profile built from a report's stacks holds the same samples, stacks and
labels as the report, in pprof's conventions (string table, leaf-first locations, 1-based ids)."""

from __future__ import annotations

import gzip
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from diagnose.errors import BadProfile, ExitCode, OutputFailed
from diagnose.export import profile_pb2
from diagnose.export import pprof
from diagnose.export.pprof import NATIVE_PREFIX
from diagnose.report.model import Report, Stacks
from diagnose.run.pipeline import from_file
from tests.conftest import RECORDED
from tests.report_data import as_report


def build_profile(report, for_push=False):
    return pprof.build_profile(as_report(report), for_push)


def pprof_bytes(report, for_push=False):
    return pprof.pprof_bytes(as_report(report), for_push)


def write_pprof(report, path):
    return pprof.write_pprof(as_report(report), path)



def synthetic_report() -> Report:
    frames = [
        {"function": "<module>", "file": "app.py", "line": 10, "native": False},
        {"function": "handle", "file": "app.py", "line": 20, "native": False},
        {"function": "handle", "file": "app.py", "line": 25, "native": False},
        {"function": "matmul", "file": "libtorch.so", "line": 0, "native": True},
        {"function": "Lock.acquire", "file": "threading.py", "line": 99, "native": False},
    ]
    samples = [
        {"stack": [0, 1, 3], "tid": 11, "thread": "worker 1", "pid": 500, "role": "request",
         "state": "native", "category": "model", "count": 7},
        {"stack": [0, 2, 4], "tid": 12, "thread": "worker-2", "pid": None, "role": "request",
         "state": "lock", "category": "sync", "count": 3},
    ]
    return as_report({"schema_version": 1, "sampling": {"duration_s": 0.1},
                      "verdict": {"headline": "The cores are busy with model compute"},
                      "stacks": {"frames": frames, "samples": samples, "interval_s": 0.01}})


def with_stacks(report: Report, **changes) -> Report:
    return replace(report, stacks=replace(report.stacks, **changes))


@dataclass(frozen=True)
class Labels:
    """A sample's labels, by name (pid and tid absent when unknown)."""

    thread: str
    role: str
    state: str
    category: str
    pid: int | None = None
    tid: int | None = None


@dataclass(frozen=True)
class Sample:
    functions: list[str]  # leaf first
    values: list[int]
    labels: Labels


def decoded_samples(profile: profile_pb2.Profile) -> list[Sample]:
    """Each sample as plain values: function names leaf first, values, labels by name."""
    strings = profile.string_table
    functions = {f.id: f for f in profile.function}
    locations = {loc.id: loc for loc in profile.location}
    rows = []
    for sample in profile.sample:
        names = [strings[functions[locations[lid].line[0].function_id].name]
                 for lid in sample.location_id]
        labels = {}
        for label in sample.label:
            key = strings[label.key]
            labels[key] = label.num if key in ("pid", "tid") else strings[label.str]
        rows.append(Sample(names, list(sample.value), Labels(**labels)))
    return rows


def report_rows(report: Report) -> list[Sample]:
    """The same view of the report's stacks table, for comparison."""
    stacks = report.stacks
    assert stacks.interval_s is not None
    period = round(stacks.interval_s * 1e9)
    return [Sample([stacks.frames[i].function for i in reversed(row.stack)],
                   [row.count, row.count * period],
                   Labels(row.thread, row.role, row.state, row.category, row.pid, row.tid))
            for row in stacks.samples]


def test_samples_stacks_and_labels_equal_the_reports_rows():
    report = synthetic_report()
    assert decoded_samples(build_profile(report)) == report_rows(report)


def test_stack_is_leaf_first_and_wall_time_is_count_times_interval():
    first = decoded_samples(build_profile(synthetic_report()))[0]
    assert first.functions == ["matmul", "handle", "<module>"]
    assert first.values == [7, 70_000_000]


def test_unknown_pid_gets_no_pid_label():
    labels = decoded_samples(build_profile(synthetic_report()))[1].labels
    assert labels.pid is None and labels.tid == 12 and labels.thread == "worker-2"


def test_label_names_have_no_spaces_and_thread_names_keep_theirs():
    profile = build_profile(synthetic_report())
    keys = {profile.string_table[label.key] for sample in profile.sample for label in sample.label}
    assert keys == {"thread", "role", "state", "category", "pid", "tid"}
    assert decoded_samples(profile)[0].labels.thread == "worker 1"


def test_sample_types_period_and_duration_follow_pprof_conventions():
    profile = build_profile(synthetic_report())
    strings = profile.string_table
    assert strings[0] == ""
    assert [(strings[t.type], strings[t.unit]) for t in profile.sample_type] == [
        ("samples", "count"), ("wall", "nanoseconds")]
    assert (strings[profile.period_type.type], strings[profile.period_type.unit]) == (
        "wall", "nanoseconds")
    assert profile.period == 10_000_000
    assert profile.duration_nanos == 100_000_000
    assert profile.time_nanos == 0  # the report has no wall-clock start
    base = synthetic_report()
    # a live capture's window start
    live = replace(base, sampling=replace(base.sampling, started_at=1_764_550_000.25))
    assert abs(build_profile(live).time_nanos - 1_764_550_000_250_000_000) < 1_000  # float s
    assert [strings[c] for c in profile.comment] == [
        "diagnose: The cores are busy with model compute"]


def test_strings_functions_and_locations_are_deduplicated():
    profile = build_profile(synthetic_report())
    assert len(set(profile.string_table)) == len(profile.string_table)
    # "handle" at lines 20 and 25: one Function, two Locations
    handle = [f for f in profile.function if profile.string_table[f.name] == "handle"]
    assert len(handle) == 1
    lines = sorted(loc.line[0].line for loc in profile.location
                   if loc.line[0].function_id == handle[0].id)
    assert lines == [20, 25]
    assert sorted(f.id for f in profile.function) == list(range(1, len(profile.function) + 1))
    assert sorted(loc.id for loc in profile.location) == list(range(1, 6))


def test_native_frames_are_marked_in_system_name():
    profile = build_profile(synthetic_report())
    system_names = {profile.string_table[f.name]: profile.string_table[f.system_name]
                    for f in profile.function}
    assert system_names["matmul"] == NATIVE_PREFIX + "matmul"
    assert system_names["handle"] == ""  # a Python frame has no system name


def test_python_names_with_angle_brackets_are_not_taken_for_demangled_cplusplus():
    """pprof simplifies a name whose system_name equals it and that looks like demangled C++ (has
    <> or [] and no ".<"): `<module>` became "" and showed as `<unknown>` in `go tool pprof`. An
    empty system_name says the name is final; a native frame's differs from its name too."""
    report = synthetic_report()
    profile = build_profile(report)
    strings = profile.string_table
    for function in profile.function:
        assert strings[function.system_name] != strings[function.name]
    assert "<module>" in {strings[f.name] for f in profile.function}


def test_report_without_stacks_is_refused_as_predating_stack_export():
    report = replace(synthetic_report(), stacks=Stacks())
    with pytest.raises(BadProfile, match="predates stack export") as info:
        build_profile(report)
    assert info.value.exit_code == ExitCode.BAD_PROFILE


@pytest.mark.parametrize("interval", [None, 0, -0.01, "0.01"])
def test_stacks_without_a_usable_interval_are_refused(interval):
    report = with_stacks(synthetic_report(), interval_s=interval)
    with pytest.raises(BadProfile, match="interval"):
        build_profile(report)


def test_sample_pointing_past_the_frame_table_is_refused():
    report = synthetic_report()
    first, *rest = report.stacks.samples
    report = with_stacks(report, samples=(replace(first, stack=(0, 99)), *rest))
    with pytest.raises(BadProfile, match="malformed sample"):
        build_profile(report)


def test_pprof_bytes_are_gzipped_and_the_same_for_the_same_report():
    data = pprof_bytes(synthetic_report())
    assert data[:2] == b"\x1f\x8b"
    assert profile_pb2.Profile.FromString(gzip.decompress(data)) == build_profile(
        synthetic_report())
    assert pprof_bytes(synthetic_report()) == data


def test_write_pprof_writes_beside_the_json_under_the_report_base(tmp_path):
    json_path = tmp_path / "diagnose-123-20250101-000000.json"
    target = write_pprof(synthetic_report(), json_path.with_suffix("").with_suffix(".pb.gz"))
    assert target == tmp_path / "diagnose-123-20250101-000000.pb.gz"
    assert target.read_bytes() == pprof_bytes(synthetic_report())
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temporary file left


def test_write_pprof_into_a_missing_directory_is_output_failed(tmp_path):
    with pytest.raises(OutputFailed, match="could not write") as info:
        write_pprof(synthetic_report(), tmp_path / "missing" / "out.pb.gz")
    assert info.value.exit_code == ExitCode.OUTPUT_FAILED


def test_write_pprof_of_a_report_without_stacks_writes_nothing(tmp_path):
    report = replace(synthetic_report(), stacks=Stacks())
    with pytest.raises(BadProfile):
        write_pprof(report, tmp_path / "out.pb.gz")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def recorded_report(tmp_path_factory) -> Report:
    out = tmp_path_factory.mktemp("recorded")
    outputs = from_file(RECORDED / "lock_contention.speedscope.json", out, None,
                        procfs_path=RECORDED / "lock_contention.procfs.json")
    return outputs.report


def test_recorded_report_exports_every_sample_with_its_stack_and_labels(recorded_report):
    profile = build_profile(recorded_report)
    assert decoded_samples(profile) == report_rows(recorded_report)
    total = sum(row.count for row in recorded_report.stacks.samples)
    assert total == recorded_report.sampling.thread_samples
    assert sum(s.value[0] for s in profile.sample) == total
    assert sum(s.value[1] for s in profile.sample) == total * profile.period


def test_recorded_report_labels_name_the_request_threads(recorded_report):
    threads = {row.labels.thread: row.labels.role
               for row in decoded_samples(build_profile(recorded_report))}
    assert threads["MainThread"] == "other"
    assert {name for name, role in threads.items() if role == "request"} == {
        f"request-{n}" for n in range(6)}


def test_recorded_native_frames_are_marked(tmp_path):
    outputs = from_file(RECORDED / "compute_bound.native.speedscope.json", tmp_path, None)
    frames = outputs.report.stacks.frames
    profile = build_profile(outputs.report)
    strings = profile.string_table
    marked = {(strings[f.name], strings[f.filename]) for f in profile.function
              if strings[f.system_name].startswith(NATIVE_PREFIX)}
    native = {(f.function, f.file) for f in frames if f.native}
    assert native and marked == native


def test_regenerated_code_matches_the_proto_beside_it():
    proto = Path(profile_pb2.__file__).with_name("profile.proto").read_text()
    assert "package perftools.profiles;" in proto
    assert profile_pb2.DESCRIPTOR.package == "perftools.profiles"
    for message in ("Profile", "Sample", "Label", "Location", "Function", "Mapping"):
        assert f"message {message} {{" in proto
        assert message in profile_pb2.DESCRIPTOR.message_types_by_name
