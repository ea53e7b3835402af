"""Two reports of one service, before and after a change: what moved, normalised so that runs of
different lengths, rates and thread counts compare. Pure functions: two report models in, the
diff model out (compare/model.py: what `diagnose diff --json` prints and the diff page renders).

Normalisation: a wait site as thread-seconds waited per second of wall time (the mean number of
threads waiting there); the state mix of each thread role as shares of that role's samples; a
frame as its share of all samples (of thread-time). Per request only when both reports carry
the throughput they were taken at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from diagnose.compare.model import (Diff, FindingChange, FindingSide, FlameDiff, FlameNode,
                                    PrimaryChange, RoleStates, Rules, Side, StateShare, Status,
                                    VanishedPath, WaitChange, WaitSide, WaitSiteChange)
from diagnose.compare.paths import FileMatch, is_library, match_files
from diagnose.errors import DiagnoseError, ExitCode
from diagnose.model.confidence import wilson
from diagnose.vocab import SEVERITIES, ThreadRole
from diagnose.report.redact import redact_text
from diagnose.report.model import Finding, Interval, Report, Sampling, StackFrame, Thread, WaitSite

# A severity change counts as real only when the score moved at least this many points (so a
# score jittering around one threshold between runs is not a change) and, where both findings
# carry sampled shares with 95% intervals, at least one pair of intervals does not overlap (the
# measured proportion itself moved; intervals over sampling ticks, see _tick_intervals).
# Findings whose score comes from /proc counters alone have no intervals and rest on the margin.
# Otherwise the change is reported as "within noise".
# Samples are correlated (threads at one tick, one thread over consecutive ticks), so even the
# tick intervals are if anything too narrow; the margin and them together keep two runs of an
# unchanged service from flipping. Changes of the machine (other load on shared cores) are not
# seen in the reports and can still move a score.
SEVERITY_MARGIN = 20

# The sampling settings that make raw counts comparable; differing, only normalised figures are.
SAMPLING_FIELDS = ("mode", "plan", "rate_hz", "native")

# The flame graph keeps frames down to this share of either report's samples.
MIN_FRAME_SHARE = 0.0005
MAX_FRAME_NODES = 4000
MAX_VANISHED = 50

# A wait site holding less than this share of request-thread time in a report counts as absent
# from it (a single sample of a lock no longer contended is not the site "still there").
NEGLIGIBLE_WAIT_SHARE = 0.01


class DifferentPrograms(DiagnoseError):
    exit_code = ExitCode.USAGE


def diff_reports(before: Report, after: Report, names: tuple[str, str] = ("before", "after")
                 ) -> Diff:
    files = match_files(_frames(before), _frames(after))
    check_same_program(before, after, files)
    differs = sampling_differences(before, after)
    per_request = throughput(before) is not None and throughput(after) is not None
    result = Diff(
        before=describe(before, names[0]),
        after=describe(after, names[1]),
        sampling_differs=differs,
        normalised_only=bool(differs),
        per_request=per_request,
        paths=files.describe(),
        primary=compare_primary(before, after),
        findings=compare_findings(before, after),
        waits=compare_waits(before, after, per_request, files),
        states=compare_states(before, after),
        flame=flame_diff(before, after, files),
        rules=Rules(severity_margin=SEVERITY_MARGIN, interval="95% Wilson"),
    )
    return replace(result, summary=summary_line(result))


# -- what each side is -------------------------------------------------------------------------

def _mode(sampling: Sampling) -> str:
    mode = sampling.mode
    # An offline analysis names its file in the mode: the file's name is not a sampling setting.
    return "offline" if mode.startswith("offline:") else mode


def _plan(sampling: Sampling) -> str | None:
    plan = sampling.plan
    if plan is None:
        return plan
    # The plan says the thread count it was sized for: another count is not another plan.
    return re.sub(r"\d+(\.\d+)? ?(Hz|thread-samples/s|threads)", r"N \2", plan)


def sampling_differences(before: Report, after: Report) -> tuple[str, ...]:
    """The SAMPLING_FIELDS whose setting differs between the two reports, in that order."""
    a, b = before.sampling, after.sampling
    differs = (_mode(a) != _mode(b), _plan(a) != _plan(b), a.rate_hz != b.rate_hz,
               a.native != b.native)
    return tuple(name for name, differ in zip(SAMPLING_FIELDS, differs, strict=True) if differ)


def wall_seconds(report: Report) -> float | None:
    """The sampled window's wall time: the report's own, else the busiest thread's samples."""
    duration = report.sampling.duration_s
    if duration is not None and duration > 0:
        return float(duration)
    interval = report.stacks.interval_s
    ticks = max((t.samples for t in report.threads), default=0)
    return ticks * interval if interval and ticks else None


