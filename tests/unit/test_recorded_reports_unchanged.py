"""Every recorded profile (fixtures/recorded/, with and without its /proc record and native
samples) keeps its verdict, and every finding its score, severity, sites, predicted gain and
evidence, as recorded in tests/unit/goldens/recorded_reports.json: a change that only makes
the analysis faster must leave them as they were.

A change that means to alter a verdict re-records the goldens, and its diff shows what moved:
    python -m tests.unit.test_recorded_reports_unchanged --write
Without --write the same command compares, as the tests do, and names the reports that moved.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from diagnose.report.model import Report
from diagnose.report.model.codec import encode
from diagnose.run.pipeline import from_file
from tests.conftest import RECORDED, report_of

GOLDENS = Path(__file__).parent / "goldens" / "recorded_reports.json"


def _cases() -> dict[str, tuple[Path, Path | None, Path | None]]:
    cases = {}
    for path in sorted(RECORDED.glob("*.json")):
        if ".native." in path.name or ".procfs." in path.name:
            continue
        stem = path.name.split(".")[0]
        procfs, native = RECORDED / f"{stem}.procfs.json", RECORDED / f"{stem}.native.speedscope.json"
        cases[path.name] = (path, None, None)
        if procfs.exists() or native.exists():
            cases[path.name + "+companions"] = (path, procfs if procfs.exists() else None,
                                                 native if native.exists() else None)
    return cases


def _written(value, keys: tuple[str, ...]) -> dict:
    """`keys` of a part of the report as its JSON has them (None where it leaves one out)."""
    data = encode(value)
    return {k: data.get(k) for k in keys}


def _summary(report: Report) -> dict:
    """What a verdict rests on: the primary and each finding's score, severity, sites, gain and
    evidence; the wait sites with their holders; each thread's role and state counts."""
    summary = {
        "verdict": _written(report.verdict, ("primary", "co_primary", "severity", "confidence",
                                             "headline", "samples")),
        "findings": {f.id: _written(f, ("score", "severity", "sites", "predicted_gain",
                                        "gain_interval", "score_interval", "evidence",
                                        "intervals"))
                     for f in report.findings},
        "not_applicable": sorted(n.id for n in report.not_applicable),
        "waits": encode(report.waits),
        "threads": [_written(t, ("tid", "role", "samples", "states", "state_sources"))
                    for t in report.threads],
    }
    # through JSON, as the report file has it (tuples become lists, numbers plain)
    return json.loads(json.dumps(summary))


def _analyse(case: tuple[Path, Path | None, Path | None], out: Path) -> dict:
    path, procfs, native = case
    outputs = from_file(path, out, None, procfs_path=procfs, native_path=native)
    return _summary(report_of(outputs.json))  # the report file, read back


CASES = _cases()


def test_every_recorded_profile_has_a_golden():
    assert set(json.loads(GOLDENS.read_text())) == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_recorded_report_is_unchanged(name, tmp_path):
    golden = json.loads(GOLDENS.read_text())[name]
    assert _analyse(CASES[name], tmp_path) == golden


def _write(out: Path) -> None:
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        goldens = {name: _analyse(case, Path(tmp) / name) for name, case in CASES.items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(goldens, indent=1, sort_keys=True) + "\n")


def _check() -> int:
    """The cases whose report moved from its golden, named on stderr; 1 when any did."""
    import tempfile
    goldens = json.loads(GOLDENS.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        moved = [name for name, case in CASES.items()
                 if _analyse(case, Path(tmp) / name) != goldens.get(name)]
    for name in moved:
        print(f"moved from its golden: {name}", file=sys.stderr)
    print(f"{len(CASES) - len(moved)} of {len(CASES)} recorded reports as in their goldens",
          file=sys.stderr)
    return 1 if moved else 0


if __name__ == "__main__":  # without --write: compare, as the tests do
    if sys.argv[1:] not in ([], ["--write"]):
        sys.exit(__doc__)
    if sys.argv[1:] == ["--write"]:
        _write(GOLDENS)
    else:
        sys.exit(_check())
