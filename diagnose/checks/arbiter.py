"""The ranking policy, in one place.

1. Every check scores its own evidence, 0-100, without looking at other checks' findings: no
   check damps its score for another check's reason. Where one finding is the mechanism of
   another (GIL waits behind preprocessing, busy cores under far too many threads), the cause
   leads because it predicts the larger gain (fewer threads return the switching) or, at equal
   gain, by the causal order (rule 5: preprocessing before the GIL it holds).
2. First, at critical strength (score >= 75) and whatever the gains, a finding that the service
   is hung (HUNG_FIRST: a deadlock; nothing on its threads runs again, so no throughput gain
   compares with it), then one that foretells a failure (FAILURE_FIRST: an unbounded backlog
   growing memory until the process is killed). Below critical strength they rank as any other.
3. Then every finding whose evidence shows a problem (score >= INFO_SCORE, 25), ordered by what
   fixing it can buy: the gain its advice predicts, `predicted_gain` (Amdahl for a serialized share, capped by
   the cores the process leaves idle; the utilization law for a pipeline stage; kernels vs pool
   synchronisation for an intra-op pool; 1.0 where only the model itself can change). A finding
   that predicts less than LEADING_GAIN (1.2x) predicts nothing worth leading with: it follows
   every finding that predicts at least that much, and such findings are ordered among
   themselves by score. Only a significant gain orders (gains_significantly): the low ends of
   the finding's score interval and of its gain interval clear INFO_SCORE and LEADING_GAIN. A
   gain whose interval straddles 1.2x, or that rests on a score that may show no problem, is
   stated in the report and ranks by score with the findings that predict nothing: noise alone
   could have made it a lever, and a lever seen on one attach in two would flip the verdict.
   The score says how sure and how bad a finding is; it does not order findings that predict a
   significant gain, so a warning that predicts 1.4x leads a critical finding that predicts
   nothing, and a point of score never flips the verdict between attaches.
   Last, findings under INFO_SCORE (their evidence shows no problem), by score.
4. Noise never picks the verdict. Each finding carries its score and gain at the ends of the 95%
   interval of the share its score rests on (base.ScoreBasis), and its rank key is taken at both
   ends. When the first two findings' rank keys overlap within those intervals — their
   significant gains tie within their intervals; neither predicts a significant gain and their
   scores overlap; one's score interval straddles the info line; or a hang's or a failure's
   straddles the critical line — either could
   have come first on another attach: they are co-primary (when the second is a contender: its
   interval reaches the critical line, it is surely a warning, or its gain, significant but for
   its score's interval straddling the info line, would lead on another attach), put in the causal order
   (rule 5), and the verdict names both with the reason in words (noise_reason,
   engine.verdict_for).
5. Equal keys fall back to the causal order of engine.CHECKS: the more specific, more actionable
   diagnosis (a blocked loop, a stage, a lock) before its symptoms (busy cores, idle workers).
   Before the causal order, a finding off the pace (off_pace: its gain bounded to nothing by a
   pipeline's bottleneck stage, on whose threads its share is not seen) follows one measured
   where the pace is set: request threads re-taking the GIL after a batcher's results wait
   behind the batcher's model, and the model names it, however high the waits scored.
   Predicted gains under NO_GAIN_BELOW are no structural gain and rank as 1.0: 1.01x against
   1.02x (two findings on a machine with no idle core) is rounding, not a reason to lead.
6. Within a co-primary pair a finding whose own share is known too loosely (low confidence)
   never leads a well-measured one that is surely critical (its whole interval at or above the
   line): a few native samples may not displace thousands. Otherwise the causal order stands.
7. One cause is named once. A finding whose leading sites name a function the lead names too is
   the lead's code seen from another side, not a second cause, when
   - both advise making that code cheaper (each one's first lever removes work): they rest on the
     same busy threads' time — the GIL's holders are the busy threads' hottest code;
     preprocessing in pure Python is what the GIL's waiters wait behind. Code of one request
     phase counts as the same code (Finding.acts_on: the GIL's holders mostly running
     preprocessing, beside a preprocessing finding), whichever functions the leading sites name;
     or
   - its own advice is predicted to buy nothing (its whole gain interval under NO_GAIN_BELOW):
     a busy stage whose more threads would share the cores its model already fills.
   Such a symptom is never a co-primary: it is folded into the verdict (`also`), and the next
   finding that is not one is the one tested for rule 4. When two findings make the same code
   cheaper, the causal order alone picks which names it, whenever the earlier one could show a
   problem (its score interval reaches the info line: on another attach its point score would),
   the later one is a wait whose servers mostly run the earlier one's phase (phase_at_the_end:
   the GIL's holders preprocessing; the wait is a hop, the phase's code the chain's end), or
   the two could swap places within their intervals (not rule 6: both point at the same
   code, so only the name could move). The verdict is then as strong as the finding folded
   into it. Whether the significance of either one's gain clears its line decides where the cause
   ranks, never its name: a tokenizer a forked tree's GIL waits queue behind was named
   preprocess_bound or gil_contention as preprocessing's score interval crossed the info line.
   A lock or pool wait that would buy something is a second cause, whatever code it sits in,
   unless its first advice is the very change another finding advises first (Finding.fixes: a
   lock over OpenBLAS's pool and the pool's synchronisation, both OPENBLAS_NUM_THREADS=1): one
   change is one cause, named by the causal order.
8. The spread of the load over worker processes (SPREAD_FINDINGS) never ranks before a finding
   that shows the requests queue on one resource they all share (QUEUE_FINDINGS: a lock, the
   GIL, a pool, a logging handler, an asyncio primitive or capacity, a local backend at its
   capacity) at a score
   that shows a problem, whatever gain the spread predicts: the uneven load is the queue's
   symptom (the process holding the queue works, the others wait on it or for requests), and
   balancing the load, or adding workers that queue on the same resource, buys nothing until
   the queue is fixed. The two swap places within the noise only where the queue's score
   interval reaches under the info line (rule 4 at the ends of that interval).
9. The garbage collector's time is inside the busy Python time other findings measure
   (COLLECTOR_CLAIMANTS: the GIL's waits, busy threads in unclassified code): it runs holding
   the GIL, under whichever Python line allocated, so its samples read as that line running
   Python and the other threads' waits behind it as GIL contention. A collector finding that
   surely shows a problem (COLLECTOR_FINDINGS, the low end of its score interval >= INFO_SCORE:
   the collector held the GIL a material share of the window) ranks before them, whatever gain
   they predict: their levers
   (vectorise the line, more processes) leave the collector's work as it was, and their gain
   counts its time as the line's. They stay listed; re-measured after the collector's fix, they
   say what is left. Like rule 8, taken at each end of the collector's score interval. The same
   holds for the kernel's work and the children's CPU (CPU_PART_CLAIMANTS): system time shows
   as the calling line running Python, a child's CPU in no sample at all, and the GIL's waits,
   the busy threads and preprocessing count the calling code's share of the samples as theirs;
   but only from warning strength (PART_LEADS_SCORE, a large part of the busy time): under it
   they rank by their gain, and take no name from their claimants by rule 7 either (the kernel's
   line, without a native sample in a call, is where the threads ran, so it shares the
   claimants' code by construction).
10. The cores other processes took (MACHINE_FINDINGS: cores_taken) rank by their score, never by
   their gain: that gain is what the machine's other tenants would give back, not what a change
   to the service buys, and on a shared machine it is large wherever the service is busy (the
   recorded attaches beside CI's other tests: 2-13x each, whatever their own cause). The
   service's own causes that predict a significant gain lead it; beside one that predicts none
   the stronger score leads, and at equal scores the causal order: after the service's own
   causes, before the busy threads' and cores' symptoms (compute_bound, cpu_bound, underloaded),
   which a starved service's samples show (a thread waiting for a core shows the line it will
   run: the fork_tree recording's two workers, busy by their samples, ran 0.15 of the 2 cores
   they wanted on a machine with none idle). So where the service's own oversubscription
   (scheduler_overhead: its runnable threads beyond its cores, or queued into a native pool,
   which cores_taken leaves out of its score) holds strongly too, it leads or shares the verdict
   within its noise and cores_taken is listed at its own severity (CI's blas_fanout attach
   py36_pool_spinning_in_the_kernel: both 100, scheduler_overhead named); a healthy service
   starved of cores has only cores_taken above the line.
The verdict is the first finding (and its co-primary), unless it is weak (then the headline says
what the threads did). A verdict whose first finding rests on fewer than confidence.MIN_SAMPLES
samples says "low confidence" in its headline and is never critical (engine.verdict_for).
"""