def throughput(report: Report) -> float | None:
    rps = report.load.throughput_rps if report.load is not None else None
    return float(rps) if rps is not None and rps > 0 else None


def describe(report: Report, name: str) -> Side:
    target, sampling, verdict = report.target, report.sampling, report.verdict
    return Side(name=name, pid=target.pid,
                # already redacted when the report was written; again, for a hand-edited report
                cmdline=redact_text(target.cmdline),
                wall_s=wall_seconds(report), mode=_mode(sampling), plan=sampling.plan,
                rate_hz=sampling.rate_hz, native=sampling.native,
                thread_samples=sampling.thread_samples,
                threads=len(report.threads), throughput_rps=throughput(report),
                states_estimated=sampling.state_estimated,
                primary=verdict.primary, severity=verdict.severity, headline=verdict.headline)


def _frames(report: Report) -> tuple[StackFrame, ...]:
    return report.stacks.frames


# -- same program? -----------------------------------------------------------------------------

def _frame_keys(report: Report, side: int, files: FileMatch, own_code_only: bool
                ) -> set[tuple[str, str]]:
    keys: set[tuple[str, str]] = set()
    for frame in report.stacks.frames:
        if own_code_only and (frame.native or is_library(frame.file)):
            continue
        keys.add((frame.function, files.key(side, frame.file)))
    return keys


def check_same_program(before: Report, after: Report, files: FileMatch | None = None) -> None:
    """Two reports of different programs share no frame of their own code (the standard library
    and installed packages do not count: any two threaded programs share threading.py). Frames
    are matched by function and by file relative to its package root or release directory
    (diagnose/compare/paths.py): the same code deployed at another prefix is the same code."""
    files = files if files is not None else match_files(_frames(before), _frames(after))
    own_before = _frame_keys(before, 0, files, True)
    own_after = _frame_keys(after, 1, files, True)
    if own_before and own_after:
        common = own_before & own_after
    else:  # one side ran only library code: any common frame will do
        common = _frame_keys(before, 0, files, False) & _frame_keys(after, 1, files, False)
    if not common:
        raise DifferentPrograms("the two reports share no frame (function and file, matched "
                                "relative to the package root or release directory): they are "
                                "of different programs, and a diff of them would mean nothing")


# -- findings ----------------------------------------------------------------------------------

Bounds = dict[str, tuple[float, float]]  # a share's key -> its 95% interval
QUEUE_WORTH_SAYING = 0.05  # a run-queue share below this widens too little to mention


@dataclass(frozen=True)
class Population:
    """What one report's shares are proportions of, for judging their noise: the request
    threads sampled at one tick (one observation between them), and the part of their busy time
    they sat runnable on the run queue (schedstat), which a sample cannot tell from running."""

    threads: int = 1
    queued: float = 0.0


def _is_share_of_busy(key: str) -> bool:
    return key.endswith("share_of_busy")


