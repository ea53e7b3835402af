"""`diagnose experiment`: which setting makes the service serve more? Measure it, don't predict it.

The variants are the cartesian product of the `--vary NAME=v1,v2` values (at most
MAX_VARIANTS); the *baseline* is the first value of every `--vary`. The service is started fresh
from its command for every run with the variant's environment applied (a value of None removes
the variable: "unset"), loaded, and stopped with its whole process group
(diagnose/load/experiment_run.py). Runs alternate, the order rotated each round, so a slow spell of a
shared machine hits every variant; the gain is the median of the same-round ratios to the
baseline. The best median throughput is called the *winner* only when, in every round, it
served more than every other variant by the noise margin (5%); otherwise the JSON says
`winner: null`, `outcome: "no clear winner"`, and `leader` names the best median anyway.

A variant whose service fails (exits, stops answering) is kept with its error and no report,
and is not run again; the others go on.

A report's first finding can name its own fix (`evidence.fix`): `--from-report` turns a knob
that is an environment variable into `--vary KNOB=<as inherited>,<advised>`, and the measured
gain is shown beside the finding's predicted one: advice proven (better in every round),
disproved (worse in every round) or not proven.

Everything here is pure: `run_experiment` takes the function that performs one run, so the
alternation and the decisions are tested without processes (tests/unit/test_experiment.py).
"""

from __future__ import annotations

import itertools
import re
import shlex
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from diagnose.errors import BadProfile, LoadFailed
from diagnose.report.load_report import (Advice, ArmMedians, ArmRecord, Baseline, Decision, ExperimentPlan,
                                 ExperimentReport, ExperimentTarget, GeneratorInfo, Pick, Run,
                                 StepVerdict, SweepReport, SweepStep, Variant, VariantLatency)
from diagnose.report.redact import redact_argv

if TYPE_CHECKING:
    from diagnose.load.loadtest import Generator

NOISE_MARGIN = 0.05
# Cores other processes used during a run worth a warning (as a sweep's steps): a variant that
# gains by a second core gains nothing while another tenant holds it.
SHARED_CORES = 0.25
MAX_VARIANTS = 16

# Knobs a finding may advise that are read from the environment at start-up.
ENV_KNOBS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "WEB_CONCURRENCY")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
UNSET = "unset"  # how a removed variable is written on the command line and the page


def shown_command(argv: Sequence[str]) -> str:
    """The service's command as the experiment's report writes it: shell-quoted, its secrets
    masked (report/redact.py), as every output shows a command line."""
    return shlex.join(redact_argv(list(argv)))


@dataclass(frozen=True)
class Arm:
    name: str                      # "OMP_NUM_THREADS=8" (or "baseline" / "variant" for --set)
    argv: tuple[str, ...]
    env: tuple[tuple[str, str | None], ...] = ()   # None: the variable is removed

    def describe(self) -> ArmRecord:
        return ArmRecord(name=self.name, command=shown_command(self.argv), env=dict(self.env))


# -- what to compare ------------------------------------------------------------------------------

def _check_name(name: str, option: str, item: str) -> None:
    if not _ENV_NAME.match(name):
        raise ValueError(f"{option} takes an environment variable name, got {item!r}")


