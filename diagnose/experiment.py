"""`diagnose experiment`: does a change make the service faster? Measure it, don't predict it.

The service is started fresh from its command for every run, once as it is (the baseline) and
once with the change (the variant: environment assignments such as `OPENBLAS_NUM_THREADS=1`,
and/or another command). Each run waits until the URL answers, loads it for a warm-up that is
discarded, then for the measured window at a fixed concurrency, and stops the service's whole
process group (SIGTERM, a grace, SIGKILL). Runs alternate, the order rotated each round, so a
slow spell of a shared machine hits both arms; the ratio is the median of the same-round
ratios. The change is called *better* (or *worse*) only when every round agrees by more than
the noise margin (5%); anything else is "no clear difference", with the rounds shown.

A report's first finding can name its own fix (`evidence.fix`): `--from-report` turns a knob
that is an environment variable into the variant, and the measured ratio is shown beside the
finding's predicted gain.

`run_experiment` takes the function that performs one run as an argument, so the alternation
and the decision are tested without processes (tests/unit/test_experiment.py).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from diagnose import loadgen
from diagnose.errors import BadProfile, LoadFailed

SCHEMA_VERSION = 1
NOISE_MARGIN = 0.05
READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 8.0

# Knobs a finding may advise that are read from the environment at start-up.
ENV_KNOBS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "WEB_CONCURRENCY")


@dataclass(frozen=True)
class Arm:
    name: str                      # "baseline" / "variant"
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    def describe(self) -> dict:
        return {"name": self.name, "command": shlex.join(self.argv),
                "env": {k: v for k, v in self.env}}


def parse_assignments(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`["A=1", "B=x y"]` -> (("A", "1"), ("B", "x y")); ValueError for anything else."""
    pairs = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise ValueError(f"--set takes NAME=VALUE, got {item!r}")
        pairs.append((name, value))
    return tuple(pairs)


