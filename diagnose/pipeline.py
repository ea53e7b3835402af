"""From a capture or a recorded file to written outputs: one path for `attach` and `analyze`."""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from diagnose import rules_file
from diagnose.checks.engine import CheckResults
from diagnose.checks.service import run_service_checks
from diagnose.classify.categories import Categorizer
from diagnose.collect.attach import Capture
from diagnose.collect.procfs import TreeRecord
from diagnose.errors import BadProfile, NoSamples, OutputFailed
from diagnose.model import source
from diagnose.model.chrometrace import close_exited_threads, regrid, settle_rate
from diagnose.model.loaders import decode_input, load_profile, read_input
from diagnose.model.service import Service, build_service
from diagnose.render.html import render_html
from diagnose.render.html_data import page_data
from diagnose.render.json_report import build_report
from diagnose.render.markdown import render_markdown
from diagnose.render.speedscope_out import write_speedscope


@dataclass
class Outputs:
    html: Path
    json: Path
    speedscope: Path
    procfs: Path | None
    report: dict
    partial: bool
    markdown: Path | None = None  # the ticket summary (`--print md`)


# Every file a report may write, by suffix; the .json is created first, exclusively, to claim
# the name (see `_claim_name`).
OUTPUT_SUFFIXES = (".json", ".html", ".speedscope.json", ".procfs.json", ".native.speedscope.json",
                   ".md", ".pb.gz")


def report_basename(pid: int | str, when: float) -> str:
    """`diagnose-<pid>-<YYYYmmdd-HHMMSS>`; `write_outputs` appends `-2`, `-3`, ... when a report
    of that name exists (two runs against one pid in one second), so none overwrites another."""
    return f"diagnose-{pid}-{datetime.fromtimestamp(when).strftime('%Y%m%d-%H%M%S')}"


def load_user_rules(path: str | None) -> dict | None:
    """The `--rules` file, validated strictly: any unknown table, check id or key, a value of the
    wrong type or a bad regular expression is BadRules (exit 2) naming the line."""
    return rules_file.load(Path(path)) if path else None


def _load_all(paths: list[Path], rate_hz: float | None = None):
    """One profile from one or more recordings (one per named pid), or None without paths.
    `rate_hz`: the rate they were recorded at, when known (a chrometrace file does not say)."""
    if not paths:
        return None
    profile = load_profile(paths[0], rate_hz=rate_hz)
    for extra in paths[1:]:
        profile.absorb(load_profile(extra, rate_hz=rate_hz))
    if len(paths) > 1 and profile.instants == "measured":
        regrid(profile, 1.0 / profile.interval_s)  # every recording's threads on one grid
    return profile


def _settle_instants(profile, tree: TreeRecord | None, meta: dict) -> None:
    """A timestamped recording (model/chrometrace.py) does not mark a thread's exit: the /proc
    record of the same window does; without it, say so. Then, with py-spy's count of the
    samples it took, read the recording at the rate py-spy achieved."""
    if profile.instants != "measured":
        return
    if tree is not None:
        close_exited_threads(profile, tree)
    else:
        meta.setdefault("notes", []).append(
            "the recording does not mark when a thread exits, and there is no /proc record of "
            "the window: a thread that exited mid-window is shown until the window's end (or "
            "until a new thread took over its id)")
    settle_rate(profile, (meta.get("sampling") or {}).get("samples"))


def analyze(profile_paths: list[Path], tree: TreeRecord | None, meta: dict,
            user_rules: dict | None, native_paths: list[Path] = (), live: bool = True
            ) -> tuple[Service, CheckResults, dict, Categorizer]:
    """`live`: the pids in `meta` and the profile are running processes (attach), whose source
    files are read as they see them (through /proc/<pid>/root: a container's own files)."""
    categorizer = Categorizer(user_rules)
    profile = _load_all(profile_paths, (meta.get("sampling") or {}).get("rate_hz"))
    _settle_instants(profile, tree, meta)
    if profile.total_samples == 0:
        raise NoSamples(f"{profile_paths[0]}: the profile holds no samples")
    native = _load_all(list(native_paths))
    target = meta.get("target") or {}
    pids = [*(target.get("pids") or [target.get("pid")]), *profile.pids] if live else []
    with source.reading_from(pids):
        service = build_service(profile, categorizer, tree, meta, native)
        results, per_process = run_service_checks(service, user_rules)
    return service, results, per_process, categorizer


