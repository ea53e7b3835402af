"""Recordings of live attaches kept as unit-test fixtures (fixtures/recorded/<case>/): their
machine paths replaced by placeholders when saved (fixtures/record.py's), restored to this
machine's when replayed, so `diagnose analyze` reads the workloads' source lines as the attach
did. A live test that failed leaves its recording (tests/conftest.py); `save` keeps it."""

from __future__ import annotations

import json
import re
import sys
import sysconfig
from pathlib import Path

from diagnose.model.service import Service
from diagnose.report.model import Report
from tests.conftest import RECORDED, REPO, invoke_cli_report

# placeholder -> this machine's path (the order scrubs the longest paths first)
PLACEHOLDERS = {"$SITE_PACKAGES": sysconfig.get_paths()["purelib"], "$REPO": str(REPO),
                "$PYTHON": sys.base_prefix, "$VENV": sys.prefix}
SUFFIXES = (".chrometrace.json", ".procfs.json", ".native.speedscope.json", ".tasks.json",
            ".sampling.json")


def scrub(text: str) -> str:
    for placeholder, path in PLACEHOLDERS.items():
        text = text.replace(json.dumps(path)[1:-1], placeholder)
    return re.sub(r"/tmp/python-build\.[^/\"]+", "$PYTHON_BUILD", text)


def restore(text: str) -> str:
    for placeholder, path in PLACEHOLDERS.items():
        text = text.replace(placeholder, path)
    return text


def save(kept_base: Path, case: str, name: str) -> None:
    """An attach's kept recording (`kept_base` + SUFFIXES, as --keep-raw wrote them) as
    fixtures/recorded/CASE/NAME.*, scrubbed."""
    target = RECORDED / case
    target.mkdir(parents=True, exist_ok=True)
    for suffix in SUFFIXES:
        source = Path(f"{kept_base}{suffix}")
        if source.exists():
            (target / f"{name}{suffix}").write_text(scrub(source.read_text()))
    kept = Path(kept_base)
    for part in kept.parent.glob(f"{kept.name}.*.chrometrace.json"):  # a tree's, one per process
        (target / f"{name}{part.name[len(kept.name):]}").write_text(scrub(part.read_text()))


def _restored(case: str, name: str, into: Path) -> tuple[dict[str, Path], list[Path]]:
    """The recording's files copied into `into` with this machine's paths: its companions by
    suffix, and its profiles (one, or a process tree's one per process)."""
    files: dict[str, Path] = {}
    for suffix in SUFFIXES:
        source = RECORDED / case / f"{name}{suffix}"
        if source.exists():
            files[suffix] = into / source.name
            files[suffix].write_text(restore(source.read_text()))
    # a process tree's recording is one chrometrace per process, NAME.1..., NAME.2...
    profiles = sorted((RECORDED / case).glob(f"{name}.*.chrometrace.json"))
    for profile in profiles:
        (into / profile.name).write_text(restore(profile.read_text()))
    return files, ([files[".chrometrace.json"]] if ".chrometrace.json" in files
                   else [into / profile.name for profile in profiles])


def replay_service(case: str, name: str, into: Path) -> Service:
    """The service model of fixtures/recorded/CASE/NAME.*, built as `diagnose analyze` builds
    it (its checks run too), for tests that ask the analysis itself."""
    from diagnose.collect.procfs import TreeRecord
    from diagnose.collect.run_context import RunContext
    from diagnose.run.pipeline import analyze, read_live_run, read_task_recordings

    files, profiles = _restored(case, name, into)
    run = read_live_run(files[".sampling.json"]).context() if ".sampling.json" in files else RunContext()
    tree = TreeRecord.from_dict(json.loads(files[".procfs.json"].read_text())) if ".procfs.json" in files else None
    tasks = read_task_recordings(files[".tasks.json"]) if ".tasks.json" in files else None
    native = [files[".native.speedscope.json"]] if ".native.speedscope.json" in files else []
    service, _, _, _ = analyze(profiles, tree, run, None, native, live=False, task_recordings=tasks)
    return service


def replay(case: str, name: str, into: Path) -> Report:
    """`diagnose analyze` of fixtures/recorded/CASE/NAME.* with its companions, in-process (a
    recording saved before attach kept its sampling has no .sampling.json: its rate is then
    estimated from the samples)."""
    files, profiles = _restored(case, name, into)
    args: list[object] = list(profiles)
    for flag, suffix in (("--procfs", ".procfs.json"), ("--native-profile", ".native.speedscope.json"),
                         ("--tasks", ".tasks.json"), ("--sampling", ".sampling.json")):
        if suffix in files:
            args += [flag, files[suffix]]
    proc, report = invoke_cli_report("analyze", *args, "--json", "-o", into / "out")
    assert proc.returncode == 0 and report is not None, proc.stderr
    return report


if __name__ == "__main__":  # python -m tests.replay KEPT_BASE CASE NAME
    save(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
