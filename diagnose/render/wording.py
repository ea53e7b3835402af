"""What a finding's levers and gain say, worded once for every output.

`gain_words(finding)` gives the words: each lever's figure and estimate tag ("×4.17", "(estimate,
upper bound)"), the line that states them all ("×4.17 if checksum cost nothing (estimate, upper
bound) · ×1.00 from more cores (estimate)"), and the summary line's short tag ("×4.17 · ×1.00
est."); a finding with no lever states its one predicted gain ("×2.18 (estimate)"). The page's
data carries them (`gain_text`, parallel to the report's findings: render/html_data.py): the
page's script (reports/static/page/verdict.js) and the no-JavaScript view (report.html.j2) print
them as they are, and the Markdown summary (render/markdown.py) words its line with
`levers_text`, given each label already escaped and shortened for Markdown.

The evidence's words are made once as well, in render/evidence.py (`describe_evidence`, the
page's `evidence_text`, the Markdown's rows), and so is the observer's CPU beside the target's
(`observer_cpu_text`, the page's `observer_cpu_text`, the Markdown's run facts).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from diagnose.report.model import Finding, Lever, Observer
from diagnose.report.model.codec import encode

TIMES = "\u00d7"
BETWEEN_LEVERS = " \u00b7 "


def gain_figure(gain: float) -> str:
    """A predicted throughput ratio: "×2.18"."""
    return f"{TIMES}{gain:.2f}"


def estimate_tag(upper_bound: bool = False, lower_bound: bool = False, calibrated: bool = False) -> str:
    """"(estimate)", or "(estimate, upper bound)" for a lever that makes the work free, or
    "(estimate, lower bound)" for a gain that counts less than the advice removes; "calibrated"
    for a figure resting on a constant fitted to measured fixes (its basis says "calibrated:")."""
    kind = "calibrated" if calibrated else "estimate"
    return (f"({kind}, upper bound)" if upper_bound
            else f"({kind}, lower bound)" if lower_bound else f"({kind})")


def _calibrated(lever: Lever) -> bool:
    return lever.basis.startswith("calibrated")


def _is_floor(finding: Finding, lever: Lever) -> bool:
    """The lever is the finding's ranked gain, and that gain is a lower bound."""
    return (finding.gain_floor is not None and not lever.upper_bound
            and lever.gain == finding.predicted_gain)


def gain_notes(finding: Finding, fared: bool = True) -> tuple[str, ...]:
    """What stands beside the gain's basis: why it is a lower bound, what the check could not
    see in this data, and (`fared`) how predictions of its gain fared when measured."""
    notes: list[str] = []
    gain = finding.predicted_gain
    if finding.gain_floor and _finite(gain):
        assert gain is not None
        notes.append(f"{gain_figure(gain)} is a lower bound: {finding.gain_floor}.")
    notes += [f"Not seen in this data: {what}." for what in finding.unseen]
    if fared and finding.fared and _finite(gain):
        notes.append(f"How such predictions fared: {finding.fared}.")
    return tuple(notes)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def stated_levers(finding: Finding) -> tuple[Lever, ...]:
    """The finding's levers that have a figure and words (a hand-edited report may lack them)."""
    return tuple(lever for lever in finding.levers if _finite(lever.gain) and lever.label)


def lever_text(lever: Lever, label: str | None = None, floor: bool = False) -> str:
    """"×4.17 if checksum cost nothing (estimate, upper bound)"; `label`: the lever's label as
    the output writes it (escaped, shortened), else as it is; `floor`: its figure is a lower
    bound."""
    said = lever.label if label is None else label
    return f"{gain_figure(lever.gain)} {said} {estimate_tag(lever.upper_bound, floor, _calibrated(lever))}"


def levers_text(finding: Finding, label: Callable[[str], str] | None = None) -> str:
    """Each stated lever with its figure, all estimates, joined by " · "; "" when the finding has
    none. `label` writes each lever's label for the output (the Markdown escapes it)."""
    return BETWEEN_LEVERS.join(lever_text(lever, None if label is None else label(lever.label),
                                          _is_floor(finding, lever))
                               for lever in stated_levers(finding))


@dataclass(frozen=True)
class LeverWords:
    figure: str    # "×4.17"
    estimate: str  # "(estimate, upper bound)"
    text: str      # "×4.17 if checksum cost nothing (estimate, upper bound)"

    def to_json(self) -> dict[str, str]:
        out: dict[str, str] = encode(self)
        return out


@dataclass(frozen=True)
class GainWords:
    """A finding's gain as every output says it. `levers`: one per stated lever, in order (the
    page's script pairs them with the finding's levers that have a figure and a label); none:
    `figure` and `estimate` state the finding's one predicted gain, if it has one."""

    text: str = ""             # the whole line: the levers', else "×2.18 (estimate)", else ""
    tag: str = ""              # the summary line's: "×4.17 · ×1.00 est.", "×2.18 est.", ""
    figure: str | None = None  # "×2.18": the predicted gain's, when no lever is stated
    estimate: str = estimate_tag()
    levers: tuple[LeverWords, ...] = ()
    notes: tuple[str, ...] = ()  # gain_notes: printed beneath the gain's basis

    def to_json(self) -> dict[str, object]:
        """The page's `gain_text` entry (the report model's codec writes it: the page's types
        are generated from these fields, scripts/gen_page_types.py)."""
        out: dict[str, object] = encode(self)
        return out


def gain_words(finding: Finding) -> GainWords:
    levers = stated_levers(finding)
    notes = gain_notes(finding)
    if levers:
        words = tuple(LeverWords(gain_figure(lever.gain),
                                 estimate_tag(lever.upper_bound, _is_floor(finding, lever), _calibrated(lever)),
                                 lever_text(lever, floor=_is_floor(finding, lever))) for lever in levers)
        return GainWords(text=levers_text(finding),
                         tag=BETWEEN_LEVERS.join(w.figure for w in words) + " est.",
                         levers=words, notes=notes)
    gain = finding.predicted_gain
    if not _finite(gain):
        return GainWords()
    assert gain is not None
    figure = gain_figure(gain)
    tag = estimate_tag(lower_bound=finding.gain_floor is not None)
    return GainWords(text=f"{figure} {tag}", tag=f"{figure} est.", figure=figure, estimate=tag,
                     notes=notes)


def _finite_or_none(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def observer_cpu_text(observer: Observer) -> str:
    """"observer: 0.21 cores (diagnose 0.05, py-spy 0.16) beside the target's 1.93 cores,
    measured from /proc over the 4.3 s window": what diagnose's process and the processes it
    started (py-spy's recorders, nearly all of it) used of the CPU, beside the target tree; ""
    when the report has no such measure (`analyze`, an older report)."""
    cores, window = _finite_or_none(observer.observer_cores), _finite_or_none(observer.cpu_window_s)
    if cores is None or window is None or window <= 0:
        return ""
    text = f"observer: {cores:.2f} cores"
    own = _finite_or_none(observer.observer_own_cpu_s)
    children = _finite_or_none(observer.observer_children_cpu_s)
    if own is not None and children is not None:
        text += f" (diagnose {own / window:.2f}, py-spy {children / window:.2f})"
    target = _finite_or_none(observer.target_cores)
    if target is not None:
        text += f" beside the target's {target:.2f} cores"
    return text + f", measured from /proc over the {window:.1f} s window"