def write_outputs(service: Service, results: CheckResults, per_process: dict,
                  categorizer: Categorizer, source_profiles: list[Path], out_dir: Path, base: str,
                  tree: TreeRecord | None, keep_raw: bool, move_profile: bool,
                  native_paths: list[Path] = ()) -> Outputs:
    """Writes the speedscope profile (the samples, first), the JSON report, the Markdown ticket
    summary, the HTML report and, with `keep_raw`, the /proc record and native samples. Each
    file is written whole or not at all (a temporary file renamed into place); a name already
    taken gets a suffix. A file that cannot be written is OutputFailed (exit 11) naming it; the
    ones written before it are kept, and so are the recordings it came from."""
    def recordings_kept() -> str:
        kept = [str(p) for p in source_profiles if move_profile and p.exists()]
        return f"; the py-spy recording is kept as {', '.join(kept)}" if kept else ""

    analysis = service.combined
    report = build_report(service, results, per_process)
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        prepare_output_dir(out_dir)
        base = _claim_name(out_dir, base)
    except OutputFailed as exc:
        raise OutputFailed(exc.message + recordings_kept()) from None
    paths = {ext: out_dir / f"{base}{ext}" for ext in (".html", ".json", ".speedscope.json", ".md")}
    speedscope = paths[".speedscope.json"]
    source_profile = source_profiles[0]
    written: list[Path] = []
    try:
        if (analysis.profile.source != "speedscope" or len(source_profiles) > 1
                or not source_profile.is_file()):  # a pipe cannot be read twice: re-encode it
            _write_file(speedscope, lambda tmp: write_speedscope(analysis.profile, tmp, base))
            written.append(speedscope)
            if move_profile:
                for index, path in enumerate(source_profiles):
                    if keep_raw and path.name.endswith(".chrometrace.json") and path.exists():
                        # The recording with its measured instants, for `diagnose analyze` later.
                        number = "" if len(source_profiles) == 1 else f".{index + 1}"
                        kept_raw = out_dir / f"{base}{number}.chrometrace.json"
                        _move_file(path, kept_raw)
                        written.append(kept_raw)
                    else:
                        path.unlink(missing_ok=True)
        elif source_profile.resolve() != speedscope.resolve():
            if move_profile:
                _move_file(source_profile, speedscope)
            else:
                _write_file(speedscope, lambda tmp: shutil.copyfile(source_profile, tmp))
            written.append(speedscope)
        report_text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
        _write_file(paths[".json"], lambda tmp: tmp.write_text(report_text, encoding="utf-8"))
        written.append(paths[".json"])
        summary = render_markdown(report, [paths[ext].name for ext in
                                           (".html", ".json", ".speedscope.json")])
        _write_file(paths[".md"], lambda tmp: tmp.write_text(summary, encoding="utf-8"))
        written.append(paths[".md"])
        html = render_html(page_data(report, analysis, categorizer, generated))
        _write_file(paths[".html"], lambda tmp: tmp.write_text(html, encoding="utf-8"))
        written.append(paths[".html"])
        procfs_path = None
        if keep_raw and tree is not None:
            procfs_path = out_dir / f"{base}.procfs.json"
            procfs_text = json.dumps(tree.to_dict())
            _write_file(procfs_path, lambda tmp: tmp.write_text(procfs_text, encoding="utf-8"))
            written.append(procfs_path)
        native_paths = [p for p in native_paths if p.exists()]
        if native_paths:
            if keep_raw:
                target = out_dir / f"{base}.native.speedscope.json"
                if len(native_paths) == 1:
                    _move_file(native_paths[0], target)
                else:
                    natives = _load_all(native_paths)
                    _write_file(target, lambda tmp: write_speedscope(natives, tmp,
                                                                     base + " (native)"))
                written.append(target)
            if move_profile:
                for path in native_paths:
                    path.unlink(missing_ok=True)
    except BaseException as exc:
        if paths[".json"] not in written:  # the empty file that claimed the name
            _remove(paths[".json"])
        if not isinstance(exc, _WriteFailed):
            raise
        failed = exc
        kept = [p.name for p in written]
        raise OutputFailed(
            f"could not write {failed.path}: {failed.reason}"
            + (f"; kept {', '.join(kept)}" if kept else "; no report file was written")
            + recordings_kept()) from None
    return Outputs(paths[".html"], paths[".json"], speedscope, procfs_path, report,
                   bool(analysis.meta.get("partial")), markdown=paths[".md"])