def parse_assignments(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`["A=1", "B=x y"]` -> (("A", "1"), ("B", "x y")); ValueError for anything else."""
    pairs = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set takes NAME=VALUE, got {item!r}")
        _check_name(name, "--set NAME=VALUE", item)
        pairs.append((name, value))
    return tuple(pairs)


def parse_vary(items: Sequence[str]) -> tuple[tuple[str, tuple[str | None, ...]], ...]:
    """`["OMP_NUM_THREADS=1,8"]` -> (("OMP_NUM_THREADS", ("1", "8")),); the value `unset`
    removes the variable (None). A single value is allowed: it fixes that variable for every
    variant. ValueError for a bad name, a name given twice or a value listed twice."""
    dims, seen = [], set()
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not values:
            raise ValueError(f"--vary takes NAME=VALUE1,VALUE2[,...], got {item!r}")
        _check_name(name, "--vary NAME=VALUES", item)
        if name in seen:
            raise ValueError(f"--vary {name} is given twice; list all its values in one --vary")
        seen.add(name)
        parsed = tuple(None if v == UNSET else v for v in values.split(","))
        if len(set(parsed)) != len(parsed):
            raise ValueError(f"--vary {name}: a value is listed twice in {values!r}")
        dims.append((name, parsed))
    return tuple(dims)


def arm_name(env: Sequence[tuple[str, str | None]]) -> str:
    return " ".join(f"{k}={UNSET if v is None else v}" for k, v in env) or "as inherited"


def arms_from_vary(argv: Sequence[str], dims: Sequence[tuple[str, Sequence[str | None]]],
                   limit: int = MAX_VARIANTS) -> tuple[Arm, ...]:
    """One arm per combination of the varied values, the baseline (every first value) first.
    ValueError beyond `limit` combinations or with nothing to compare."""
    count = 1
    for _name, values in dims:
        count *= len(values)
    if count > limit:
        raise ValueError(f"--vary gives {count} combinations; at most {limit} are run "
                         f"(each is started and loaded every round)")
    if count < 2:
        raise ValueError("nothing to compare: --vary needs at least two values in all")
    names = [name for name, _ in dims]
    arms = []
    for combo in itertools.product(*(values for _, values in dims)):
        env = tuple(zip(names, combo))
        arms.append(Arm(arm_name(env), tuple(argv), env))
    return tuple(arms)


def fix_from_report(path: Path) -> tuple[tuple[tuple[str, str], ...], Advice]:
    """The environment assignments a report's first finding advises (`evidence.fix`: one knob,
    or a list of them), and that finding's summary (id, fix, predicted gain). BadProfile
    (exit 6) when the file is not a report or its advice is not an environment knob."""
    from diagnose.report.reader import read_findings

    findings = read_findings(path)
    if not findings:
        raise BadProfile(f"{path}: the report has no finding, so no advice to try")
    finding = findings[0]
    declared = finding.value("fix")
    fix = declared.value if declared is not None else None
    info = Advice(finding=finding.id, fix=fix or None, predicted_gain=finding.predicted_gain,
                  advice=finding.advice[0] if finding.advice else None)
    pairs = []
    for one in finding.fixes or (None,):
        if one is None or one.knob not in ENV_KNOBS or one.value is None:
            raise BadProfile(f"{path}: the first finding ({finding.id}) advises "
                             f"{fix or 'no knob'}, not an environment variable this command "
                             f"can set; give the change with --vary")
        pairs.append((one.knob, str(one.value)))
    return tuple(pairs), info


def vary_from_advice(advised: Sequence[tuple[str, str]], environ: Mapping[str, str]
                     ) -> tuple[tuple[str, tuple[str | None, str]], ...]:
    """`--vary KNOB=<as inherited, or unset>,<advised>` for each advised knob; ValueError when
    the service already runs with the advised value (nothing to compare)."""
    dims = []
    for knob, value in advised:
        current = environ.get(knob)
        if current == value:
            raise ValueError(f"the service already runs with {knob}={value}, the advised "
                             f"value: nothing to compare")
        dims.append((knob, (current, value)))
    return tuple(dims)


def advised_arm(arms: Sequence[Arm], advised: Sequence[tuple[str, str]]) -> Arm | None:
    """The arm that differs from the baseline by exactly the advised assignments (without
    them, the second of two arms: the change given by hand)."""
    if not advised:
        return arms[1] if len(arms) == 2 else None
    wanted = dict(arms[0].env) | dict(advised)
    return next((a for a in arms if dict(a.env) == wanted), None)


# -- the rounds -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunSettings:
    url: str
    concurrency: int | None = 8    # --at-load N (closed model); None with --at-rate or a sweep
    seconds: int = 8
    warmup_s: int = 2
    rounds: int = 3
    generator: Generator | None = None  # None only where no run is made (a report's settings)
    rate: float | None = None      # --at-rate R requests/s (open model)
    slo_p99_ms: float | None = None
    diagnose_seconds: float = 0.0  # attach to each variant once, under load, for its verdict
    user_rules: dict | None = None

    @property
    def level(self) -> float | None:
        """The generator's level for one step: connections, or requests/s (open model)."""
        return self.rate if self.rate is not None else self.concurrency

    @property
    def mode(self) -> str:
        if self.rate is not None:
            return "rate"
        return "load" if self.concurrency is not None else "sweep"

    def describe(self) -> ExperimentPlan:
        return ExperimentPlan(mode=self.mode, concurrency=self.concurrency, rate=self.rate,
                              slo_p99_ms=self.slo_p99_ms, seconds=self.seconds,
                              warmup_s=self.warmup_s, rounds=self.rounds,
                              diagnose_seconds=self.diagnose_seconds)

    def load_label(self) -> str:
        if self.mode == "rate":
            return f"at {self.rate:g} req/s offered"
        if self.mode == "load":
            return f"at {self.concurrency} connections"
        return (f"at the p99 SLO of {self.slo_p99_ms:g} ms" if self.slo_p99_ms
                else "at the knee of each sweep")


