"""From a capture or a recorded file to written outputs: one path for `attach` and `analyze`."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from diagnose.checks.engine import CheckResults
from diagnose.checks.service import run_service_checks
from diagnose.classify.categories import Categorizer, load_toml
from diagnose.collect.attach import Capture
from diagnose.collect.procfs import TreeRecord
from diagnose.errors import BadProfile, NoSamples
from diagnose.model.loaders import load_profile
from diagnose.model.service import Service, build_service
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


def _load_all(paths: list[Path]):
    """One profile from one or more recordings (one per named pid), or None without paths."""
    if not paths:
        return None
    profile = load_profile(paths[0])
    for extra in paths[1:]:
        profile.absorb(load_profile(extra))
    return profile


def analyze(profile_paths: list[Path], tree: TreeRecord | None, meta: dict,
            user_rules: dict | None, native_paths: list[Path] = ()
            ) -> tuple[Service, CheckResults, dict, Categorizer]:
    categorizer = Categorizer(user_rules)
    profile = _load_all(profile_paths)
    if profile.total_samples == 0:
        raise NoSamples(f"{profile_paths[0]}: the profile holds no samples")
    native = _load_all(list(native_paths))
    service = build_service(profile, categorizer, tree, meta, native)
    results, per_process = run_service_checks(service, user_rules)
    return service, results, per_process, categorizer


def write_outputs(service: Service, results: CheckResults, per_process: dict,
                  categorizer: Categorizer, source_profiles: list[Path], out_dir: Path, base: str,
                  tree: TreeRecord | None, keep_raw: bool, move_profile: bool,
                  native_paths: list[Path] = ()) -> Outputs:
    out_dir.mkdir(parents=True, exist_ok=True)
    analysis = service.combined
    report = build_report(service, results, per_process)
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    paths = {ext: out_dir / f"{base}{ext}" for ext in (".html", ".json", ".speedscope.json")}
    speedscope = paths[".speedscope.json"]
    source_profile = source_profiles[0]
    if analysis.profile.source != "speedscope" or len(source_profiles) > 1:
        write_speedscope(analysis.profile, speedscope, base)
        if move_profile:
            for path in source_profiles:
                path.unlink(missing_ok=True)
    elif source_profile.resolve() != speedscope.resolve():
        (shutil.move if move_profile else shutil.copyfile)(str(source_profile), str(speedscope))
    paths[".json"].write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    html = render_html(page_data(report, analysis, categorizer, generated))
    paths[".html"].write_text(html, encoding="utf-8")
    procfs_path = None
    if keep_raw and tree is not None:
        procfs_path = out_dir / f"{base}.procfs.json"
        procfs_path.write_text(json.dumps(tree.to_dict()), encoding="utf-8")
    native_paths = [p for p in native_paths if p.exists()]
    if native_paths:
        if keep_raw:
            target = out_dir / f"{base}.native.speedscope.json"
            if len(native_paths) == 1:
                shutil.move(str(native_paths[0]), str(target))
            else:
                write_speedscope(_load_all(native_paths), target, base + " (native)")
        if move_profile:
            for path in native_paths:
                path.unlink(missing_ok=True)
    return Outputs(paths[".html"], paths[".json"], speedscope, procfs_path, report,
                   bool(analysis.meta.get("partial")))


def from_capture(capture: Capture, out_dir: Path, user_rules: dict | None,
                 keep_raw: bool) -> Outputs:
    meta = {"target": capture.target, "sampling": capture.sampling, "partial": capture.partial,
            "notes": capture.notes}
    profiles = [capture.profile_path, *capture.extra_profile_paths]
    natives = ([capture.native_profile_path, *capture.extra_native_paths]
               if capture.native_profile_path is not None else [])
    try:
        service, results, per_process, categorizer = analyze(profiles, capture.tree, meta,
                                                             user_rules, natives)
    except BadProfile:
        if capture.partial:
            raise NoSamples("the target exited before py-spy wrote a usable profile")
        raise
    base = report_basename(capture.target["pid"], capture.started_at)
    return write_outputs(service, results, per_process, categorizer, profiles, out_dir, base,
                         capture.tree, keep_raw, move_profile=True, native_paths=natives)


def from_file(path: Path, out_dir: Path, user_rules: dict | None,
              procfs_path: Path | None = None, native_path: Path | None = None) -> Outputs:
    tree = None
    if procfs_path is not None:
        try:
            tree = TreeRecord.from_dict(json.loads(procfs_path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BadProfile(f"{procfs_path}: not a diagnose /proc record ({exc})")
    proc = tree.root_record if tree is not None and tree.roots else None
    window = None
    if proc is not None and proc.ended_at:
        window = round(proc.ended_at - proc.started_at, 3)
    meta = {"target": {"pid": proc.pid if proc else None, "python": None,
                       "cmdline": tree.cmdlines.get(proc.pid, []) if proc else [],
                       "threads": None, "cores": proc.cores if proc else None},
            "sampling": {"duration_s": window, "rate_hz": None, "samples": None, "errors": None,
                         "mode": "offline: " + path.name},
            "partial": bool(proc and proc.target_exited), "notes": []}
    service, results, per_process, categorizer = analyze(
        [path], tree, meta, user_rules, [native_path] if native_path is not None else [])
    analysis = service.combined
    if window is None:
        ticks = int(analysis.threads["samples"].max()) if len(analysis.threads) else 0
        analysis.meta["sampling"]["duration_s"] = round(ticks * analysis.profile.interval_s, 3) or None
        analysis.meta["sampling"]["rate_hz"] = round(1 / analysis.profile.interval_s) if analysis.profile.interval_s else None
    if proc is None:
        analysis.meta["notes"].append("offline analysis: thread state inferred from the frames "
                                      "alone; no OS counters (run-queue wait, CPU time)")
    stem = path.name.split(".")[0].removeprefix("diagnose-") or "profile"
    base = f"diagnose-{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    return write_outputs(service, results, per_process, categorizer, [path], out_dir, base, tree,
                         keep_raw=False, move_profile=False)
