"""The shape every check shares: a finding with a stable id, a score, a severity, evidence."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd

from diagnose.checks.measurements import Measurements, written
from diagnose.model.confidence import intervals_for, too_uncertain, wilson
from diagnose.vocab import BUSY, LeverKind, WaitKind
# The checks build the report's own values (report/model/findings.py).
from diagnose.report.model.findings import (EvidenceValues, Finding, Interval, Lever,
                                            NotApplicable, Site, severity_for)

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis
    from diagnose.report.model.sections import WaitSite

__all__ = ["EvidenceValues", "Finding", "Interval", "Lever", "LeverKind", "NotApplicable", "Site",
           "severity_for", "ScoreBasis", "make_finding", "remove_work_lever", "more_cores_lever"]

# A finding's evidence as the report has it: JSON values of mixed kinds (numbers, text, flags,
# {label: value} maps, lists). The report labels each by the check's EVIDENCE declaration
# (checks/spec.py), carried in the report as its `evidence_labels`.
Measured = dict[str, object]


class FindingTexts(Protocol):
    """What a finding takes from its check's settings (spec.CheckSettings, which imports this
    module): its title and its advice."""

    @property
    def title(self) -> str: ...

    @property
    def advice(self) -> tuple[str, ...]: ...


def remove_work_lever(share: float, what: str, of: str) -> Lever:
    """The bound if `what` (a share `share` of `of`) cost nothing: Amdahl, an upper bound; at
    MAX_AMDAHL the figure is capped, a floor."""
    gain = amdahl(share)
    if gain >= MAX_AMDAHL:  # capped: the figure says "large", and the bound is past it
        return Lever(LeverKind.REMOVE_WORK, round(gain, 2), f"if {what} cost nothing",
                     f"estimate: {what} is {pct(share)} of {of}; if it cost nothing, at least {gain:.2f}x "
                     f"(Amdahl, capped: a share this close to all of it says 'large'), a floor")
    return Lever(LeverKind.REMOVE_WORK, round(gain, 2), f"if {what} cost nothing",
                 f"estimate: {what} is {pct(share)} of {of}; if it cost nothing, at most "
                 f"{gain:.2f}x (Amdahl), an upper bound", upper_bound=True)


def more_cores_lever(gain: float, basis: str) -> Lever:
    """The gain from running the same work on more cores (the check's own estimate)."""
    return Lever(LeverKind.MORE_CORES, round(max(1.0, float(gain)), 2), "from more cores", basis)


@dataclass(frozen=True)
class ScoreBasis:
    """What a finding's score rests on: one share of samples (an evidence key) and the score (and,
    when it follows from the same share, the predicted gain) as a function of that share. The
    check's own formula, evaluated at the ends of the share's interval, gives the score's."""

    key: str
    score_of: Callable[[float], float]
    gain_of: Callable[[float], float] | None = None


def ramp(value: float | None, low: float, high: float) -> float:
    """0 at or below `low`, 100 at or above `high`, linear between."""
    if value is None:
        return 0.0
    if high <= low:
        return 100.0 if value >= high else 0.0
    return max(0.0, min(100.0, 100.0 * (value - low) / (high - low)))


def make_finding(check_id: str, settings: FindingTexts, score: float, summary: str,
                 evidence: Measurements | Mapping[str, object], sites: Iterable[Site] = (),
                 advice: Iterable[str] | None = None, gain: tuple[float | None, str] | None = None,
                 samples: int | float | None = None, share_samples: Mapping[str, float] | None = None,
                 basis: ScoreBasis | None = None, levers: Iterable[Lever] = (),
                 calibrated_of: dict[str, int] | None = None) -> Finding:
    """`evidence`: the check's evidence dataclass (checks/measurements.py; a mapping only for a
    finding made by hand, as tests do). `gain`: (predicted throughput ratio, the estimate's
    inputs in words). `samples`: how many samples the finding's shares are proportions of (None
    for /proc-only evidence); `share_samples`: {evidence key: count} for a share of another
    population. `basis`: the share the score rests on, for the score's (and the gain's)
    interval. `settings`: the check's CheckSettings (checks/spec.py), for its title and advice.
    `levers`: each lever the advice pulls with its own estimate (Lever), shown beside the
    predicted gain, never ranked on. `calibrated_of`: {evidence key: samples} for a share whose
    count in `share_samples` is the effective count of calibrated states over that many samples
    (confidence.calibrated_samples)."""
    score = int(round(max(0.0, min(100.0, score))))
    predicted, gain_words = gain if gain is not None else (None, "")
    values = written(evidence) if isinstance(evidence, Measurements) else evidence
    plain: Measured = {k: _plain(v) for k, v in values.items()}
    count = None if samples is None else int(samples)
    # Counts of samples: whole numbers, whichever type summed them.
    counts = {key: int(n) for key, n in (share_samples or {}).items()}
    # The samples the score's share is a proportion of: its own population's, else the finding's.
    basis_samples = counts.get(basis.key, count) if basis is not None else count
    basis_share = plain.get(basis.key) if basis is not None else None
    score_interval, gain_interval = _intervals_from(basis, plain, score, predicted, basis_samples)
    return Finding(id=check_id, title=settings.title or check_id, score=score,
                   severity=severity_for(score), summary=summary,
                   evidence=EvidenceValues.of(plain), sites=leading_sites(sites),
                   advice=tuple(advice if advice is not None else settings.advice),
                   predicted_gain=None if predicted is None else round(float(predicted), 2),
                   gain_basis=gain_words, samples=count,
                   intervals={key: _interval(entry) for key, entry
                              in intervals_for(plain, count, counts, calibrated_of).items()},
                   low_confidence=too_uncertain(
                       basis_share if isinstance(basis_share, (int, float)) else None, basis_samples),
                   basis_key=basis.key if basis is not None else None,
                   score_interval=score_interval, gain_interval=gain_interval,
                   levers=tuple(levers))


def _interval(entry: Mapping[str, float]) -> Interval:
    """A share's interval as model/confidence.intervals_for gives it."""
    of = entry.get("calibrated_of")
    return Interval(entry["low"], entry["high"], int(entry["samples"]),
                    None if of is None else int(of))


def _intervals_from(basis: ScoreBasis | None, evidence: Measured, score: int,
                    predicted: float | None, samples: int | None
                    ) -> tuple[tuple[int, int] | None, tuple[float, float] | None]:
    """The score's and the gain's range over the 95% interval of the share they rest on. Both
    ranges contain the point values (a formula with a cap or a floor can be flat at one end)."""
    share = evidence.get(basis.key) if basis is not None else None
    if basis is None or not samples or not isinstance(share, (int, float)):
        return None, None
    ends = wilson(float(share), int(samples))
    scores = [int(round(max(0.0, min(100.0, basis.score_of(end))))) for end in ends] + [score]
    score_interval = (min(scores), max(scores))
    if basis.gain_of is None or predicted is None:
        return score_interval, None
    gains = [round(float(basis.gain_of(end)), 2) for end in ends] + [round(float(predicted), 2)]
    return score_interval, (min(gains), max(gains))


MAX_AMDAHL = 20.0  # a share this close to 1 says "large", not a number to trust


def amdahl(share: float) -> float:
    """The most a speed-up can be when a share `share` of the time goes away: 1/(1-s), capped."""
    return min(MAX_AMDAHL, 1.0 / max(1e-9, 1.0 - min(share, 0.999)))


# A share of the CPU this large says "large", not a figure to trust: a gain on it is capped there.
MAX_CPU_SHARE = 0.75


def cpu_share_gain(share: float) -> float:
    """Throughput if work that was a share `share` of the process's CPU went away: Amdahl on
    the share, capped at MAX_CPU_SHARE."""
    return amdahl(min(share, MAX_CPU_SHARE))


def cpu_share_capped(share: float) -> bool:
    """A share of the CPU past MAX_CPU_SHARE: cpu_share_gain took it at the cap, a floor."""
    return share > MAX_CPU_SHARE


def cpu_share_lever(label: str, subject: str, share: float, detail: str = "",
                    gone: str = "it went away") -> Lever:
    """The bound if the work `subject` names ("the kernel's time is"), a share `share` of the
    process's CPU, cost nothing (`gone`, said of it): Amdahl, an upper
    bound; past MAX_CPU_SHARE taken at the cap, a floor (a gc.collect() per request at 99% of the
    CPU measured 251x where the cap said 4.00x; a file read per request at 81%, 5.42x)."""
    gain = cpu_share_gain(share)
    bound = (f"at least {gain:.2f}x (Amdahl, the share capped at {pct(MAX_CPU_SHARE)}), a floor"
             if cpu_share_capped(share) else f"at most {gain:.2f}x (Amdahl), an upper bound")
    return Lever(LeverKind.REMOVE_WORK, round(gain, 2), label,
                 f"estimate: {subject} {pct(share)} of the CPU{detail}; if {gone}, {bound}",
                 upper_bound=not cpu_share_capped(share))


def cpu_share_floor(what: str, share: float) -> str:
    """Why a gain cpu_share_gain capped is a lower bound (a Finding's gain_floor): `what` was
    `share` of the CPU, more than the cap Amdahl is taken at."""
    return (f"{what} was {pct(share)} of the process's CPU, past the {pct(MAX_CPU_SHARE)} the figure is taken at: "
            f"Amdahl on a share this large says only 'large'")


def floored_at_cpu_cap(found: Finding | NotApplicable, what: str, share: float) -> Finding | NotApplicable:
    """The finding with its gain stated as a floor where it is Amdahl at the CPU share's cap."""
    if (isinstance(found, Finding) and cpu_share_capped(share) and found.predicted_gain is not None
            and found.predicted_gain == round(cpu_share_gain(share), 2) and found.gain_floor is None):
        return replace(found, gain_floor=cpu_share_floor(what, share))
    return found


def cpu_weight(cores: float | None, busy_cores: float) -> float:
    """How much a share of the process's CPU weighs, 0 to 1: a share matters as much as the
    process uses the cores. A process using next to no CPU loses no throughput to where that CPU
    went (CI: 0.05 cores, 45% of it system time, scored 25 and led a GIL held asleep), so nothing
    below half of `busy_cores`, all of it from `busy_cores`; 1 where its cores are not known."""
    return 1.0 if cores is None else ramp(cores, busy_cores / 2, busy_cores) / 100


def core_room(analysis: Analysis) -> float | None:
    """How much more CPU the process could use: the cores within its reach (_within_reach) /
    the cores it used."""
    reach = _within_reach(analysis)
    return max(1.0, reach[1] / reach[0]) if reach is not None else None


def _within_reach(analysis: Analysis) -> tuple[float, float] | None:
    """(the cores the process used, the cores it could have: usable cores, and on a shared
    machine no more than it used plus what the machine left idle); None without its counters."""
    os_ = analysis.os
    if os_ is None or not os_.window_s or not os_.cpu_s:
        return None
    used = os_.cpu_s / os_.window_s
    available = os_.usable_cores
    if os_.machine_idle_cores is not None:
        available = min(available, used + os_.machine_idle_cores)
    return used, available


# Cores other processes must have held for the machine's idle cores to count as theirs, not as
# the /proc sampler's rounding.
OTHERS_MIN_CORES = 0.25


def idle_cores_floor(analysis: Analysis, gain: float | None) -> str | None:
    """Why a gain that the machine's idle cores capped (core_room) is a lower bound: other
    processes held the cores the fix would run on. Their load is the machine's, not the
    service's; where it goes the cap rises (remote_backend's fix: predicted 1.02x with 0.02 cores
    idle beside other jobs, measured 1.68x). None where the idle cores did not set the figure."""
    reach, room = _within_reach(analysis), core_room(analysis)
    os_ = analysis.os
    if gain is None or reach is None or room is None or os_ is None or os_.machine_idle_cores is None:
        return None
    used, available = reach
    others = os_.usable_cores - available
    if others < OTHERS_MIN_CORES or abs(gain - room) > 0.006:
        return None
    return (f"the {os_.machine_idle_cores:.2f} cores the machine left idle capped it; other processes "
            f"used {others:.2f} of the {os_.usable_cores:g} usable cores, and where they are gone the "
            f"cores allow up to {os_.usable_cores / used:.2f}x")


def serial_gain(share: float, analysis: Analysis, what: str) -> tuple[float, str]:
    """Amdahl for a serialized share of request time, capped by the cores the process leaves
    idle (removing a lock cannot buy more than the cores can run): estimate and its inputs."""
    bound = amdahl(share)
    room = core_room(analysis)
    gain = min(bound, room) if room is not None else bound
    basis = f"estimate: {what} is {100 * share:.0f}% of request time, so at most {bound:.2f}x (Amdahl)"
    os_ = analysis.os
    if room is not None and os_ is not None:  # a room is measured by the OS counters
        basis += (f"; the cores allow {room:.2f}x ({os_.cpu_s / os_.window_s:.2f} of "
                  f"{os_.usable_cores:g} usable cores in use"
                  + (f", {os_.machine_idle_cores:.2f} idle on the machine"
                     if os_.machine_idle_cores is not None else "") + ")")
    return max(1.0, gain), basis


def _plain(value: object) -> object:
    if isinstance(value, float):
        return round(value, 4) if math.isfinite(value) else None
    if hasattr(value, "item"):
        return _plain(value.item())
    return value


def top_sites(analysis: Analysis, samples: pd.DataFrame, reference: float, limit: int = 5) -> list[Site]:
    """Groups samples by their site frame, ranked by samples; share is of `reference` samples."""
    site = samples["site"].to_numpy()
    has_site = site >= 0
    if not has_site.any() or reference <= 0:
        return []
    # Summed per site frame by count tables over frame ids (what groupby("site") gives: sites
    # with rows, in frame id order), then ranked as before.
    present = np.flatnonzero(np.bincount(site[has_site]))
    sums = np.bincount(site[has_site], weights=samples["count"].to_numpy()[has_site])[present]
    grouped = (pd.Series(sums.astype(np.int64), index=pd.Index(present, name="site"), name="count")
               .sort_values(ascending=False).head(limit))
    sites = []
    for frame_id, count in grouped.items():
        frame = analysis.frame(int(frame_id))
        sites.append(Site(frame.function, frame.file, frame.line, round(float(count) / reference, 4)))
    return sites


def scoped_summary(summary: str, held: int, processes: int) -> str:
    """A worker-tree finding's summary, led by the processes it held in (service_verdict._merge)."""
    return f"in {held} of {processes} worker processes: {summary}"


def unscoped_summary(finding: Finding) -> str:
    """The summary without the scope scoped_summary put before it (read back from the evidence
    the merge wrote beside it), where a sentence names the finding's work, not its spread."""
    held, processes = (finding.evidence.get("processes_with_finding"),
                       finding.evidence.get("worker_processes"))
    if isinstance(held, int) and isinstance(processes, int):
        return finding.summary.removeprefix(scoped_summary("", held, processes))
    return finding.summary


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def short_path(path: str) -> str:
    """The last two path components: enough to recognise a file in a sentence."""
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:]) if len(parts) > 1 else path


