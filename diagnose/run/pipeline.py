"""From a capture or a recorded file to written outputs: one path for `attach` and `analyze`."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from diagnose.classify import rules_file
from diagnose.checks.engine import CheckResults
from diagnose.checks.service_verdict import run_service_checks
from diagnose.checks.settings import schema as check_schema
from diagnose.classify.categories import Categorizer
from diagnose.collect.procfs import TreeRecord
from diagnose.errors import BadProfile, NoSamples, OutputFailed
from diagnose.heap import tune_for_analysis
from diagnose.samples import source
from diagnose.collect.task_recording import TaskRecording
from diagnose.readers.chrometrace import (
    close_exited_threads, hold_through_torn_last_reads, name_by_kernel_ids, regrid, settle_rate)
from diagnose.readers.loaders import decode_input, load_profile, read_input
from diagnose.model.analysis import Analysis
from diagnose.samples.profile import Profile
from diagnose.collect.run_context import LiveRun, LiveSampling, RecordedSampling, RunContext
from diagnose.model.service import Service, build_service
from diagnose.outputs.files import (WriteFailed, claim_name, move_file, prepare_output_dir,
                                    remove_quietly, write_atomically, write_text)
from diagnose.render.html import template_environment
from diagnose.render.page_tables import with_page
from diagnose.render.report_files import page_html, summary_markdown
from diagnose.render import json_text
from diagnose.run.gc_pause import collector_paused
from diagnose.run.build_report import build_report
from diagnose.report.model import Load, Report, Target
from diagnose.report.redact import redact_cmdline
from diagnose.report.model.codec import NotAReport, decode, encode
from diagnose.render.speedscope_out import write_speedscope

if TYPE_CHECKING:  # the capture machinery (py-spy, asyncio task reading) is attach's alone
    from diagnose.collect.capture import Capture


@dataclass
class Outputs:
    html: Path
    json: Path
    speedscope: Path
    procfs: Path | None
    report: Report
    partial: bool
    markdown: Path | None = None  # the ticket summary (`--print md`)


# Every file a report may write, by suffix; the .json is created first, exclusively, to claim
# the name (see outputs.files.claim_name).
OUTPUT_SUFFIXES = (".json", ".html", ".speedscope.json", ".procfs.json", ".native.speedscope.json",
                   ".md", ".pb.gz", ".tasks.json", ".sampling.json")


def report_basename(pid: int | str, when: float) -> str:
    """`diagnose-<pid>-<YYYYmmdd-HHMMSS>`; `write_outputs` appends `-2`, `-3`, ... when a report
    of that name exists (two runs against one pid in one second), so none overwrites another."""
    return f"diagnose-{pid}-{datetime.fromtimestamp(when).strftime('%Y%m%d-%H%M%S')}"


def load_user_rules(path: str | None) -> dict | None:
    """The `--rules` file, validated strictly: any unknown table, check id or key, a value of the
    wrong type or a bad regular expression is BadRules (exit 2) naming the line."""
    return rules_file.load(Path(path), checks=check_schema()) if path else None


def prepare_page() -> None:
    """Compiles the report page's template now (a tenth of a second), so that the render after
    the window finds it made; what fails here is said again by that render, in its place."""
    try:
        template_environment().get_template("report.html.j2")
    except Exception:
        pass


def _load_all(paths: list[Path], rate_hz: float | None = None) -> Profile:
    """One profile from one or more recordings (one per named pid).
    `rate_hz`: the rate they were recorded at, when known (a chrometrace file does not say)."""
    profile = load_profile(paths[0], rate_hz=rate_hz)
    for extra in paths[1:]:
        profile.absorb(load_profile(extra, rate_hz=rate_hz))
    if len(paths) > 1 and profile.instants == "measured":
        regrid(profile, 1.0 / profile.interval_s)  # every recording's threads on one grid
    return profile


def _settle_instants(profile: Profile, tree: TreeRecord | None, run: RunContext) -> RunContext:
    """A timestamped recording (readers/chrometrace.py) does not mark a thread's exit: the /proc
    record of the same window does; without it, say so (the context returned has the note).
    Then, with py-spy's count of the samples it took, read the recording at the rate py-spy
    achieved."""
    if profile.instants != "measured":
        return run
    if tree is not None:
        name_by_kernel_ids(profile, {pid: record.pthread_tids for pid, record in tree.records.items()
                                     if record.pthread_tids})
        close_exited_threads(profile, tree)
        hold_through_torn_last_reads(profile, tree)
    else:
        run = run.with_note(
            "the recording does not mark when a thread exits, and there is no /proc record of "
            "the window: a thread that exited mid-window is shown until the window's end (or "
            "until a new thread took over its id)")
    settle_rate(profile, run.sampling.samples)
    return run


def analyze(profile_paths: list[Path], tree: TreeRecord | None, run: RunContext,
            user_rules: dict | None, native_paths: Sequence[Path] = (), live: bool = True,
            task_recordings: Mapping[int, TaskRecording] | None = None,
            ) -> tuple[Service, CheckResults, dict, Categorizer]:
    """`live`: the pids in `run` and the profile are running processes (attach), whose source
    files are read as they see them (through /proc/<pid>/root: a container's own files).
    `task_recordings`: each process's asyncio tasks read during the window (attach, or the
    .tasks.json a replay names).
    The analyses carry `run` with the notes the reading added (`service.combined.run`)."""
    tune_for_analysis()  # millions of samples: freed arrays reused, not faulted in again
    with collector_paused():
        categorizer = Categorizer(user_rules)
        profile = _load_all(profile_paths, run.sampling.rate_hz)
        run = _settle_instants(profile, tree, run)
        if profile.total_samples == 0:
            raise NoSamples(f"{profile_paths[0]}: the profile holds no samples")
        native = _load_all(list(native_paths)) if native_paths else None
        target = run.target
        pids = [*(target.pids or [target.pid]), *profile.pids] if live else []
        with source.reading_from(pids):
            service = build_service(profile, categorizer, tree, run, native, task_recordings)
            results, per_process = run_service_checks(service, user_rules)
    return service, results, per_process, categorizer


def write_outputs(service: Service, results: CheckResults, per_process: dict,
                  categorizer: Categorizer, source_profiles: list[Path], out_dir: Path, base: str,
                  tree: TreeRecord | None, keep_raw: bool, move_profile: bool,
                  native_paths: Sequence[Path] = (), run: RunContext | None = None,
                  kept_run: RunContext | None = None) -> Outputs:
    """Writes the speedscope profile (the samples, first), the JSON report, the Markdown ticket
    summary, the HTML report and, with `keep_raw`, the /proc record, native samples and
    `kept_run` (the live context the analysis started from, .sampling.json). Each
    file is written whole or not at all (a temporary file renamed into place); a name already
    taken gets a suffix. A file that cannot be written is OutputFailed (exit 11) naming it; the
    ones written before it are kept, and so are the recordings it came from.
    `run`: the run as the report states it, finished (an offline window's length, the notes
    learnt after the analysis); by default the one the analysis was made with."""
    with collector_paused():
        return _write_outputs(service, results, per_process, categorizer, source_profiles,
                              out_dir, base, tree, keep_raw, move_profile, native_paths,
                              run if run is not None else service.combined.run, kept_run)


def _write_outputs(service: Service, results: CheckResults, per_process: dict,
                   categorizer: Categorizer, source_profiles: list[Path], out_dir: Path, base: str,
                   tree: TreeRecord | None, keep_raw: bool, move_profile: bool,
                   native_paths: Sequence[Path], run: RunContext,
                   kept_run: RunContext | None) -> Outputs:
    def recordings_kept() -> str:
        kept = [str(p) for p in source_profiles if move_profile and p.exists()]
        return f"; the py-spy recording is kept as {', '.join(kept)}" if kept else ""

    analysis = service.combined
    report = with_page(build_report(service, results, per_process, run), analysis, categorizer)
    try:
        prepare_output_dir(out_dir)
        base = claim_name(out_dir, base, OUTPUT_SUFFIXES)
    except OutputFailed as exc:
        raise OutputFailed(exc.message + recordings_kept()) from None
    paths = {ext: out_dir / f"{base}{ext}" for ext in (".html", ".json", ".speedscope.json", ".md")}
    speedscope = paths[".speedscope.json"]
    source_profile = source_profiles[0]
    written: list[Path] = []
    try:
        if (analysis.profile.source != "speedscope" or len(source_profiles) > 1
                or not source_profile.is_file()):  # a pipe cannot be read twice: re-encode it
            write_atomically(speedscope, lambda tmp: write_speedscope(analysis.profile, tmp, base))
            written.append(speedscope)
            if move_profile:
                for index, path in enumerate(source_profiles):
                    if keep_raw and path.name.endswith(".chrometrace.json") and path.exists():
                        # The recording with its measured instants, for `diagnose analyze` later.
                        number = "" if len(source_profiles) == 1 else f".{index + 1}"
                        kept_raw = out_dir / f"{base}{number}.chrometrace.json"
                        move_file(path, kept_raw)
                        written.append(kept_raw)
                    else:
                        path.unlink(missing_ok=True)
        elif source_profile.resolve() != speedscope.resolve():
            if move_profile:
                move_file(source_profile, speedscope)
            else:
                write_atomically(speedscope, lambda tmp: shutil.copyfile(source_profile, tmp))
            written.append(speedscope)
        report_data = report.to_json()  # the .json file and the page's data: encoded once
        report_text = json_text.report_text(report_data)
        write_text(paths[".json"], report_text)
        written.append(paths[".json"])
        summary = summary_markdown(report, base)
        write_text(paths[".md"], summary)
        written.append(paths[".md"])
        html = page_html(report, report_data)
        del report_data
        write_text(paths[".html"], html)
        written.append(paths[".html"])
        procfs_path = None
        if keep_raw and tree is not None:
            procfs_path = out_dir / f"{base}.procfs.json"
            procfs_text = json.dumps(tree.to_dict())
            write_text(procfs_path, procfs_text)
            written.append(procfs_path)
        recordings = [view.analysis.tasks for view in service.processes
                      if view.analysis.tasks is not None]
        if keep_raw and recordings:
            # Every read of the asyncio tasks, as collected (the report keeps their summary).
            tasks_path = out_dir / f"{base}.tasks.json"
            write_text(tasks_path, json.dumps([dataclasses.asdict(r) for r in recordings]))
            written.append(tasks_path)
        live_run = LiveRun.of(kept_run) if keep_raw and kept_run is not None else None
        if live_run is not None:
            # The rate, py-spy's counts and the plan: a replay estimating them can judge the
            # same recording otherwise (`analyze --sampling`).
            sampling_path = out_dir / f"{base}.sampling.json"
            write_text(sampling_path, json.dumps(encode(live_run)))
            written.append(sampling_path)
        native_paths = [p for p in native_paths if p.exists()]
        if native_paths:
            if keep_raw:
                target = out_dir / f"{base}.native.speedscope.json"
                if len(native_paths) == 1:
                    move_file(native_paths[0], target)
                else:
                    natives = _load_all(native_paths)
                    write_atomically(target, lambda tmp: write_speedscope(natives, tmp,
                                                                     base + " (native)"))
                written.append(target)
            if move_profile:
                for path in native_paths:
                    path.unlink(missing_ok=True)
    except BaseException as exc:
        if paths[".json"] not in written:  # the empty file that claimed the name
            remove_quietly(paths[".json"])
        if not isinstance(exc, WriteFailed):
            raise
        failed = exc
        kept = [p.name for p in written]
        raise OutputFailed(
            f"could not write {failed.path}: {failed.reason}"
            + (f"; kept {', '.join(kept)}" if kept else "; no report file was written")
            + recordings_kept()) from None
    return Outputs(paths[".html"], paths[".json"], speedscope, procfs_path, report,
                   run.partial, markdown=paths[".md"])


def from_capture(capture: Capture, out_dir: Path, user_rules: dict | None,
                 keep_raw: bool, load: Load | None = None) -> Outputs:
    """`load`: the load the service was under while sampled, when a sweep or an experiment
    generated it: `diagnose diff` then compares per request."""
    run = RunContext(target=capture.target, argv=capture.argv,
                     sampling=LiveSampling(capture.sampling, round(capture.started_at, 3)),
                     partial=capture.partial, notes=tuple(capture.notes), load=load)
    profiles = [capture.profile_path, *capture.extra_profile_paths]
    natives = ([capture.native_profile_path, *capture.extra_native_paths]
               if capture.native_profile_path is not None else [])
    keep_recordings = False
    try:
        try:
            service, results, per_process, categorizer = analyze(
                profiles, capture.tree, run, user_rules, natives,
                task_recordings=capture.task_recordings)
        except BadProfile:
            if capture.partial:
                raise NoSamples("the target exited before py-spy wrote a usable profile")
            raise
        base = report_basename(capture.proc.pid, capture.started_at)
        return write_outputs(service, results, per_process, categorizer, profiles, out_dir, base,
                             capture.tree, keep_raw, move_profile=True, native_paths=natives,
                             kept_run=run)
    except OutputFailed:
        # Its message names the py-spy recordings kept for another try, unless they already
        # moved beside the report; then the temporary directory holds nothing worth keeping.
        keep_recordings = Path(capture.profile_path).exists()
        raise
    finally:
        if not keep_recordings:
            capture.cleanup()  # py-spy's temporary outputs, on every other way out


def from_file(paths: Path | list[Path], out_dir: Path, user_rules: dict | None,
              procfs_path: Path | None = None, native_path: Path | None = None,
              tasks_path: Path | None = None, sampling_path: Path | None = None) -> Outputs:
    """`paths`: one recording, or the recordings of one window read as one service (`attach
    --keep-raw` of a process tree keeps one recording per process). `tasks_path`: the asyncio
    task reads `attach --keep-raw` kept (.tasks.json); `sampling_path`: the live run's context
    it kept (.sampling.json), analyzed with in place of what the files alone tell."""
    with collector_paused():  # from the reading to the last output, not only within each
        return _from_file(paths, out_dir, user_rules, procfs_path, native_path, tasks_path,
                          sampling_path)


def read_task_recordings(path: Path) -> dict[int, TaskRecording]:
    """The .tasks.json `attach --keep-raw` writes, per process; BadProfile when it is not one."""
    what = "diagnose asyncio task record"
    text = decode_input(read_input(path, "asyncio task record"), path, "asyncio task record")
    with _read_as(path, what):
        data = json.loads(text)
        if not isinstance(data, list):
            raise BadProfile(f"{path}: not a {what} (a list of recordings)")
        recordings = [decode(TaskRecording, item, f"{path.name}[{i}]") for i, item in enumerate(data)]
    return {r.pid: r for r in recordings}


def read_live_run(path: Path) -> LiveRun:
    """The .sampling.json `attach --keep-raw` writes; BadProfile when it is not one."""
    what = "diagnose sampling record"
    text = decode_input(read_input(path, what), path, what)
    with _read_as(path, what):
        return decode(LiveRun, json.loads(text))


@contextmanager
def _read_as(path: Path, what: str) -> Iterator[None]:
    """A companion file's decoding errors as the one-line BadProfile naming it."""
    try:
        yield
    except NotAReport as exc:
        raise BadProfile(f"{path}: not a {what} ({exc.message})") from None
    except RecursionError:
        raise BadProfile(f"{path}: not a {what} (nested too deeply)") from None
    except ValueError as exc:
        raise BadProfile(f"{path}: not a {what}: not valid JSON ({exc})") from None