from __future__ import annotations

from collections.abc import Callable

from diagnose.checks.base import Finding, LeverKind
from diagnose.vocab import CRITICAL_SCORE, INFO_SCORE, WARNING_SCORE

CRITICAL = CRITICAL_SCORE

# A finding's place in the causal order (engine.order_of).
OrderOf = Callable[[Finding], int]
# (tier: hung or failing / shows a problem / below the info line, band: urgency or whether it
# predicts a gain, minus gain or score, off the pace, causal order): smaller ranks first.
RankKey = tuple[int, int, float, int, int]


# Findings that foretell a failure (memory growing without bound until the process is killed):
# at critical strength they lead whatever the others' throughput gains, because no throughput
# matters once the process is gone.
FAILURE_FIRST = ("unbounded_backlog",)
# Findings that the service is hung (threads that will never run again): ahead even of those.
# A hung service has no throughput to gain a ratio of, so no gain can outrank it.
HUNG_FIRST = ("deadlock",)


# Findings that the requests queue on one resource every request shares (rule 8).
QUEUE_FINDINGS = ("lock_contention", "gil_contention", "pool_wait", "logging_lock", "async_wait",
                  "backend_saturated")
# Findings on how the load spreads over the worker processes: never ahead of such a queue.
SPREAD_FINDINGS = ("worker_imbalance",)


