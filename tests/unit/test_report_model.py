"""The frozen report model: the JSON a recorded profile's report writes reads back into the
model and out again unchanged (values equal, no key renamed), the previous schema version
reads, and what is not a report is BadProfile naming what is missing."""

from __future__ import annotations

import json

import pytest

from diagnose.errors import BadProfile, ExitCode
from diagnose.report.model import SCHEMA_VERSION, Report
from diagnose.report.model.codec import encode
from diagnose.run.pipeline import from_file
from diagnose.report.reader import read_report
from tests.conftest import RECORDED, REPO, report_of
from tests.report_data import json_edited

NAMES = ["lock_contention", "compute_bound", "fork_tree"]


def _recording(name: str):
    path = RECORDED / f"{name}.speedscope.json"
    return path if path.exists() else RECORDED / f"{name}.chrometrace.json"


@pytest.fixture(scope="module", params=NAMES)
def written(request, tmp_path_factory):
    name = request.param
    procfs = RECORDED / f"{name}.procfs.json"
    native = RECORDED / f"{name}.native.speedscope.json"
    return from_file(_recording(name), tmp_path_factory.mktemp(name), None,
                     procfs if procfs.exists() else None, native if native.exists() else None)


def test_the_written_json_reads_back_into_the_same_report(written):
    data = json.loads(written.json.read_text(encoding="utf-8"))
    assert next(iter(data.items())) == ("schema_version", SCHEMA_VERSION)
    assert Report.from_json(data) == written.report
    assert Report.from_json(data).to_json() == data


def test_a_report_of_the_previous_version_reads_and_writes_the_same_values(written, tmp_path):
    data = json.loads(written.json.read_text(encoding="utf-8"))
    old = dict(data, schema_version=1)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old), encoding="utf-8")
    assert read_report(path).to_json() == data


def test_evidence_values_carry_their_label_and_unit(written):
    for finding in written.report.findings:
        for value in finding.evidence:
            assert value.label and "_" not in value.label and value.unit


def test_a_report_missing_a_part_is_bad_profile_naming_it(written, tmp_path):
    data = json.loads(written.json.read_text(encoding="utf-8"))
    data = json_edited(json_edited(data, ("findings", 0, "id")), ("threads",))
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(BadProfile, match="without threads") as caught:
        read_report(path)
    assert caught.value.exit_code == ExitCode.BAD_PROFILE
    data = json_edited(json_edited(data, ("threads",), []), ("stacks", "samples", 0, "count"),
                       "many")
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(BadProfile, match=r"stacks\.samples\[0\]\.count"):
        read_report(path)


# -- every recorded profile's verdict and findings, as written before the model ------------------

# Recorded with the dict-building report (schema 1) of every fixtures/recorded/ profile, analysed
# as `diagnose analyze FILE [--procfs] [--native-profile]`: the verdict and each finding's score,
# severity, summary, evidence, sites, advice and predicted gain. A finding a later check adds is
# not in it and not compared; one of these that moves is a change of behaviour.
GOLDEN = json.loads((REPO / "tests" / "goldens" / "recorded_reports.json").read_text(
    encoding="utf-8"))
FINDING_KEYS = ("id", "score", "severity", "summary", "evidence", "sites", "advice",
                "predicted_gain")


@pytest.mark.parametrize("recording", sorted(GOLDEN))
def test_a_recorded_profile_gives_the_verdict_and_findings_it_gave_before_the_model(
        recording, tmp_path):
    name = recording.split(".")[0]
    procfs = RECORDED / f"{name}.procfs.json"
    native = RECORDED / f"{name}.native.speedscope.json"
    outputs = from_file(RECORDED / recording, tmp_path, None,
                        procfs if procfs.exists() else None, native if native.exists() else None)
    report = report_of(outputs.json)  # as written
    golden = GOLDEN[recording]
    assert encode(report.verdict) == golden["verdict"]
    now = {f.id: {k: v for k, v in encode(f).items() if k in FINDING_KEYS} for f in report.findings}
    for finding in golden["findings"]:
        assert now.get(finding["id"]) == finding