def _widened(bounds: tuple[float, float], queued: float) -> tuple[float, float]:
    """A share of busy samples when `queued` of the busy time was waiting for a core: the
    samples cannot tell queueing from running, so the share of time actually run ranges from
    all the queued samples being the share's own ((low - q) / (1 - q)) to none of them
    (high / (1 - q))."""
    if queued <= 0.0:
        return bounds
    if queued >= 1.0:
        return (0.0, 1.0)
    low, high = bounds
    return (max(0.0, (low - queued) / (1 - queued)), min(1.0, high / (1 - queued)))


def _tick_intervals(finding: Finding, population: Population) -> Bounds:
    """Each share's 95% interval with the threads sampled at one tick counted as one observation
    (as for wait sites): the report's own intervals count every thread-sample, and two runs of
    an unchanged service then differ "beyond noise" in a share of busy samples. A share of busy
    samples is widened by the part of busy time spent on the run queue (a loaded machine
    preempts a thread wherever it is, and the samples place that wait in whatever it was doing)."""
    out: Bounds = {}
    interval: Interval
    for key, interval in finding.intervals.items():
        share = finding.number(key)
        if share is None:
            share = (interval.low + interval.high) / 2
        n = max(1, round((interval.samples or 0) / max(1, population.threads)))
        bounds = wilson(float(share), n)
        out[key] = _widened(bounds, population.queued) if _is_share_of_busy(key) else bounds
    return out


def _intervals_overlap(a: Bounds, b: Bounds) -> bool | None:
    """Whether every share both findings carry overlaps; None when they carry none in common."""
    common = sorted(set(a) & set(b))
    if not common:
        return None
    return all(a[k][0] <= b[k][1] and b[k][0] <= a[k][1] for k in common)


def severity_change(before: Finding, after: Finding,
                    populations: tuple[Population, Population] = (Population(), Population())
                    ) -> tuple[Status, str]:
    """(status, why): "unchanged", "changed" or "within noise" (see SEVERITY_MARGIN);
    `populations`: each report's request threads and run-queue share (see _tick_intervals)."""
    moved = after.score - before.score
    if before.severity == after.severity:
        return Status.UNCHANGED, f"score {moved:+d}" if moved else "same score"
    if abs(moved) < SEVERITY_MARGIN:
        return Status.WITHIN_NOISE, (f"score moved {moved:+d}, less than {SEVERITY_MARGIN} points: "
                                f"a score near a threshold crosses it from run to run")
    overlap = _intervals_overlap(_tick_intervals(before, populations[0]),
                                 _tick_intervals(after, populations[1]))
    queued = max(p.queued for p in populations)
    widened = any(_is_share_of_busy(k) for k in (*before.intervals, *after.intervals))
    queue_words = (f" (a share of busy time widened by the time the threads sat on the run "
                   f"queue: up to {queued:.0%} of it)" if widened and queued >= 0.05 else "")
    if overlap:
        return Status.WITHIN_NOISE, (f"score moved {moved:+d} but every share's 95% interval overlaps "
                                f"the other run's{queue_words}")
    basis = ("its shares' 95% intervals do not overlap" if overlap is False
             else "no sampled share to test (counters)")
    return Status.CHANGED, f"score moved {moved:+d}; {basis}{queue_words}"


def _queued_share(report: Report) -> float:
    """The request threads' run-queue wait over the time they wanted a core (cpu + queue), from
    /proc; 0 where the counters are missing."""
    threads = _request_threads(report)
    cpu = sum(t.os.cpu_s or 0.0 for t in threads if t.os is not None)
    queue = sum(t.os.runqueue_wait_s or 0.0 for t in threads if t.os is not None)
    return queue / (cpu + queue) if cpu + queue > 0 else 0.0


def _populations(before: Report, after: Report) -> tuple[Population, Population]:
    return (Population(_request_population(before)[1], _queued_share(before)),
            Population(_request_population(after)[1], _queued_share(after)))