# Findings on the garbage collector's own time (rule 9), and the findings that count its time as
# their code's when no native frame tells it apart.
COLLECTOR_FINDINGS = ("gc_pressure",)
COLLECTOR_CLAIMANTS = ("gil_contention", "cpu_bound")
# Rule 9 for every part of the CPU no Python frame shows: the finding -> the findings that count
# its time as their code's.
KERNEL_CLAIMANTS = ("gil_contention", "cpu_bound", "preprocess_bound")
# The strength from which such a part ranks before its claimants whatever they predict. The
# collector's, once it surely shows a problem: it is read from the target's memory and runs
# inside the claimants' own samples. The kernel's work and the children's CPU, once they are a
# warning, a large part of the busy time: under it (a share that only shows a problem) they rank
# by their gain like any finding. The gil_contention fixture on CPython 3.6, starved beside a
# spinner in CI, read 28% of its CPU as page faults (kernel_work 30, 1.38x) beside the GIL's 78%
# (20x), and the faults took the verdict.
PART_LEADS_SCORE = WARNING_SCORE

CPU_PART_CLAIMANTS: dict[str, tuple[str, ...]] = {
    **{f: COLLECTOR_CLAIMANTS for f in COLLECTOR_FINDINGS},
    "kernel_work": KERNEL_CLAIMANTS, "children_cpu": KERNEL_CLAIMANTS,
}


def part_leads_score(part: str) -> int:
    """The score from which the CPU part `part` ranks before (and names) its claimants."""
    return INFO_SCORE if part in COLLECTOR_FINDINGS else PART_LEADS_SCORE


def _urgency(finding: Finding) -> int:
    """0: the service is hung; 1: it will fail; 2: it is slow."""
    if finding.id in HUNG_FIRST:
        return 0
    return 1 if finding.id in FAILURE_FIRST else 2


def hung_or_failing(finding: Finding) -> bool:
    """It foretells a hang or a failure at critical strength: it leads whatever the gains."""
    return finding.score >= CRITICAL and _urgency(finding) < 2


# Below this ratio a predicted gain is no gain: paired runs on a shared machine do not resolve 5%,
# and the estimates behind a gain (Amdahl on a sampled share, the cores left idle) are no finer.
NO_GAIN_BELOW = 1.05


def _ranked_gain(gain: float | None) -> float:
    return 1.0 if gain is None or gain < NO_GAIN_BELOW else gain