def _from_file(paths: Path | list[Path], out_dir: Path, user_rules: dict | None,
               procfs_path: Path | None, native_path: Path | None,
               tasks_path: Path | None = None, sampling_path: Path | None = None) -> Outputs:
    paths = [paths] if isinstance(paths, Path) else list(paths)
    live = read_live_run(sampling_path) if sampling_path is not None else None
    path = paths[0]
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
    recorded = RecordedSampling(mode="offline: " + ", ".join(p.name for p in paths),
                                duration_s=window)
    argv = tuple(tree.cmdlines.get(proc.pid, [])) if proc and tree is not None else ()
    run = RunContext(
        target=Target(pid=proc.pid if proc else None, cmdline=redact_cmdline(list(argv)),
                      cores=proc.cores if proc else None),
        sampling=recorded, partial=bool(proc and proc.target_exited), argv=argv)
    if live is not None:
        # The live run's own context: the rate and py-spy's counts as the attach knew them.
        run = live.context()
    # The pids of a recording are history (gone, or reused by another process): its source
    # files are read as named, never through /proc/<pid>/root.
    task_recordings = read_task_recordings(tasks_path) if tasks_path is not None else None
    service, results, per_process, categorizer = analyze(
        paths, tree, run, user_rules, [native_path] if native_path is not None else [],
        live=False, task_recordings=task_recordings)
    run = service.combined.run  # with the notes the reading added
    if sampling_path is not None:
        run = run.with_note(f"replayed offline with the live window's sampling as kept in "
                            f"{sampling_path.name}")
    elif window is None:
        sampling, note = _window_from_samples(service.combined, recorded)
        run = replace(run, sampling=sampling)
        if note is not None:
            run = run.with_note(note)
    if proc is None:
        run = run.with_note("offline analysis: thread state inferred from the frames alone; no "
                            "OS counters (run-queue wait, CPU time)")
    stem = path.name.split(".")[0].removeprefix("diagnose-")[:80] or "profile"
    base = f"diagnose-{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    return write_outputs(service, results, per_process, categorizer, paths, out_dir, base, tree,
                         keep_raw=False, move_profile=False, run=run)


def _window_from_samples(analysis: Analysis, recorded: RecordedSampling
                         ) -> tuple[RecordedSampling, str | None]:
    """The window's length and rate read off a recording whose /proc record does not say them
    (or that has none), and the note to show when the length stays unknown."""
    ticks = int(analysis.threads["samples"].max()) if len(analysis.threads) else 0
    interval = analysis.profile.interval_s
    laid_end_to_end = round(ticks * interval, 3) or None
    recorded = replace(recorded, rate_hz=round(1 / interval) if interval else None)
    if analysis.profile.window_s is not None:  # the file's own time range
        return replace(recorded, duration_s=round(analysis.profile.window_s, 3)), None
    if analysis.profile.waits_visible:  # every thread sampled at every tick
        return replace(recorded, duration_s=laid_end_to_end), None
    # Without --idle a thread's samples cover only the time it ran: the window is unknown, at
    # least the busiest thread's samples long.
    return (replace(recorded, duration_s=None, duration_at_least_s=laid_end_to_end),
            f"the window's length is unknown: the file has no time stamps and drops waiting "
            f"samples; at least {laid_end_to_end or 0:g} s")