def sites_from_waits(waits: Sequence[WaitSite], limit: int = 5) -> list[Site]:
    return [Site(w.function, w.file, w.line, w.share) for w in waits[:limit]]


def busy_samples(samples: pd.DataFrame) -> pd.DataFrame:
    """Samples of threads that run or want to run their own work. GIL waits count (the thread
    is runnable and wants to run the code it is in); a native library's mutex wait (OpenBLAS
    serializing callers) does not: that thread is blocked."""
    cached_for, cached = _BUSY_CACHE
    if cached_for is not None and cached_for() is samples:
        return cached
    busy = samples[samples["state"].isin(BUSY) & (samples["wait_kind"] != WaitKind.NATIVE_MUTEX)]
    _BUSY_CACHE[:] = [weakref.ref(samples), busy]
    return busy


# The last table busy_samples filtered and its result: five checks ask for the same request
# threads' rows (Analysis.request_samples returns one object), each a copy of most of the
# samples otherwise. The results are only read.
_BUSY_CACHE: list[Any] = [None, None]  # [weakref to the table, its busy rows]


def leading_sites(sites: Iterable[Site]) -> tuple[Site, ...]:
    """A finding's sites without bootstrap frames (runpy, `<module>`, a thread's or a server's
    run loop: on nearly every stack, never the lead), unless nothing else is left."""
    from diagnose.model.bootstrap import is_bootstrap
    from diagnose.samples.profile import Frame

    sites = tuple(sites)
    kept = tuple(s for s in sites if not is_bootstrap(Frame(s.function, s.file, s.line, False)))
    return kept or sites