def _side(finding: Finding | None) -> FindingSide | None:
    if finding is None:
        return None
    return FindingSide(score=finding.score, severity=finding.severity, summary=finding.summary,
                       low_confidence=finding.low_confidence)


_RANK: dict[str, int] = {s: i for i, s in enumerate(SEVERITIES)}


def _highest_rank(change: FindingChange) -> int:
    """The rank of the more severe side (an absent side, or an unknown severity: 0)."""
    return max(_RANK.get(side.severity, 0) if side is not None else 0
               for side in (change.before, change.after))


def compare_findings(before: Report, after: Report) -> tuple[FindingChange, ...]:
    a = {f.id: f for f in before.findings if f.id}
    b = {f.id: f for f in after.findings if f.id}
    out: list[FindingChange] = []
    populations = _populations(before, after)
    for fid in list(a) + [fid for fid in b if fid not in a]:
        old, new = a.get(fid), b.get(fid)
        if old is None or new is None:
            status, why = (Status.ONLY_AFTER if old is None else Status.ONLY_BEFORE,
                           "the check lacked its inputs in one report")
        else:
            status, why = severity_change(old, new, populations)
        either = new or old
        assert either is not None  # fid is a key of a or of b
        out.append(FindingChange(id=fid, title=either.title or fid,
                                 before=_side(old), after=_side(new),
                                 score_change=None if old is None or new is None
                                 else new.score - old.score,
                                 status=status, why=why))
    out.sort(key=lambda f: (f.status != Status.CHANGED, -_highest_rank(f)))
    return tuple(out)


def compare_primary(before: Report, after: Report) -> PrimaryChange:
    """The finding that was BEFORE's verdict, as it stands AFTER, and AFTER's own verdict."""
    primary = before.verdict.primary
    old, new = before.finding(primary), after.finding(primary)
    status, why = (severity_change(old, new, _populations(before, after))
                   if old is not None and new is not None
                   else (Status.NOT_COMPARABLE, "the finding is missing from one report"))
    return PrimaryChange(id=primary, before=_side(old), after=_side(new), status=status, why=why,
                         after_primary=after.verdict.primary,
                         after_primary_severity=after.verdict.severity)


# -- wait sites --------------------------------------------------------------------------------

def _request_population(report: Report) -> tuple[int, int]:
    """(samples, threads) a wait's share is a proportion of: request threads', else every
    thread's."""
    request = _request_threads(report)
    return sum(t.samples for t in request), max(1, len(request))


def _request_threads(report: Report) -> list[Thread]:
    """The request threads, else every thread (a profile without roles)."""
    return [t for t in report.threads if t.role == ThreadRole.REQUEST] or list(report.threads)


def _wait_key(w: WaitSite, side: int, files: FileMatch) -> tuple[str, str, str, int]:
    return (w.kind, w.function, files.key(side, w.file), w.line)


def _wait_side(w: WaitSite | None, wall: float | None, rps: float | None,
               population: tuple[int, int]) -> WaitSide:
    samples_all, threads = population
    if w is None:
        share, n, thread_seconds, samples = 0.0, samples_all, 0.0, 0
    else:
        share, samples, thread_seconds = float(w.share), w.samples, w.thread_seconds
        n = round(samples / share) if share > 0 and samples else samples_all
    rate = thread_seconds / wall if wall else None
    # Threads of one service wait together (on one lock, at one instant): the threads sampled at
    # one tick are one observation, not one each. Counting every thread-sample would make the
    # interval so narrow that two runs of an unchanged service differ "beyond noise".
    low, high = wilson(share, max(1, round(n / threads)))
    return WaitSide(thread_seconds=thread_seconds, samples=samples, share=round(share, 4),
                    share_low=round(low, 4), share_high=round(high, 4),
                    waiting_threads=None if rate is None else round(rate, 4),
                    ms_per_request=None if rate is None or not rps
                    else round(1000.0 * rate / rps, 3))


