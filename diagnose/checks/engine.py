"""Runs every check, ranks findings by what fixing them buys (checks/arbiter.py), and names the verdict."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from diagnose.checks import settings as check_settings
from diagnose.checks.arbiter import (carrier, co_primary, in_pair_order, next_cause, noise_reason, rank,
                                     symptoms)
from diagnose.checks.base import MAX_AMDAHL, Finding, Interval, NotApplicable, idle_cores_floor, unscoped_summary
from diagnose.checks.calibration import fared_words
from diagnose.checks.registry import CAUSAL_ORDER, CHECKS
from diagnose.checks.spec import REQUIREMENTS, SEEN_BY, CheckSettings, CheckSpec, Input
from diagnose.classify.rules_file import validate
from diagnose.vocab import INFO_SCORE, SEVERITIES, ChainEnd, Confidence, Severity, ThreadState
from diagnose.report.model.findings import Verdict

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis

_ORDER = {check_id: i for i, check_id in enumerate(CAUSAL_ORDER)}


def load_check_settings(user_rules: dict[str, Any] | None = None) -> dict[str, CheckSettings]:
    """Each check's Settings: the shipped values with a user's rules over them. A user's rules
    are validated against the Settings classes first (BadRules, exit 2: unknown ids, keys and
    types are errors)."""
    if user_rules:
        validate(user_rules, checks=check_settings.schema())
    return check_settings.merged((user_rules or {}).get("checks"))


def order_of(finding: Finding) -> int:
    return _ORDER.get(finding.id, len(_ORDER))


@dataclass(frozen=True)
class CheckResults:
    findings: tuple[Finding, ...]
    not_applicable: tuple[NotApplicable, ...]
    verdict: Verdict


def run_checks(analysis: Analysis, user_rules: dict[str, Any] | None = None) -> CheckResults:
    settings = load_check_settings(user_rules)
    findings: list[tuple[int, Finding]] = []
    skipped: list[tuple[int, NotApplicable]] = []
    present: dict[Input, bool] = {}  # each input tested once per analysis
    for order, check in enumerate(CHECKS):
        result = run_check(check, analysis, settings[check.id], present)
        if isinstance(result, NotApplicable):
            skipped.append((order, result))
        else:
            findings.append((order, result))
    ranked = rank([f for _, f in findings], order_of)
    return CheckResults(ranked, tuple(s for _, s in skipped),
                        verdict_for(ranked, describe_activity(analysis), waits_hidden(analysis)))


def run_check(check: CheckSpec[Any], analysis: Analysis, settings: CheckSettings,
              present: dict[Input, bool] | None = None) -> Finding | NotApplicable:
    """The check's finding, or why it does not apply: the first input it needs that the data
    lacks (tested here, in the order declared), else the check's own reason."""
    present = {} if present is None else present
    for needed in check.needs:
        test, reason = REQUIREMENTS[needed]
        if needed not in present:
            present[needed] = bool(test(analysis))
        if not present[needed]:
            return NotApplicable(check.id, reason)
    assert check.run is not None, f"{check.id} runs on a service, not on one process"
    result = check.run(analysis, settings)
    return result if isinstance(result, NotApplicable) else annotated(check, result, analysis, present)


def annotated(check: CheckSpec[Any], finding: Finding, analysis: Analysis,
              present: dict[Input, bool] | None = None) -> Finding:
    """The finding with what its check could not see in this data, its gain marked as a floor
    when what was unseen could only add to the cause, and how predictions of its gain fared."""
    present = {} if present is None else present
    unseen: list[str] = []
    adds: list[str] = []  # the unseen inputs that could only add to the cause
    for used in check.uses:
        if used not in SEEN_BY:
            continue
        test, short, words = SEEN_BY[used]
        if used not in present:
            present[used] = bool(test(analysis))
        if not present[used]:
            unseen.append(words)
            if used in check.floor_without:
                adds.append(short)
    floor = finding.gain_floor
    gain = finding.predicted_gain
    if adds and floor is None and gain is not None:
        floor = f"{' and '.join(adds)} were not seen, and what they show could only add to the cause"
    if floor is None:
        floor = idle_cores_floor(analysis, gain)
    if floor is None and gain is not None and gain >= MAX_AMDAHL:
        # Amdahl of a share this close to all of the time is larger than any figure worth
        # stating: the cap says "large" (a QueueHandler measured 42x where the cap said 20x)
        floor = (f"the figure is capped at {MAX_AMDAHL:g}x: the share is too close to all of the "
                 f"time for Amdahl to say more than 'large'")
    # The finding's knobs: the measured fixes of each count (several applied together, or
    # alternatives), those of the check's other levers (a gc.collect() dropped, beside a heap
    # frozen) do not; a finding naming none counts every fix of the check.
    knobs = tuple(fix.knob for fix in finding.fixes if fix.knob) or None
    fared = fared_words(check.id, knobs) if finding.predicted_gain is not None else None
    if not unseen and floor == finding.gain_floor and fared == finding.fared:
        return finding
    return replace(finding, unseen=tuple(unseen), gain_floor=floor, fared=fared)