# The least predicted gain that ranks a finding among those that buy something: a finding whose
# first lever predicts less ("change the model": 1.0) follows every finding that predicts this much.
# What the calibration resolves (benchmarks/README.md, "Calibration"): first advice predicted at
# 1.00-1.11x measured 0.87-1.24x, so a smaller prediction is no surer a gain than none. At 1.1 a
# 1.10-1.17x GIL or thread finding took batching's verdict from the model on 2 attaches in 5.
LEADING_GAIN = 1.2


def _key(finding: Finding, score: float, gain: float | None) -> tuple[int, int, float]:
    """(tier, band, minus gain or score) at one end of the finding's intervals (rules 2-3)."""
    urgency = _urgency(finding)
    if score >= CRITICAL and urgency < 2:
        return (0, urgency, 0.0)
    if score >= INFO_SCORE:
        ranked = _ranked_gain(gain)
        if ranked >= LEADING_GAIN:
            return (1, 0, -ranked)
        return (1, 1, -score)
    return (2, 2, -score)


def gains_significantly(finding: Finding) -> bool:
    """Its evidence shows a problem and its gain is worth leading with at the low ends of both
    intervals: noise alone could not have made it a lever (rule 3). A gain whose interval
    straddles LEADING_GAIN, or that rests on a score whose interval reaches under the info line,
    is said in the report but never orders findings by its size."""
    return finding.score_range[0] >= INFO_SCORE and _gain_surely_leads(finding)


def _gain_surely_leads(finding: Finding) -> bool:
    """Its gain interval's low end is a gain worth leading with."""
    return _ranked_gain(finding.gain_range[0]) >= LEADING_GAIN


# Findings on what other processes took from the service (rule 10): their gain is stated, not ranked.
MACHINE_FINDINGS = ("cores_taken",)


def _gain_if_significant(finding: Finding, gain: float | None) -> float | None:
    return gain if gains_significantly(finding) and finding.id not in MACHINE_FINDINGS else None


def off_pace(finding: Finding) -> bool:
    """Its predicted gain was bounded to nothing by a pipeline's bottleneck stage: the threads it
    measured do not set the pace, and its share is not seen on the threads that do (rule 5)."""
    return finding.bounded_by_stage is not None and _ranked_gain(finding.predicted_gain) == 1.0


def rank_key(finding: Finding, order: int) -> RankKey:
    gain = _gain_if_significant(finding, finding.predicted_gain)
    return (*_key(finding, finding.score, gain), int(off_pace(finding)), order)


def _best_key(finding: Finding, order: int) -> RankKey:
    gain = _gain_if_significant(finding, finding.gain_range[1])
    return (*_key(finding, finding.score_range[1], gain), int(off_pace(finding)), order)


def _worst_key(finding: Finding, order: int) -> RankKey:
    gain = _gain_if_significant(finding, finding.gain_range[0])
    return (*_key(finding, finding.score_range[0], gain), int(off_pace(finding)), order)


def queue_leads(queue: Finding, spread: Finding, score: int) -> bool:
    """Rule 8: `queue`, at `score`, shows the requests queue on a resource they all share, and
    `spread` is only how the load spread over the workers: the queue ranks first."""
    return queue.id in QUEUE_FINDINGS and spread.id in SPREAD_FINDINGS and score >= INFO_SCORE


def collector_leads(collector: Finding, claimant: Finding, score: int) -> bool:
    """Rule 9: `collector`, at `score`, shows the garbage collector takes a material share of the
    running samples, and `claimant` counts that time as its own code's: the collector ranks
    first."""
    return claimant.id in CPU_PART_CLAIMANTS.get(collector.id, ()) and score >= part_leads_score(collector.id)


def _ahead(a: Finding, a_key: RankKey, a_score: int, b: Finding, b_key: RankKey, b_score: int) -> bool:
    """`a` ranks before `b`, each taken at one end of its intervals (its key and its score
    there): rules 8 and 9 first, then the keys."""
    if queue_leads(a, b, a_score) or collector_leads(a, b, a_score):
        return True
    if queue_leads(b, a, b_score) or collector_leads(b, a, b_score):
        return False
    return a_key < b_key


def ranks_before(a: Finding, b: Finding, order_of: OrderOf) -> bool:
    """`a` ranks before `b` at their point scores and gains."""
    return _ahead(a, rank_key(a, order_of(a)), a.score, b, rank_key(b, order_of(b)), b.score)