def _wait_change(separated: bool, absent_before: bool, absent_after: bool) -> WaitChange:
    if absent_before and absent_after:
        return WaitChange.UNCHANGED
    if absent_before:
        return WaitChange.APPEARED if separated else WaitChange.APPEARED_IN_NOISE
    if absent_after:
        return WaitChange.DISAPPEARED if separated else WaitChange.DISAPPEARED_IN_NOISE
    return WaitChange.CHANGED if separated else WaitChange.UNCHANGED


def _wait_order(w: WaitSiteChange) -> tuple[bool, float]:
    """Changes beyond noise first, then by how far the site moved."""
    return (not w.beyond_noise,
            -abs(w.waiting_threads_change or w.after.share - w.before.share))


def compare_waits(before: Report, after: Report, per_request: bool,
                  files: FileMatch | None = None) -> tuple[WaitSiteChange, ...]:
    """Each wait site of either report: appeared, disappeared, changed or unchanged, judged on its
    share of request-thread time (a change counts when the 95% intervals, taken over sampling
    ticks, do not overlap; a site in one report only is a share of 0 in the other)."""
    files = files if files is not None else match_files(_frames(before), _frames(after))
    a = {_wait_key(w, 0, files): w for w in before.waits}
    b = {_wait_key(w, 1, files): w for w in after.waits}
    walls = wall_seconds(before), wall_seconds(after)
    rps = (throughput(before), throughput(after)) if per_request else (None, None)
    pop_before, pop_after = _request_population(before), _request_population(after)
    out = []
    for key in list(a) + [k for k in b if k not in a]:
        old, new = a.get(key), b.get(key)
        s_old = _wait_side(old, walls[0], rps[0], pop_before)
        s_new = _wait_side(new, walls[1], rps[1], pop_after)
        separated = s_old.share_high < s_new.share_low or s_new.share_high < s_old.share_low
        change = _wait_change(separated, old is None or s_old.share < NEGLIGIBLE_WAIT_SHARE,
                              new is None or s_new.share < NEGLIGIBLE_WAIT_SHARE)
        any_side = new or old
        assert any_side is not None  # key is a key of a or of b
        rate_old, rate_new = s_old.waiting_threads, s_new.waiting_threads
        out.append(WaitSiteChange(
            kind=any_side.kind, label=any_side.label, function=any_side.function,
            file=any_side.file, line=any_side.line, change=change, beyond_noise=separated,
            before=s_old, after=s_new,
            waiting_threads_change=None if rate_old is None or rate_new is None
            else round(rate_new - rate_old, 4)))
    out.sort(key=_wait_order)
    return tuple(out)


# -- state mix per role ------------------------------------------------------------------------

def _state_mix(report: Report) -> dict[str, dict[str, float]]:
    counts: dict[str, dict[str, int]] = {}
    for thread in report.threads:
        role = str(thread.role or ThreadRole.OTHER)
        for state, n in thread.states.items():
            counts.setdefault(role, {})
            counts[role][state] = counts[role].get(state, 0) + int(n or 0)
    return {role: {s: n / total for s, n in states.items()}
            for role, states in counts.items() if (total := sum(states.values()))}


def compare_states(before: Report, after: Report) -> tuple[RoleStates, ...]:
    a, b = _state_mix(before), _state_mix(after)
    out = []
    for role in sorted(set(a) | set(b)):
        old, new = a.get(role, {}), b.get(role, {})
        rows = [StateShare(state=s, before=round(old.get(s, 0.0), 4),
                           after=round(new.get(s, 0.0), 4),
                           change=round(new.get(s, 0.0) - old.get(s, 0.0), 4))
                for s in sorted(set(old) | set(new))]
        out.append(RoleStates(role=role, in_before=role in a, in_after=role in b,
                              states=tuple(sorted(rows, key=lambda r: -max(r.before, r.after)))))
    return tuple(out)


# -- differential flame graph ------------------------------------------------------------------