@dataclass
class ExperimentResult:
    arms: tuple[Arm, ...]
    runs: list[Run] = field(default_factory=list)   # in the order run


def round_order(round_index: int, n: int = 2) -> list[int]:
    """Arm indices for one round, rotated by one each round (0,1,2 / 1,2,0 / 2,0,1 ...)."""
    return [(round_index + k) % n for k in range(n)]


def failed_arms(result: ExperimentResult) -> dict[str, str]:
    """Arm name -> the first error of its runs."""
    failed: dict[str, str] = {}
    for r in result.runs:
        if r.error and r.arm not in failed:
            failed[r.arm] = r.error
    return failed


def run_experiment(arms: Sequence[Arm], rounds: int, run: Callable[[Arm], Run],
                   log: Callable[[str], None] = lambda _m: None,
                   result: ExperimentResult | None = None) -> ExperimentResult:
    """Every arm once per round, in rotated order. A run that raises LoadFailed is recorded with
    its error and its arm is not run again (a service that crashed once is not measured)."""
    result = result if result is not None else ExperimentResult(tuple(arms))
    for r in range(rounds):
        for index in round_order(r, len(arms)):
            arm = arms[index]
            if arm.name in failed_arms(result):
                continue
            try:
                figures = run(arm)
            except LoadFailed as exc:
                result.runs.append(Run(round=r, arm=arm.name, error=exc.message))
                log(f"  round {r + 1}/{rounds} {arm.name}: failed: "
                    f"{exc.message.splitlines()[0]}")
                continue
            result.runs.append(replace(figures, round=r, arm=arm.name))
            log(f"  round {r + 1}/{rounds} {arm.name}: {figures.rps or 0:,.1f} req/s, "
                f"p99 {figures.p99_ms or 0:,.1f} ms")
    return result


# -- the decisions --------------------------------------------------------------------------------

def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 4) if present else None


def _rps(run: Run) -> float:
    """A measured run's throughput (callers keep measured runs only)."""
    return run.rps or 0.0


def _measured(result: ExperimentResult, arm: str) -> list[Run]:
    return [r for r in result.runs if r.arm == arm and r.measured]


def _by_round(result: ExperimentResult) -> dict[int, dict[str, Run]]:
    """Round -> arm name -> that run, measured runs only."""
    rounds: dict[int, dict[str, Run]] = {}
    for r in result.runs:
        if r.measured:
            rounds.setdefault(r.round, {})[r.arm] = r
    return rounds


def same_round_ratios(result: ExperimentResult, arm: str, base: str) -> list[float]:
    return [_rps(pair[arm]) / _rps(pair[base]) for _, pair in sorted(_by_round(result).items())
            if arm in pair and base in pair and _rps(pair[base]) > 0]


def compare(ratios: Sequence[float], margin: float = NOISE_MARGIN) -> str:
    """"better" / "worse" only when every round agrees beyond the margin."""
    if not ratios:
        return "no result"
    if all(x >= 1 + margin for x in ratios):
        return "better"
    if all(x <= 1 - margin for x in ratios):
        return "worse"
    return "no clear difference"