def within_noise(a: Finding, b: Finding, order_of: OrderOf) -> bool:
    """Either could rank first: each one at the favourable ends of its intervals ranks before
    the other at its unfavourable ends. Equal keys are no noise: the causal order settles them
    the same way on every attach."""
    oa, ob = order_of(a), order_of(b)
    return (_ahead(a, _best_key(a, oa), a.score_range[1], b, _worst_key(b, ob), b.score_range[0])
            and _ahead(b, _best_key(b, ob), b.score_range[1], a, _worst_key(a, oa), a.score_range[0]))


def _queues_first(ranked: list[Finding]) -> list[Finding]:
    """Rule 8: each queue finding showing a problem moves ahead of the spread findings ranked
    before it; the rest keep their places."""
    out = list(ranked)
    for spread in [f for f in out if f.id in SPREAD_FINDINGS]:
        at = next(i for i, f in enumerate(out) if f is spread)
        queues = [f for f in out[at + 1:] if queue_leads(f, spread, f.score)]
        if queues:
            out = out[:at] + queues + [f for f in out[at:] if all(f is not q for q in queues)]
    return out


def _collector_first(ranked: list[Finding]) -> list[Finding]:
    """Rule 9: a collector finding that surely shows a problem (the low end of its score's
    interval) moves ahead of the findings ranked before it that count its time as their code's;
    the rest keep their places. One that only may (a few native samples) ranks by its gain, and
    may share the verdict within the noise (rule 4)."""
    out = list(ranked)
    for collector in [f for f in out
                      if f.id in CPU_PART_CLAIMANTS and f.score_range[0] >= part_leads_score(f.id)]:
        at = next(i for i, f in enumerate(out) if f is collector)
        first = next((i for i, f in enumerate(out[:at])
                      if collector_leads(collector, f, collector.score_range[0])), None)
        if first is not None:
            out = out[:first] + [collector] + [f for f in out[first:] if f is not collector]
    return out


def rank(findings: list[Finding], order_of: OrderOf) -> tuple[Finding, ...]:
    """`order_of(finding) -> int`: its place in the causal order. The same work seen twice within
    the noise is named by the causal order (rule 7); co-primary findings (rule 4) come first in
    the causal order, whichever scored higher on this attach (but rule 6)."""
    ranked = _collector_first(_queues_first(sorted(findings, key=lambda f: rank_key(f, order_of(f)))))
    if not ranked:
        return ()
    ranked = _named_by_twin(ranked, order_of)
    rival = next_cause(ranked)
    if rival is not None and co_primary(carrier(ranked[0], ranked, order_of), rival, order_of):
        ranked = _to_front(ranked, in_pair_order([ranked[0], rival], order_of))
        # the pair's first, by the causal order, may be a wait whose servers run a phase: the
        # phase names it there too (a model share leading on its score put the GIL second)
        ranked = _named_by_twin(ranked, order_of)
    return tuple(ranked)


def _named_by_twin(ranked: list[Finding], order_of: OrderOf) -> list[Finding]:
    """Rule 7's name: the first finding's twin (the same work seen from another side) takes the
    front when it comes first in the causal order and could show a problem, is the phase the
    first one's servers run, or could have ranked first within the noise."""
    twin = next((f for f in ranked[1:] if same_work(ranked[0], f)), None)
    if (twin is not None and order_of(twin) < order_of(ranked[0]) and not off_pace(twin)
            and (twin.score_range[1] >= _naming_score(twin, ranked[0]) or phase_at_the_end(ranked[0], twin)
                 or within_noise(ranked[0], twin, order_of))):
        return _to_front(ranked, [twin])
    return ranked


def _naming_score(twin: Finding, lead: Finding) -> int:
    """The score `twin` must be able to reach to take the name from `lead`: the info line; for a
    part of the CPU no frame shows naming code that counts it as its own (rule 9), rule 9's own
    bar. Such a part's line is where the threads ran when it is an estimate (the system time
    spread over the running lines), so it shares the claimant's code by construction: at a share
    that only shows a problem it is a part of that code's time, not its name."""
    if lead.id in CPU_PART_CLAIMANTS.get(twin.id, ()):
        return part_leads_score(twin.id)
    return INFO_SCORE