def waits_hidden(analysis: Analysis) -> str:
    """Why the profile cannot show waits (recorded without --idle), or "" when it can."""
    profile = analysis.profile
    if profile.waits_visible:
        return ""
    return profile.waits_reason or "no thread was ever seen waiting"


def verdict_for(findings: tuple[Finding, ...], activity: str = "", hidden_waits: str = "") -> Verdict:
    """`activity`: what the threads did (describe_activity), the headline when nothing stands out.
    `hidden_waits`: why the profile cannot show waits; then every share of busy time could be
    overturned by the waits it dropped, so there is no verdict, only what the busy time shows."""
    if not findings:
        return Verdict("none", "No check could run on this data.", Severity.OK)
    top = findings[0]
    if hidden_waits:
        busy = (f"; among what it kept, the strongest pattern was: {top.title.split(':')[0].lower()}"
                f" — {top.summary}") if top.severity != Severity.OK else ""
        return Verdict("inconclusive", f"Inconclusive: this profile cannot show waits ({hidden_waits}); "
                       f"record it again with `py-spy record --idle` or use `diagnose attach`{busy}.",
                       Severity.INFO, Confidence.LOW, top.samples)
    # The same work seen from another side (rule 7) may show the problem where the name's own
    # score did not: the verdict keeps the name and takes that strength.
    if top.severity == Severity.OK and not any(f.severity != Severity.OK for f in symptoms([top], findings)):
        if top.score_range[1] < INFO_SCORE:
            return Verdict("none", f"No clear bottleneck: {activity or 'no finding is strong'}.",
                           Severity.OK)
        return _possible(top)
    # Co-primary findings in the causal order, whichever scored higher on this attach (rank()
    # already orders them so; a caller's own ranking may not).
    named = [top]
    rival = next_cause(findings)
    if rival is not None and co_primary(carrier(top, findings, order_of), rival, order_of):
        named = in_pair_order([top, rival], order_of)
    top = named[0]
    folded = symptoms(named, findings)
    # A few dozen samples can make any share look decisive: say so, and never call it critical.
    # A folded finding is the same cause measured again: its severity is the cause's too.
    severity = max((_capped(f) for f in named + folded), key=SEVERITIES.index)
    low = [f for f in named if f.low_confidence]
    samples = min((n for n in map(_rested_samples, low) if n is not None), default=top.samples)
    headline = _headline(top, folded)
    if len(named) > 1:
        other = named[1]
        headline += f"; within the noise of it: {other.title.split(':')[0].lower()}"
    advice = tuple(f.advice[0] if f.advice else "" for f in named)
    co_id = named[1].id if len(named) > 1 else None
    reason = noise_reason(*named) if len(named) > 1 else ""
    if low:
        headline = f"low confidence: {samples} samples; sample longer{_widest(low)} — {headline}"
    return Verdict(top.id, headline, severity, Confidence.LOW if low else Confidence.OK,
                   samples if low else top.samples, co_primary=co_id,
                   co_primary_reason=reason, first_advice=advice,
                   also=tuple(f.id for f in folded))


def _headline(top: Finding, folded: list[Finding]) -> str:
    """The named finding's title and summary; or, where its own share shows no problem and the
    same work seen from another side does (rule 7: the GIL's waits whose holders run its phase),
    that side's words first, then the code at the end of the chain. Its own title alone would
    claim what its share denied ("preprocessing dominates", at 31% in 0 of 3 processes)."""
    carried = [f for f in folded if f.severity != Severity.OK] if top.severity == Severity.OK else []
    if not carried:
        return f"{top.title.split(':')[0]} — {top.summary}"
    carrier = max(carried, key=lambda f: f.score)
    return (f"{carrier.title.split(':')[0]} — {carrier.summary}; at the end of the chain: "
            f"{unscoped_summary(top)}")


