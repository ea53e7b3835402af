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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from diagnose.errors import BadProfile, LoadFailed

if TYPE_CHECKING:
    from diagnose.load.loadtest import Generator

SCHEMA_VERSION = 2
NOISE_MARGIN = 0.05
MAX_VARIANTS = 16

# Knobs a finding may advise that are read from the environment at start-up.
ENV_KNOBS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "WEB_CONCURRENCY")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
UNSET = "unset"  # how a removed variable is written on the command line and the page


@dataclass(frozen=True)
class Arm:
    name: str                      # "OMP_NUM_THREADS=8" (or "baseline" / "variant" for --set)
    argv: tuple[str, ...]
    env: tuple[tuple[str, str | None], ...] = ()   # None: the variable is removed

    def describe(self) -> dict:
        return {"name": self.name, "command": shlex.join(self.argv),
                "env": {k: v for k, v in self.env}}


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


def fix_from_report(path: Path) -> tuple[tuple[tuple[str, str], ...], dict]:
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
    info = {"finding": finding.id, "fix": fix or None,
            "predicted_gain": finding.predicted_gain,
            "advice": finding.advice[0] if finding.advice else None}
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

    def describe(self) -> dict:
        return {"mode": self.mode, "concurrency": self.concurrency, "rate": self.rate,
                "slo_p99_ms": self.slo_p99_ms, "seconds": self.seconds,
                "warmup_s": self.warmup_s, "rounds": self.rounds,
                "diagnose_seconds": self.diagnose_seconds}

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
    runs: list[dict] = field(default_factory=list)   # each with "round" and "arm"


def round_order(round_index: int, n: int = 2) -> list[int]:
    """Arm indices for one round, rotated by one each round (0,1,2 / 1,2,0 / 2,0,1 ...)."""
    return [(round_index + k) % n for k in range(n)]


def failed_arms(result: ExperimentResult) -> dict[str, str]:
    """Arm name -> the first error of its runs."""
    failed: dict[str, str] = {}
    for r in result.runs:
        if r.get("error") and r["arm"] not in failed:
            failed[r["arm"]] = r["error"]
    return failed


def run_experiment(arms: Sequence[Arm], rounds: int, run: Callable[[Arm], dict],
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
                figures = dict(run(arm))
            except LoadFailed as exc:
                result.runs.append({"round": r, "arm": arm.name, "rps": None,
                                    "error": exc.message})
                log(f"  round {r + 1}/{rounds} {arm.name}: failed: "
                    f"{exc.message.splitlines()[0]}")
                continue
            figures.update(round=r, arm=arm.name)
            result.runs.append(figures)
            log(f"  round {r + 1}/{rounds} {arm.name}: {figures['rps']:,.1f} req/s, "
                f"p99 {figures.get('p99_ms') or 0:,.1f} ms")
    return result


# -- the decisions --------------------------------------------------------------------------------

def _median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 4) if values else None


def _by_round(result: ExperimentResult) -> dict[int, dict[str, dict]]:
    """Round -> arm name -> that run, measured runs only."""
    rounds: dict[int, dict[str, dict]] = {}
    for r in result.runs:
        if r.get("rps") is not None:
            rounds.setdefault(r["round"], {})[r["arm"]] = r
    return rounds


def same_round_ratios(result: ExperimentResult, arm: str, base: str) -> list[float]:
    return [pair[arm]["rps"] / pair[base]["rps"] for _, pair in sorted(_by_round(result).items())
            if arm in pair and base in pair and pair[base]["rps"] > 0]


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
           other: str | None = None) -> dict:
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
    arms = {}
    for arm in result.arms:
        mine = [r for r in result.runs if r["arm"] == arm.name and r.get("rps") is not None]
        arms[arm.name] = {"runs": len(mine), "rps_median": _median([r["rps"] for r in mine]),
                          "rps": [r["rps"] for r in mine],
                          "p99_ms_median": _median([r.get("p99_ms") for r in mine]),
                          "service_cores_median": _median([r.get("service_cores")
                                                           for r in mine]),
                          "generator_cores_max": max((r["generator_cores"] for r in mine
                                                      if r.get("generator_cores") is not None),
                                                     default=None)}
    return {"outcome": outcome, "headline": headline, "variant": variant, "ratio": ratio,
            "ratios": [round(x, 4) for x in ratios], "margin": margin, "arms": arms}