def decide(result: ExperimentResult, margin: float = NOISE_MARGIN,
           other: str | None = None) -> Decision:
    """One arm (`other`, default the second) against the baseline: better, worse or no clear
    difference, with the same-round ratios and every arm's medians."""
    base = result.arms[0].name
    variant = other or (result.arms[1].name if len(result.arms) > 1 else base)
    ratios = same_round_ratios(result, variant, base)
    ratio = _median(ratios)
    outcome = compare(ratios, margin)
    if outcome == "no result":
        headline = "no round measured both the baseline and the variant"
    elif outcome == "no clear difference":
        headline = (f"no clear difference: {ratio:.2f}× in the median, rounds from "
                    f"{min(ratios):.2f}× to {max(ratios):.2f}× (the margin is ±{margin:.0%})")
    else:
        headline = (f"the change serves {'only ' if outcome == 'worse' else ''}{ratio:.2f}× the "
                    f"requests per second (every one of {len(ratios)} rounds: "
                    f"{min(ratios):.2f}–{max(ratios):.2f}×)")
    shared = max((r.other_cores for r in result.runs if r.other_cores is not None), default=None)
    if shared is not None and shared >= SHARED_CORES:
        headline += (f"; the machine was shared: other processes used up to {shared:.2f} cores "
                     "during a run (measured, /proc/stat), so the rounds may not compare")
    else:
        shared = None
    arms = {}
    for arm in result.arms:
        mine = _measured(result, arm.name)
        arms[arm.name] = ArmMedians(
            runs=len(mine), rps_median=_median(r.rps for r in mine),
            rps=tuple(_rps(r) for r in mine),
            p99_ms_median=_median(r.p99_ms for r in mine),
            service_cores_median=_median(r.service_cores for r in mine),
            generator_cores_max=max((r.generator_cores for r in mine
                                     if r.generator_cores is not None), default=None))
    return Decision(outcome=outcome, headline=headline, variant=variant, ratio=ratio,
                    ratios=tuple(round(x, 4) for x in ratios), margin=margin, arms=arms,
                    shared_cores=shared)


@dataclass(frozen=True)
class Choice:
    """The winner (or no winner, and the leader) of an experiment's runs."""

    outcome: str  # winner, no clear winner, no result
    headline: str
    winner: Pick | None
    leader: Pick | None
    margin: float


def choose_winner(result: ExperimentResult, label: str = "",
                  margin: float = NOISE_MARGIN) -> Choice:
    """The variant with the best median throughput, called the winner only when it served more
    than every other measured variant by `margin` in every round that measured them all."""
    arms = result.arms
    base = arms[0]
    failed = failed_arms(result)
    measured = [a for a in arms if a.name not in failed and _measured(result, a.name)]
    if base not in measured:
        return Choice("no result", "the baseline was not measured: nothing to compare with",
                      None, None, margin)
    if len(measured) < 2:
        return Choice("no result", "only the baseline was measured: nothing to compare",
                      None, None, margin)
    medians = {a.name: _median(r.rps for r in _measured(result, a.name)) or 0.0
               for a in measured}
    leader = max(measured, key=lambda a: medians[a.name])
    ratios = same_round_ratios(result, leader.name, base.name) if leader != base else [1.0]
    gain = _median(ratios)  # None: no round measured both (an interrupted experiment)
    times = "?" if gain is None else f"{gain:.2f}"
    complete = [pair for pair in _by_round(result).values()
                if all(a.name in pair for a in measured)]
    clear = bool(complete) and all(
        _rps(pair[leader.name]) >= (1 + margin) * _rps(pair[a.name])
        for pair in complete for a in measured if a != leader)
    entry = Pick(env=dict(leader.env), name=leader.name, gain=gain,
                 ratios=tuple(round(x, 4) for x in ratios), rounds_agreeing=len(complete))
    runner_up = max((a for a in measured if a != leader), key=lambda a: medians[a.name])
    if clear:
        what = ("the baseline serves the most" if leader == base else
                f"{leader.name} serves {times}× the baseline ({base.name})")
        headline = (f"{what}: {medians[leader.name]:,.1f} req/s median {label}, "
                    f"ahead of every other variant by more than {margin:.0%} in every one of "
                    f"{len(complete)} round{'s' if len(complete) != 1 else ''}").replace("  ", " ")
        return Choice("winner", headline, entry, entry, margin)
    headline = (f"no clear winner: {leader.name} has the best median ({medians[leader.name]:,.1f}"
                f" req/s {label}, {times}× the baseline) but {runner_up.name} "
                f"({medians[runner_up.name]:,.1f} req/s) came within ±{margin:.0%} or ahead in "
                f"some round").replace("  ", " ")
    return Choice("no clear winner", headline, None, entry, margin)


def advice_outcome(result: ExperimentResult, advice: Advice, arm: Arm | None,
                   margin: float = NOISE_MARGIN) -> Advice:
    """The advised arm against the baseline: proven (more in every round), disproved (less in
    every round) or not proven; beside the finding's predicted gain."""
    ratios = same_round_ratios(result, arm.name, result.arms[0].name) if arm else []
    status = {"better": "advice proven", "worse": "advice disproved"}.get(
        compare(ratios, margin), "advice not proven")
    return replace(advice, arm=arm.name if arm else None, status=status,
                   measured_gain=_median(ratios) if ratios else None,
                   ratios=tuple(round(x, 4) for x in ratios))