def prepare_output_dir(out_dir: Path, probe: bool = False) -> None:
    """Creates the output directory; OutputFailed (exit 11) when it cannot be created or, with
    `probe`, written to (checked with a file created and removed at once: before sampling, so
    that a read-only directory is said before the window, not after)."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputFailed(f"could not create the output directory {out_dir}: "
                           f"it exists and is not a directory")
    except OSError as exc:
        raise OutputFailed(f"could not create the output directory {out_dir}: {_reason(exc)}")
    if probe:
        test = out_dir / f".diagnose-write-test-{os.getpid()}"
        try:
            os.close(os.open(test, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError as exc:
            raise OutputFailed(f"cannot write to the output directory {out_dir}: {_reason(exc)}")
        _remove(test)


class _WriteFailed(Exception):
    def __init__(self, path: Path, exc: BaseException):
        super().__init__(f"{path}: {exc}")
        self.path, self.reason = path, _reason(exc)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _claim_name(out_dir: Path, base: str) -> str:
    """`base`, or `base-2`, `base-3`, ...: the first name no file of a report uses, claimed by
    creating its .json exclusively, so that two runs at once never pick the same name."""
    for n in range(1, 1000):
        name = base if n == 1 else f"{base}-{n}"
        if any(os.path.lexists(out_dir / f"{name}{ext}") for ext in OUTPUT_SUFFIXES[1:]):
            continue
        claim = out_dir / f"{name}.json"
        try:
            os.close(os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return name
        except FileExistsError:
            continue
        except OSError as exc:
            raise OutputFailed(f"could not write {claim}: {_reason(exc)}; no report file was "
                               f"written")
    raise OutputFailed(f"could not write a report named {base} in {out_dir}: 999 reports of "
                       f"that name exist")


def _write_file(path: Path, produce) -> None:
    """`produce(tmp)` writes the file's content to a temporary file beside `path`, which then
    replaces `path`: a full disk leaves no truncated report behind."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        produce(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        raise _WriteFailed(path, exc)


def _move_file(source_path: Path, path: Path) -> None:
    """Renames `source_path` to `path` (no space needed on the same filesystem), else copies it
    and removes the source only once the copy is whole."""
    try:
        os.replace(source_path, path)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise _WriteFailed(path, exc)
    _write_file(path, lambda tmp: shutil.copyfile(source_path, tmp))
    _remove(source_path)


def from_capture(capture: Capture, out_dir: Path, user_rules: dict | None,
                 keep_raw: bool, load: dict | None = None) -> Outputs:
    """`load`: the load the service was under while sampled, when a sweep or an experiment
    generated it ({"throughput_rps", "concurrency" | "rate"}): `diagnose diff` then compares
    per request."""
    # The window's wall-clock start: pprof's time_nanos, and the span a push files it under.
    sampling = dict(capture.sampling, started_at=round(capture.started_at, 3))
    meta = {"target": capture.target, "sampling": sampling, "partial": capture.partial,
            "notes": capture.notes}
    if load is not None:
        meta["load"] = load
    profiles = [capture.profile_path, *capture.extra_profile_paths]
    natives = ([capture.native_profile_path, *capture.extra_native_paths]
               if capture.native_profile_path is not None else [])
    keep_recordings = False
    try:
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
    except OutputFailed:
        # Its message names the py-spy recordings kept for another try, unless they already
        # moved beside the report; then the temporary directory holds nothing worth keeping.
        keep_recordings = Path(capture.profile_path).exists()
        raise
    finally:
        if not keep_recordings:
            capture.cleanup()  # py-spy's temporary outputs, on every other way out


def from_file(path: Path, out_dir: Path, user_rules: dict | None,
              procfs_path: Path | None = None, native_path: Path | None = None) -> Outputs:
    tree = None
    if procfs_path is not None:
        try:
            record = json.loads(decode_input(read_input(procfs_path, "/proc record"),
                                             procfs_path, "/proc record"))
            tree = TreeRecord.from_dict(record)
        except BadProfile:
            raise
        except RecursionError:
            raise BadProfile(f"{procfs_path}: not a diagnose /proc record (nested too deeply)")
        except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
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
    # The pids of a recording are history (gone, or reused by another process): its source
    # files are read as named, never through /proc/<pid>/root.
    service, results, per_process, categorizer = analyze(
        [path], tree, meta, user_rules, [native_path] if native_path is not None else [],
        live=False)
    analysis = service.combined
    if window is None:
        sampling = analysis.meta["sampling"]
        ticks = int(analysis.threads["samples"].max()) if len(analysis.threads) else 0
        laid_end_to_end = round(ticks * analysis.profile.interval_s, 3) or None
        if analysis.profile.window_s is not None:
            sampling["duration_s"] = round(analysis.profile.window_s, 3)  # the file's own time range
        elif analysis.profile.waits_visible:
            sampling["duration_s"] = laid_end_to_end  # every thread sampled at every tick
        else:
            # Without --idle a thread's samples cover only the time it ran: the window is unknown,
            # at least the busiest thread's samples long.
            sampling["duration_s"] = None
            sampling["duration_at_least_s"] = laid_end_to_end
            analysis.meta["notes"].append(f"the window's length is unknown: the file has no time "
                                          f"stamps and drops waiting samples; at least "
                                          f"{laid_end_to_end or 0:g} s")
        sampling["rate_hz"] = round(1 / analysis.profile.interval_s) if analysis.profile.interval_s else None
    if proc is None:
        analysis.meta["notes"].append("offline analysis: thread state inferred from the frames "
                                      "alone; no OS counters (run-queue wait, CPU time)")
    stem = path.name.split(".")[0].removeprefix("diagnose-")[:80] or "profile"
    base = f"diagnose-{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    return write_outputs(service, results, per_process, categorizer, [path], out_dir, base, tree,
                         keep_raw=False, move_profile=False)