def _env_of(arm: Arm) -> dict:
    return {k: v for k, v in arm.env}


def choose_winner(result: ExperimentResult, label: str = "",
                  margin: float = NOISE_MARGIN) -> dict:
    """The variant with the best median throughput, called the winner only when it served more
    than every other measured variant by `margin` in every round that measured them all."""
    arms = result.arms
    base = arms[0]
    failed = failed_arms(result)
    measured = [a for a in arms if a.name not in failed and any(
        r["arm"] == a.name and r.get("rps") is not None for r in result.runs)]
    none = {"outcome": "no result", "winner": None, "leader": None, "margin": margin}
    if base not in measured:
        return {**none, "headline": "the baseline was not measured: nothing to compare with"}
    if len(measured) < 2:
        return {**none, "headline": "only the baseline was measured: nothing to compare"}
    medians = {a.name: _median([r["rps"] for r in result.runs
                                if r["arm"] == a.name and r.get("rps") is not None])
               for a in measured}
    leader = max(measured, key=lambda a: medians[a.name])
    ratios = same_round_ratios(result, leader.name, base.name) if leader != base else [1.0]
    gain = _median(ratios)
    complete = [pair for pair in _by_round(result).values()
                if all(a.name in pair for a in measured)]
    clear = bool(complete) and all(
        pair[leader.name]["rps"] >= (1 + margin) * pair[a.name]["rps"]
        for pair in complete for a in measured if a != leader)
    entry = {"env": _env_of(leader), "name": leader.name, "gain": round(gain, 4),
             "ratios": [round(x, 4) for x in ratios], "rounds_agreeing": len(complete)}
    runner_up = max((a for a in measured if a != leader), key=lambda a: medians[a.name])
    if clear:
        what = ("the baseline serves the most" if leader == base else
                f"{leader.name} serves {gain:.2f}× the baseline ({base.name})")
        headline = (f"{what}: {medians[leader.name]:,.1f} req/s median {label}, "
                    f"ahead of every other variant by more than {margin:.0%} in every one of "
                    f"{len(complete)} round{'s' if len(complete) != 1 else ''}").replace("  ", " ")
        return {"outcome": "winner", "headline": headline, "winner": entry, "leader": entry,
                "margin": margin}
    headline = (f"no clear winner: {leader.name} has the best median ({medians[leader.name]:,.1f}"
                f" req/s {label}, {gain:.2f}× the baseline) but {runner_up.name} "
                f"({medians[runner_up.name]:,.1f} req/s) came within ±{margin:.0%} or ahead in "
                f"some round").replace("  ", " ")
    return {"outcome": "no clear winner", "headline": headline, "winner": None, "leader": entry,
            "margin": margin}


def advice_outcome(result: ExperimentResult, advice: dict, arm: Arm | None,
                   margin: float = NOISE_MARGIN) -> dict:
    """The advised arm against the baseline: proven (more in every round), disproved (less in
    every round) or not proven; beside the finding's predicted gain."""
    ratios = same_round_ratios(result, arm.name, result.arms[0].name) if arm else []
    status = {"better": "advice proven", "worse": "advice disproved"}.get(
        compare(ratios, margin), "advice not proven")
    return {**advice, "arm": arm.name if arm else None, "status": status,
            "measured_gain": None if not ratios else round(_median(ratios), 4),
            "ratios": [round(x, 4) for x in ratios]}


def throughput_at_slo(steps: Sequence[dict], knee: dict | None,
                      slo_p99_ms: float | None) -> dict | None:
    """The step a sweep is judged by: the highest throughput among stable steps whose p99 is
    within the SLO; without an SLO, the knee step (else the highest throughput). Reads the sweep
    contract (`throughput_rps`, `latency_ms.p99`) and the older flat keys (`rps`, `p99_ms`)."""
    def rps(s):
        return s.get("throughput_rps", s.get("rps"))

    def p99(s):
        return (s.get("latency_ms") or {}).get("p99", s.get("p99_ms"))

    measured = [s for s in steps if rps(s) is not None]
    if slo_p99_ms is not None:
        within = [s for s in measured if p99(s) is not None and p99(s) <= slo_p99_ms
                  and s.get("stable", True) is not False]
        return max(within, key=rps, default=None)
    if knee and knee.get("index") is not None and 0 <= knee["index"] < len(steps):
        return steps[knee["index"]]
    for key in ("concurrency", "rate"):
        if knee and knee.get(key) is not None:
            match = [s for s in measured if s.get(key) == knee[key]]
            if match:
                return match[0]
    return max(measured, key=rps, default=None)