def carrier(named: Finding, ranked: list[Finding] | tuple[Finding, ...], order_of: OrderOf) -> Finding:
    """The finding whose rank the name `named` stands on: itself, or the same work seen from
    another side that ranked higher (rule 7 gives the name by the causal order, not the rank).
    Whether another cause shares the verdict is judged against it."""
    return min([named, *(f for f in ranked if same_work(named, f))], key=lambda f: rank_key(f, order_of(f)))


def _to_front(ranked: list[Finding], first: list[Finding]) -> list[Finding]:
    return first + [f for f in ranked if all(f is not g for g in first)]


# How many of a finding's sites say what code its advice changes: the hottest few (a finding's
# later sites are tails of a few percent each, shared by many findings).
LEADING_SITES = 3


def _code(finding: Finding) -> set[tuple[str, str]]:
    return {(s.function, s.file) for s in finding.sites[:LEADING_SITES]}


def shared_code(a: Finding, b: Finding) -> list[str]:
    """The functions `b` names among its leading sites that `a` names too, in `a`'s order."""
    theirs = _code(b)
    return [s.function for s in a.sites[:LEADING_SITES] if (s.function, s.file) in theirs]


def _removes_work(finding: Finding) -> bool:
    return bool(finding.levers) and finding.levers[0].kind == LeverKind.REMOVE_WORK


def same_phase(a: Finding, b: Finding) -> bool:
    """Both make cheaper the code of one request phase (Finding.acts_on): the GIL's holders
    running the preprocessing a preprocessing finding measures, whichever of its functions each
    one's few leading sites happen to name on this attach."""
    return a.acts_on is not None and a.acts_on == b.acts_on


def phase_at_the_end(lead: Finding, twin: Finding) -> bool:
    """`lead` is a wait whose servers mostly run the phase `twin` measures (the GIL's holders
    running preprocessing), and `twin` saw that phase's work at all: the wait is a hop, the phase's
    code the end of its chain, so the phase names the cause whatever its own score (rule 7). Its
    score interval crossing the info line flipped the name between attaches of one service."""
    return same_phase(lead, twin) and twin.score > 0


def same_fix(a: Finding, b: Finding) -> bool:
    """Both advise the same change first (Finding.fixes: the same knobs at the same values): a
    lock whose holders wait in OpenBLAS's pool and the pool's own synchronisation, each saying
    OPENBLAS_NUM_THREADS=1."""
    fixes = a.fixes
    return bool(fixes) and all(f.knob for f in fixes) and fixes == b.fixes


def same_work(a: Finding, b: Finding) -> bool:
    """Rule 7, first case (symmetric): both advise making code cheaper and name that code in
    common, or that phase's code: the same threads' busy time, measured twice; or both advise
    the same change first."""
    return a is not b and ((_removes_work(a) and _removes_work(b)
                            and (bool(shared_code(a, b)) or same_phase(a, b))) or same_fix(a, b))


def symptom_of(lead: Finding, other: Finding) -> bool:
    """Rule 7: `other` is `lead`'s code seen from another side — the same work measured twice, or
    a finding on the same code whose own advice is predicted to buy nothing. Decided from what
    the findings measure and predict, never from their ids."""
    if other is lead:
        return False
    if same_work(lead, other):
        return True
    return bool(shared_code(lead, other)) and other.gain_range[1] < NO_GAIN_BELOW


def one_cause(a: Finding, b: Finding) -> bool:
    """Either is the other's symptom (rule 7): the pair names one cause, whichever ranked first
    (a lead that buys nothing on a stage's own code does not make the stage a second cause)."""
    return symptom_of(a, b) or symptom_of(b, a)


def next_cause(ranked: list[Finding] | tuple[Finding, ...]) -> Finding | None:
    """The first finding after the lead that is not the lead's cause seen again (rule 7): the one
    that may share the verdict (rule 4)."""
    return next((f for f in ranked[1:] if not one_cause(ranked[0], f)), None)


def symptoms(named: list[Finding], ranked: list[Finding] | tuple[Finding, ...]) -> list[Finding]:
    """The findings folded into the verdict (rule 7): one cause with a named finding, and
    contenders on their own (they would have been named beside it otherwise)."""
    return [f for f in ranked if all(f is not n for n in named)
            and any(one_cause(n, f) for n in named) and contender(f)]


