"""From a capture or a recorded file to written outputs: one path for `attach` and `analyze`."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from diagnose.checks.engine import CheckResults, run_checks
from diagnose.classify.categories import Categorizer, load_toml
from diagnose.collect.attach import Capture
from diagnose.collect.procfs import ProcRecord
from diagnose.errors import BadProfile, NoSamples
from diagnose.model.analysis import Analysis, analyze_profile
from diagnose.model.loaders import load_profile
from diagnose.render.html import render_html
from diagnose.render.html_data import page_data
from diagnose.render.json_report import build_report
from diagnose.render.speedscope_out import write_speedscope


@dataclass
class Outputs:
    html: Path
    json: Path
    speedscope: Path
    procfs: Path | None
    report: dict
    partial: bool


def report_basename(pid: int | str, when: float) -> str:
    return f"diagnose-{pid}-{datetime.fromtimestamp(when).strftime('%Y%m%d-%H%M%S')}"


def load_user_rules(path: str | None) -> dict | None:
    return load_toml(Path(path)) if path else None


def analyze(profile_path: Path, proc: ProcRecord | None, meta: dict,
            user_rules: dict | None, native_path: Path | None = None
            ) -> tuple[Analysis, CheckResults, Categorizer]:
    categorizer = Categorizer(user_rules)
    profile = load_profile(profile_path)
    if profile.total_samples == 0:
        raise NoSamples(f"{profile_path}: the profile holds no samples")
    native = load_profile(native_path) if native_path is not None else None
    analysis = analyze_profile(profile, categorizer, proc, meta, native)
    return analysis, run_checks(analysis, user_rules), categorizer


def write_outputs(analysis: Analysis, results: CheckResults, categorizer: Categorizer,
                  source_profile: Path, out_dir: Path, base: str,
                  proc: ProcRecord | None, keep_raw: bool, move_profile: bool,
                  native_path: Path | None = None) -> Outputs:
    out_dir.mkdir(parents=True, exist_ok=True)
    report = build_report(analysis, results)
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    paths = {ext: out_dir / f"{base}{ext}" for ext in (".html", ".json", ".speedscope.json")}
    speedscope = paths[".speedscope.json"]
    if analysis.profile.source != "speedscope":
        write_speedscope(analysis.profile, speedscope, base)
    elif source_profile.resolve() != speedscope.resolve():
        (shutil.move if move_profile else shutil.copyfile)(str(source_profile), str(speedscope))
    paths[".json"].write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    html = render_html(page_data(report, analysis, categorizer, generated))
    paths[".html"].write_text(html, encoding="utf-8")
    procfs_path = None
    if keep_raw and proc is not None:
        procfs_path = out_dir / f"{base}.procfs.json"
        procfs_path.write_text(json.dumps(proc.to_dict()), encoding="utf-8")
    if native_path is not None and native_path.exists():
        if keep_raw:
            shutil.move(str(native_path), str(out_dir / f"{base}.native.speedscope.json"))
        elif move_profile:
            native_path.unlink()
    return Outputs(paths[".html"], paths[".json"], speedscope, procfs_path, report,
                   bool(analysis.meta.get("partial")))


def from_capture(capture: Capture, out_dir: Path, user_rules: dict | None,
                 keep_raw: bool) -> Outputs:
    meta = {"target": capture.target, "sampling": capture.sampling, "partial": capture.partial,
            "notes": capture.notes}
    try:
        analysis, results, categorizer = analyze(capture.profile_path, capture.proc, meta, user_rules,
                                                 capture.native_profile_path)
    except BadProfile:
        if capture.partial:
            raise NoSamples("the target exited before py-spy wrote a usable profile")
        raise
    base = report_basename(capture.target["pid"], capture.started_at)
    return write_outputs(analysis, results, categorizer, capture.profile_path, out_dir, base,
                         capture.proc, keep_raw, move_profile=True,
                         native_path=capture.native_profile_path)


def from_file(path: Path, out_dir: Path, user_rules: dict | None,
              procfs_path: Path | None = None, native_path: Path | None = None) -> Outputs:
    proc = None
    if procfs_path is not None:
        try:
            proc = ProcRecord.from_dict(json.loads(procfs_path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BadProfile(f"{procfs_path}: not a diagnose /proc record ({exc})")
    window = None
    if proc is not None and proc.ended_at:
        window = round(proc.ended_at - proc.started_at, 3)
    meta = {"target": {"pid": proc.pid if proc else None, "python": None, "cmdline": [],
                       "threads": None, "cores": proc.cores if proc else None},
            "sampling": {"duration_s": window, "rate_hz": None, "samples": None, "errors": None,
                         "mode": "offline: " + path.name},
            "partial": bool(proc and proc.target_exited), "notes": []}
    analysis, results, categorizer = analyze(path, proc, meta, user_rules, native_path)
    if window is None:
        ticks = int(analysis.threads["samples"].max()) if len(analysis.threads) else 0
        analysis.meta["sampling"]["duration_s"] = round(ticks * analysis.profile.interval_s, 3) or None
        analysis.meta["sampling"]["rate_hz"] = round(1 / analysis.profile.interval_s) if analysis.profile.interval_s else None
    if proc is None:
        analysis.meta["notes"].append("offline analysis: thread state inferred from the frames "
                                      "alone; no OS counters (run-queue wait, CPU time)")
    stem = path.name.split(".")[0].removeprefix("diagnose-") or "profile"
    base = f"diagnose-{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    return write_outputs(analysis, results, categorizer, path, out_dir, base, proc,
                         keep_raw=False, move_profile=False)