def throughput_at_slo(report: SweepReport, slo_p99_ms: float | None) -> SweepStep | None:
    """The step a sweep is judged by: the highest throughput among stable steps whose p99 is
    within the SLO; without an SLO, the knee step (else the highest throughput)."""
    measured = list(report.steps)
    if slo_p99_ms is not None:
        within = [s for s in measured if s.latency_ms.p99 is not None
                  and s.latency_ms.p99 <= slo_p99_ms and s.stable]
        return max(within, key=lambda s: s.throughput_rps, default=None)
    knee = report.knee_step or report.step_at(report.summary.knee.index
                                              if report.summary.knee else None)
    if knee is not None:
        return knee
    return max(measured, key=lambda s: s.throughput_rps, default=None)


# -- the report -----------------------------------------------------------------------------------

def _verdict_of(error: str | None, mine: Sequence[Run]
                ) -> tuple[StepVerdict | None, str | None, str | None]:
    """The arm's verdict (taken in one round), why there is none, and its report's name."""
    diagnosed = next((r.diagnosis for r in mine if r.diagnosis is not None), None)
    if error:
        return None, "the service failed: no verdict", None
    if diagnosed is None:
        return None, "not diagnosed (--diagnose-seconds 0, or no run completed)", None
    if diagnosed.verdict is not None:
        return diagnosed.verdict, None, diagnosed.html_name
    return None, diagnosed.error or "the diagnosis gave no verdict", None


def variant_summaries(result: ExperimentResult) -> tuple[Variant, ...]:
    """One entry per arm: medians over its measured runs, its verdict (taken in one round) and
    the name of that full report; a failed arm has its error, no report and no throughput."""
    failed = failed_arms(result)
    base = result.arms[0].name
    out = []
    for arm in result.arms:
        mine = _measured(result, arm.name)
        error = failed.get(arm.name)
        verdict, reason, report = _verdict_of(error, mine)
        ratios = same_round_ratios(result, arm.name, base)
        out.append(Variant(
            name=arm.name, env=dict(arm.env), command=shown_command(arm.argv),
            baseline=arm.name == base,
            status="failed" if error else ("measured" if mine else "not run"),
            throughput_rps=None if error else _median(r.rps for r in mine),
            latency_ms=VariantLatency(p50=None if error else _median(r.p50_ms for r in mine),
                                      p99=None if error else _median(r.p99_ms for r in mine)),
            errors=sum(r.errors or 0 for r in mine),
            rps_by_round=tuple(_rps(r) for r in mine),
            gain=None if error or not ratios else _median(ratios),
            service_cores=_median(r.service_cores for r in mine),
            verdict=verdict, verdict_reason=reason,
            report=None if error else report,
            error=error,
        ))
    return tuple(out)


def experiment_report(result: ExperimentResult, settings: RunSettings, generator: GeneratorInfo,
                      advice: Advice | None = None, interrupted: str | None = None,
                      advised: Sequence[tuple[str, str]] = ()) -> ExperimentReport:
    """The report (docs/report-data.md): `variants` (each with env, throughput_rps, latency_ms
    {p50, p99}, errors, verdict {primary, headline} or null, report or null), `baseline` {env},
    `winner` {env, gain} or null when no variant won in every round (`outcome` says which,
    `leader` has the best median anyway). Older keys (`arms`, `decision`, `runs`) are kept."""
    choice = choose_winner(result, settings.load_label())
    leader = choice.leader.name if choice.leader else None
    decision = decide(result, other=leader if leader and leader != result.arms[0].name else None)
    if advice is not None:
        advice = advice_outcome(result, advice, advised_arm(result.arms, advised))
    return ExperimentReport(
        target=ExperimentTarget(url=settings.url,
                                command=shown_command(result.arms[0].argv) if result.arms else None),
        settings=settings.describe(),
        generator=generator,
        variants=variant_summaries(result),
        baseline=Baseline(env=dict(result.arms[0].env), name=result.arms[0].name),
        winner=choice.winner,
        leader=choice.leader,
        outcome=choice.outcome,
        headline=choice.headline,
        margin=choice.margin,
        advice=advice,
        arms=tuple(a.describe() for a in result.arms),
        decision=decision,
        runs=tuple(result.runs),
        interrupted=interrupted, partial=interrupted is not None,
    )