def _possible(top: Finding) -> Verdict:
    """A first finding under the info line whose score interval reaches it: on another attach
    its point score would have shown a problem and named it. Noise never picks the verdict
    (arbiter rule 4), so it is named on every such attach, as possible, at low confidence."""
    low, high = top.score_range
    title = top.title.split(":")[0]
    headline = (f"Possibly {title[:1].lower() + title[1:]} — {top.summary} (weak: its score "
                f"{top.score} is known only to {low}-{high}, across the line ({INFO_SCORE}) under "
                f"which a finding shows no problem)")
    return Verdict(top.id, headline, Severity.INFO, Confidence.LOW, top.samples,
                   first_advice=(top.advice[0] if top.advice else "",))


def _rested(finding: Finding) -> Interval | None:
    """The interval of the share the finding's score rests on; None where it rests on none."""
    return finding.intervals.get(finding.basis_key) if finding.basis_key else None


def _rested_samples(finding: Finding) -> int | None:
    """The samples the finding's confidence rests on: its share's own population where its
    score rests on one (a finding of /proc counters and one sampled share counts no samples of
    its own), else the finding's."""
    rested = _rested(finding)
    return rested.samples if rested is not None and rested.samples is not None else finding.samples


def _widest(low: list[Finding]) -> str:
    """The loosest interval a low-confidence verdict rests on, in words ("" when unknown)."""
    rested = [i for i in map(_rested, low) if i is not None]
    if not rested:
        return ""
    interval = max(rested, key=lambda i: i.high - i.low)
    return (f" (the share it rests on is known only to {100 * interval.low:.0f}-"
            f"{100 * interval.high:.0f}%)")


def _capped(finding: Finding) -> Severity:
    if finding.low_confidence and finding.severity == Severity.CRITICAL:
        return Severity.WARNING
    return finding.severity


_ACTIVITY: dict[str, str] = {
    ThreadState.IDLE: "waiting for work", ThreadState.IO: "asleep or waiting on IO",
    ThreadState.LOCK: "waiting on locks", ThreadState.GIL: "waiting for the GIL",
    ThreadState.PYTHON: "running Python", ThreadState.NATIVE: "running native code",
    ThreadState.UNKNOWN: "in states the samples could not tell"}


def describe_activity(analysis: Analysis) -> str:
    """What the threads did, for a service that is neither busy nor waiting on anything."""
    samples = analysis.samples
    total = float(samples["count"].sum())
    if not total:
        return ""
    by_state = samples.groupby("state", observed=True)["count"].sum().sort_values(ascending=False)
    state = str(by_state.index[0])
    share = float(by_state.iloc[0]) / total
    words = _ACTIVITY.get(state, state)
    these = samples[(samples["state"] == state) & (samples["site"] >= 0)]
    where = ""
    if not these.empty:
        frame = analysis.frame(int(these.groupby("site")["count"].sum().idxmax()))
        line = ""
        try:
            from diagnose.samples import source  # never opens a FIFO or device a profile names

            line = source.getline(frame.file, frame.line).strip() if frame.line else ""
        except Exception:
            pass
        if state == ThreadState.IO and "sleep(" in line:
            words = "asleep in time.sleep"
        where = f", most in {frame.function} ({frame.file.rsplit('/', 1)[-1]}:{frame.line})"
    return f"the threads were {words} {100 * share:.0f}% of the time{where}{_chain_end(analysis)}"


def _chain_end(analysis: Analysis) -> str:
    """Where the threads' waits end when no local process serves them: the remote address of
    the chain most waited on that ends there (model/chains.py, ChainEnd.REMOTE)."""
    top = next((c for c in analysis.chains if c.end == ChainEnd.REMOTE), None)
    if top is None:
        return ""
    return (f"; {len(top.waiters)} of them waited {100 * top.share:.0f}% of the window on connections to "
            f"{top.first.address}, which no process on this host serves: the chain ends there")