def contender(finding: Finding) -> bool:
    """It could be critical on another attach (its interval reaches the line), or it is surely a
    warning (its whole interval at or above the warning line), or it could lead by its gain on
    another attach (leads_if_shown). Not its point score: a model's share at 51 (33-67) beside a
    wide GIL interval is a warning on this attach and info on the next, and whether it is named
    would follow that."""
    return (finding.score_range[1] >= CRITICAL or finding.score_range[0] >= WARNING_SCORE
            or leads_if_shown(finding))


def leads_if_shown(finding: Finding) -> bool:
    """Its gain interval clears LEADING_GAIN, and only its score's interval, straddling the info
    line, keeps that gain from ordering (gains_significantly): on an attach whose score landed a
    few points higher it leads every finding that predicts nothing. A preprocessing lever of
    1.27x (1.23-1.32) at a score of 35 (23-49) beside a model share that predicts 1.0x: which one
    the verdict names must not turn on those few points."""
    return finding.score_range[0] < INFO_SCORE <= finding.score_range[1] and _gain_surely_leads(finding)


def in_pair_order(pair: list[Finding], order_of: OrderOf) -> list[Finding]:
    """A co-primary pair as the verdict names it: the causal order (rule 4), unless the first
    is low-confidence and the second well-measured and surely critical (rule 6)."""
    first, second = sorted(pair, key=order_of)
    if (first.low_confidence and not second.low_confidence
            and second.score_range[0] >= CRITICAL):
        return [second, first]
    return [first, second]


def co_primary(first: Finding, second: Finding, order_of: OrderOf) -> bool:
    """The second of the first two findings shares the verdict: noise alone could have ranked it
    first, and it is a contender for the headline (contender: it could be critical or lead by
    its gain on another attach, or it is surely a warning). A finding that may be "info"
    here is listed below the verdict, not named in it: naming it would turn on how near its
    point score came to the other's interval, which moves between attaches."""
    # The test is of the pair's ranks, not of their places here: verdict_for asks again of the
    # pair in the causal order, where the finding that ranked second may come first.
    lead, runner_up = (first, second) if ranks_before(first, second, order_of) else (second, first)
    return (contender(runner_up) and lead.score_range[1] >= INFO_SCORE
            and within_noise(first, second, order_of))


def noise_reason(a: Finding, b: Finding) -> str:
    """Why `a` and `b` share the verdict, in words with their intervals."""
    def score(f: Finding) -> str:
        low, high = f.score_range
        return f"{f.id} {f.score}" + (f" (95% interval {low}-{high})" if low != high else "")

    def gain(f: Finding) -> str:
        low, high = f.gain_range
        return f"{f.id} {f.predicted_gain or 1.0:.2f}x" + (f" ({low:.2f}-{high:.2f})" if low != high else "")

    # The tiers and bands the pair's keys reach at the ends of their intervals (rules 2-3).
    ends = [_key(f, f.score_range[i], _gain_if_significant(f, f.gain_range[i]))[:2]
            for f in (a, b) for i in (0, 1)]
    tiers, bands = {t for t, _ in ends}, {b for t, b in ends if t == 1}
    lever = next((f for f in (a, b) if leads_if_shown(f)), None)
    if lever is not None:
        low, high = lever.score_range
        return (f"{gain(lever)} would lead if its score cleared the line ({INFO_SCORE}) under which "
                f"a finding shows no problem, and its score is known only to {low}-{high}: "
                f"{score(a)}, {score(b)}")
    if 0 in tiers:
        return (f"their scores straddle the critical line ({CRITICAL}) at which a hang or a failure "
                f"leads, within their intervals: {score(a)}, {score(b)}")
    if 2 in tiers:
        return (f"their scores straddle the line ({INFO_SCORE}) under which a finding shows no "
                f"problem, within their intervals: {score(a)}, {score(b)}")
    if bands == {0}:
        return f"their predicted gains tie within their intervals: {gain(a)}, {gain(b)}"
    return (f"neither predicts a gain and their scores overlap within their intervals: "
            f"{score(a)}, {score(b)}")