def fix_from_report(path: Path) -> tuple[tuple[tuple[str, str], ...], dict]:
    """The environment assignment a report's first finding advises, and that finding's
    summary (id, fix, predicted gain). BadProfile (exit 6) when the file is not a report or its
    advice is not an environment knob."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
        finding = (report.get("findings") or [None])[0]
    except (OSError, ValueError, AttributeError) as exc:
        raise BadProfile(f"{path}: not a diagnose JSON report ({exc})") from None
    if not finding:
        raise BadProfile(f"{path}: the report has no finding, so no advice to try")
    fix = (finding.get("evidence") or {}).get("fix") or {}
    knob, value = fix.get("knob"), fix.get("value")
    info = {"finding": finding.get("id"), "fix": fix or None,
            "predicted_gain": finding.get("predicted_gain"),
            "advice": (finding.get("advice") or [None])[0]}
    if knob not in ENV_KNOBS or value is None:
        raise BadProfile(f"{path}: the first finding ({finding.get('id')}) advises "
                         f"{fix or 'no knob'}, not an environment variable this command can "
                         f"set; give the change with --set or --variant-command")
    return ((knob, str(value)),), info


# -- one run --------------------------------------------------------------------------------------

class Service:
    """One started service: its own session (process group), output to a temporary file."""

    def __init__(self, arm: Arm):
        env = dict(os.environ)
        env.update(dict(arm.env))
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._log = tempfile.TemporaryFile(prefix="diagnose-experiment-")
        try:
            self.proc = subprocess.Popen(list(arm.argv), stdin=subprocess.DEVNULL,
                                         stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True,
                                         preexec_fn=loadgen.die_with_parent(os.getpid()))
        except OSError as exc:
            self._log.close()
            raise LoadFailed(f"cannot start {shlex.join(arm.argv)}: {exc}") from None

    def output(self, limit: int = 1500) -> str:
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")[-limit:]

    def wait_answering(self, url: str, timeout: float = READY_TIMEOUT_S) -> float:
        """Seconds from start until the URL answered; LoadFailed if it exits or never does."""
        from diagnose.loadtest import check_url

        start = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise LoadFailed(f"the service exited with {self.proc.returncode} before "
                                 f"{url} answered:\n{self.output()}")
            try:
                check_url(url, timeout=2.0)
                return time.monotonic() - start
            except LoadFailed:
                if time.monotonic() - start > timeout:
                    raise LoadFailed(f"{url} did not answer within {timeout:.0f} s:\n"
                                     f"{self.output()}") from None
                time.sleep(0.1)

    def cpu_s(self) -> float | None:
        from diagnose.sweep import CpuMeter

        return CpuMeter([self.proc.pid]).read().service_cpu_s

    def stop(self) -> None:
        """SIGTERM to the group, a grace, then SIGKILL to the group; reaps the process."""
        if self.proc.poll() is None:
            loadgen.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        loadgen.killpg(self.proc.pid, signal.SIGKILL)  # workers that outlived their master
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()


@dataclass(frozen=True)
class RunSettings:
    url: str
    concurrency: int = 8
    seconds: int = 8
    warmup_s: int = 2
    rounds: int = 3
    generator: object = None       # loadtest.Generator


def run_arm(arm: Arm, settings: RunSettings) -> dict:
    """Start the arm's service, measure it, stop it: one run's figures."""
    gen = settings.generator
    service = Service(arm)
    try:
        ready_s = service.wait_answering(settings.url)
        if settings.warmup_s:
            gen.measure(settings.url)(settings.concurrency, settings.warmup_s)
        cpu0, t0 = service.cpu_s(), time.monotonic()
        result = gen.measure(settings.url)(settings.concurrency, settings.seconds)
        cpu1, t1 = service.cpu_s(), time.monotonic()
    finally:
        service.stop()
    cores = (cpu1 - cpu0) / (t1 - t0) if cpu0 is not None and cpu1 is not None else None
    return {"arm": arm.name, "rps": round(result.requests_per_second, 2),
            "p50_ms": result.latency_p50_ms, "p99_ms": result.latency_p99_ms,
            "errors": result.errors, "requests": result.requests,
            "service_cores": None if cores is None else round(cores, 3),
            "generator_cores": (None if result.generator_cores is None
                                else round(result.generator_cores, 3)),
            "ready_s": round(ready_s, 2)}


# -- the experiment -------------------------------------------------------------------------------

@dataclass
class ExperimentResult:
    arms: tuple[Arm, Arm]
    runs: list[dict] = field(default_factory=list)   # each with "round" and "arm"


def round_order(round_index: int, n: int = 2) -> list[int]:
    """Arm indices for one round, rotated by one each round (0,1 / 1,0 / 0,1 ...)."""
    return [(round_index + k) % n for k in range(n)]


def run_experiment(arms: tuple[Arm, Arm], rounds: int, run: Callable[[Arm], dict],
                   log: Callable[[str], None] = lambda _m: None,
                   result: ExperimentResult | None = None) -> ExperimentResult:
    result = result if result is not None else ExperimentResult(arms)
    for r in range(rounds):
        for index in round_order(r, len(arms)):
            figures = dict(run(arms[index]))
            figures.update(round=r, arm=arms[index].name)
            result.runs.append(figures)
            log(f"  round {r + 1}/{rounds} {arms[index].name}: {figures['rps']:,.1f} req/s, "
                f"p99 {figures.get('p99_ms') or 0:,.1f} ms")
    return result


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def decide(result: ExperimentResult, margin: float = NOISE_MARGIN) -> dict:
    base, variant = (a.name for a in result.arms)
    by_round: dict[int, dict[str, dict]] = {}
    for r in result.runs:
        by_round.setdefault(r["round"], {})[r["arm"]] = r
    ratios = [pair[variant]["rps"] / pair[base]["rps"] for _, pair in sorted(by_round.items())
              if base in pair and variant in pair and pair[base]["rps"] > 0]
    arms = {}
    for name in (base, variant):
        mine = [r for r in result.runs if r["arm"] == name]
        arms[name] = {"runs": len(mine), "rps_median": _median([r["rps"] for r in mine]),
                      "rps": [r["rps"] for r in mine],
                      "p99_ms_median": _median([r.get("p99_ms") for r in mine]),
                      "service_cores_median": _median([r.get("service_cores") for r in mine]),
                      "generator_cores_max": max((r["generator_cores"] for r in mine
                                                  if r.get("generator_cores") is not None),
                                                 default=None)}
    ratio = _median(ratios)
    if not ratios:
        outcome, headline = "no result", "no round measured both arms"
    elif all(x >= 1 + margin for x in ratios):
        outcome = "better"
        headline = (f"the change serves {ratio:.2f}× the requests per second (every one of "
                    f"{len(ratios)} rounds: {min(ratios):.2f}–{max(ratios):.2f}×)")
    elif all(x <= 1 - margin for x in ratios):
        outcome = "worse"
        headline = (f"the change serves only {ratio:.2f}× the requests per second (every one "
                    f"of {len(ratios)} rounds: {min(ratios):.2f}–{max(ratios):.2f}×)")
    else:
        outcome = "no clear difference"
        headline = (f"no clear difference: {ratio:.2f}× in the median, rounds from "
                    f"{min(ratios):.2f}× to {max(ratios):.2f}× (the margin is ±{margin:.0%})")
    return {"outcome": outcome, "headline": headline, "ratio": ratio,
            "ratios": [round(x, 4) for x in ratios], "margin": margin, "arms": arms}


def experiment_report(result: ExperimentResult, settings: RunSettings, generator: dict,
                      advice: dict | None = None, interrupted: str | None = None) -> dict:
    decision = decide(result)
    return {
        "schema_version": SCHEMA_VERSION, "kind": "experiment",
        "target": {"url": settings.url},
        "arms": [a.describe() for a in result.arms],
        "settings": {"concurrency": settings.concurrency, "seconds": settings.seconds,
                     "warmup_s": settings.warmup_s, "rounds": settings.rounds},
        "generator": generator,
        "advice": advice,
        "decision": decision,
        "runs": result.runs,
        "interrupted": interrupted, "partial": interrupted is not None,
    }