# -- the report -----------------------------------------------------------------------------------

def variant_summaries(result: ExperimentResult) -> list[dict]:
    """One entry per arm: medians over its measured runs, its verdict (taken in one round) and
    the name of that full report; a failed arm has its error, no report and no throughput."""
    failed = failed_arms(result)
    base = result.arms[0].name
    out = []
    for arm in result.arms:
        mine = [r for r in result.runs if r["arm"] == arm.name and r.get("rps") is not None]
        diagnosed = next((r["diagnosis"] for r in mine if r.get("diagnosis")), None)
        error = failed.get(arm.name)
        verdict = reason = report = None
        if error:
            reason = "the service failed: no verdict"
        elif diagnosed is None:
            reason = "not diagnosed (--diagnose-seconds 0, or no run completed)"
        elif diagnosed.get("primary"):
            verdict = {"primary": diagnosed["primary"], "headline": diagnosed.get("headline"),
                       "severity": diagnosed.get("severity")}
            report = diagnosed.get("html_name")
        else:
            reason = diagnosed.get("error") or "the diagnosis gave no verdict"
        ratios = same_round_ratios(result, arm.name, base)
        out.append({
            "name": arm.name, "env": _env_of(arm), "command": shlex.join(arm.argv),
            "baseline": arm.name == base,
            "status": "failed" if error else ("measured" if mine else "not run"),
            "throughput_rps": None if error else _median([r["rps"] for r in mine]),
            "latency_ms": {"p50": None if error else _median([r.get("p50_ms") for r in mine]),
                           "p99": None if error else _median([r.get("p99_ms") for r in mine])},
            "errors": sum(r.get("errors") or 0 for r in mine),
            "rps_by_round": [r["rps"] for r in mine],
            "gain": None if error or not ratios else round(_median(ratios), 4),
            "service_cores": _median([r.get("service_cores") for r in mine]),
            "verdict": verdict, "verdict_reason": reason,
            "report": None if error else report,
            "error": error,
        })
    return out


def experiment_report(result: ExperimentResult, settings: RunSettings, generator: dict,
                      advice: dict | None = None, interrupted: str | None = None,
                      advised: Sequence[tuple[str, str]] = ()) -> dict:
    """The JSON contract: `variants` (each with env, throughput_rps, latency_ms {p50, p99},
    errors, verdict {primary, headline} or null, report or null), `baseline` {env}, `winner`
    {env, gain} or null when no variant won in every round (`outcome` says which, `leader` has
    the best median anyway). Older keys (`arms`, `decision`, `runs`) are kept."""
    choice = choose_winner(result, settings.load_label())
    leader = (choice.get("leader") or {}).get("name")
    decision = decide(result, other=leader if leader and leader != result.arms[0].name else None)
    if advice is not None:
        advice = advice_outcome(result, advice, advised_arm(result.arms, advised))
    return {
        "schema_version": SCHEMA_VERSION, "kind": "experiment",
        "target": {"url": settings.url,
                   "command": shlex.join(result.arms[0].argv) if result.arms else None},
        "settings": settings.describe(),
        "generator": generator,
        "variants": variant_summaries(result),
        "baseline": {"env": _env_of(result.arms[0]), "name": result.arms[0].name},
        "winner": choice["winner"],
        "leader": choice["leader"],
        "outcome": choice["outcome"],
        "headline": choice["headline"],
        "margin": choice["margin"],
        "advice": advice,
        "arms": [a.describe() for a in result.arms],
        "decision": decision,
        "runs": result.runs,
        "interrupted": interrupted, "partial": interrupted is not None,
    }