CallPath = tuple[tuple[str, str], ...]  # (function, file key) from the root


def _tree(report: Report, side: int, files: FileMatch) -> tuple[dict[CallPath, int], int]:
    """{call path: samples under it} and the total samples."""
    keys = [(f.function, files.key(side, f.file)) for f in report.stacks.frames]
    weights: dict[CallPath, int] = {}
    total = 0
    for row in report.stacks.samples:
        count = row.count
        path: CallPath = ()
        total += count
        seen = set()
        for index in row.stack:
            path = path + (keys[index],)
            if path not in seen:
                seen.add(path)
                weights[path] = weights.get(path, 0) + count
    return weights, total


def flame_diff(before: Report, after: Report, files: FileMatch | None = None) -> FlameDiff:
    """The AFTER call tree with each frame's share of AFTER's samples (its width) and of
    BEFORE's (the same path; its colour is the difference), in depth-first order, children by
    name; and the paths of BEFORE that vanished (the first frame of each that AFTER lacks)."""
    files = files if files is not None else match_files(_frames(before), _frames(after))
    old, old_total = _tree(before, 0, files)
    new, new_total = _tree(after, 1, files)
    children: dict[CallPath, list[CallPath]] = {}
    for path in new:
        children.setdefault(path[:-1], []).append(path)
    nodes: list[FlameNode] = []
    dropped = 0

    def visit(path: CallPath, depth: int) -> None:
        nonlocal dropped
        for child in sorted(children.get(path, ()), key=lambda p: p[-1]):
            share_after = new[child] / new_total
            share_before = old.get(child, 0) / old_total if old_total else 0.0
            if max(share_after, share_before) < MIN_FRAME_SHARE or len(nodes) >= MAX_FRAME_NODES:
                dropped += 1
                continue
            nodes.append(FlameNode(function=child[-1][0], file=child[-1][1], depth=depth,
                                   after=round(share_after, 5), before=round(share_before, 5),
                                   change=round(share_after - share_before, 5)))
            visit(child, depth + 1)

    if new_total:
        visit((), 0)
    vanished = [VanishedPath(path=tuple(function for function, _ in path), file=path[-1][1],
                             before=round(count / old_total, 5))
                for path, count in old.items()
                if path not in new and (len(path) == 1 or path[:-1] in new)]
    vanished.sort(key=lambda v: -v.before)
    return FlameDiff(nodes=tuple(nodes), dropped_nodes=dropped,
                     vanished=tuple(vanished[:MAX_VANISHED]),
                     vanished_more=max(0, len(vanished) - MAX_VANISHED),
                     samples_before=old_total, samples_after=new_total)


# -- the one line ------------------------------------------------------------------------------

def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _severity(side: FindingSide | None) -> str:
    return (side.severity if side is not None else "") or "absent"


def summary_line(diff: Diff) -> str:
    p = diff.primary
    parts = [f"primary: {p.id} {_severity(p.before)} → {_severity(p.after)}"
             + (" (within noise)" if p.status == Status.WITHIN_NOISE else "")]
    if p.after_primary != p.id:
        parts[0] += f" (now {p.after_primary} {p.after_primary_severity})"
    real = [w.change for w in diff.waits if w.real]
    for change in (WaitChange.DISAPPEARED, WaitChange.APPEARED, WaitChange.CHANGED):
        if change in real:
            parts.append(f"{_plural(real.count(change), 'wait site')} {change}")
    changed = [f for f in diff.findings if f.status == Status.CHANGED]
    noisy = [f for f in diff.findings if f.status == Status.WITHIN_NOISE]
    parts.append(f"{_plural(len(changed), 'finding')} changed severity"
                 + (f" ({len(noisy)} more within noise)" if noisy else ""))
    if diff.normalised_only:
        parts.append(f"sampling differs ({', '.join(diff.sampling_differs)}): "
                     f"normalised figures only")
    return "; ".join(parts)
