"""What a check declares: the inputs it needs, its settings as one typed object, the evidence it
measures (with labels and units), and the function that runs it.

The engine (checks/engine.py) tests a check's declared inputs before running it and answers
"not applicable" itself when one is missing; the rules file is validated against the Settings
class (checks/settings.py); the report renders evidence with the declared labels and units
(render/evidence.py); docs/checks.md is generated from the declarations and the check modules'
docstrings (checks/doc.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Generic, TypeVar

from diagnose.checks.base import Finding, NotApplicable, busy_samples
# The evidence declarations are the report model's (it carries them with the data).
from diagnose.report.model.labels import DASH, NOT_MEASURED, Evidence, Unit

__all__ = ["DASH", "NOT_MEASURED", "Evidence", "Unit", "Input", "REQUIREMENTS", "CheckSettings",
           "CheckSpec", "doc_sections"]

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis


class Input(StrEnum):
    """What a check may need from the data. Each one the engine can test has the reason it gives
    when the input is missing (REASONS)."""

    REQUEST_SAMPLES = "samples of request threads handling work"
    BUSY_REQUEST_SAMPLES = "busy samples of request threads (running or runnable)"
    SCHEDSTAT = "per-thread OS counters (schedstat), only taken by `attach`"
    RSS_SERIES = "resident-memory samples over the window (`attach`)"
    EVENT_LOOPS = "an event-loop thread"
    PIPELINE = "a pipeline of stages joined by queues"
    NATIVE_FRAMES = "native frames, or a calibration from sparse native samples"
    OS_COUNTERS = "OS counters from /proc (`attach`, or `analyze --procfs`)"
    PROCESS_TREE = "a tree of worker processes (`attach` of a pre-fork server or a process pool)"
    ASYNC_TASKS = "asyncio tasks read from the live process's memory (`attach`)"


def _request_samples(analysis: Analysis) -> bool:
    return float(analysis.request_samples()["count"].sum()) > 0


def _busy_request_samples(analysis: Analysis) -> bool:
    return float(busy_samples(analysis.request_samples())["count"].sum()) > 0


def _schedstat(analysis: Analysis) -> bool:
    return analysis.os is not None and analysis.os.runqueue_ratio is not None


def _rss_series(analysis: Analysis) -> bool:
    return analysis.os is not None and analysis.os.rss_slope_bytes_per_s is not None


def _event_loops(analysis: Analysis) -> bool:
    return bool(analysis.event_loops)


def _pipeline(analysis: Analysis) -> bool:
    return bool(analysis.structure.pipeline) and analysis.structure.bottleneck is not None


def _async_tasks(analysis: Analysis) -> bool:
    return analysis.tasks is not None


# The inputs the engine tests before a check runs: (is it there?, the reason when it is not).
# The reasons are the words the checks gave before they declared their inputs.
REQUIREMENTS: dict[Input, tuple[Callable[[Analysis], bool], str]] = {
    Input.REQUEST_SAMPLES: (_request_samples, "no request threads were seen handling work"),
    Input.BUSY_REQUEST_SAMPLES: (_busy_request_samples, "request threads were never busy"),
    Input.SCHEDSTAT: (_schedstat, "needs per-thread OS counters (schedstat), only taken by `attach`"),
    Input.RSS_SERIES: (_rss_series, "needs resident-memory samples over the window (`attach`)"),
    Input.EVENT_LOOPS: (_event_loops, "no event-loop thread was seen"),
    Input.PIPELINE: (_pipeline, "no pipeline of stages joined by queues was seen"),
    Input.ASYNC_TASKS: (_async_tasks, "no asyncio tasks were read from the live process's memory "
                                      "(only `attach` reads them; a recorded profile has none)"),
}


def _native_frames(analysis: Analysis) -> bool:
    return bool(analysis.profile.native or analysis.profile.calibrated)


def _os_counters(analysis: Analysis) -> bool:
    return analysis.os is not None


# The inputs a check may use that the collector can fail to see (a capability, not a shape of the
# service): without one the finding rests on less, and says so (checks/engine.py). Each: (is it
# there?, its short name, what was not seen without it).
SEEN_BY: dict[Input, tuple[Callable[[Analysis], bool], str, str]] = {
    Input.NATIVE_FRAMES: (_native_frames, "native frames",
                          "native frames (py-spy --native, or a calibration from sparse native "
                          "samples): waits inside C code, on the GIL's futex or a native mutex"),
    Input.OS_COUNTERS: (_os_counters, "OS counters",
                        "OS counters from /proc: what the kernel saw each thread wait on, and the "
                        "CPU time it got"),
}


@dataclass(frozen=True)
class CheckSettings:
    """The settings every check has. A check's Settings subclass declares, as its fields'
    defaults, its title, what its score measures, the advice every finding of it gives, and its
    thresholds: the one place each is written. A run's settings are these defaults with a user's
    --rules overrides (checks/settings.py `merged`); rules/checks.toml lists them for users to
    copy, generated from these classes (checks/doc.py)."""

    title: str = ""
    what: str = ""
    advice: tuple[str, ...] = ()


S = TypeVar("S", bound=CheckSettings)


@dataclass(frozen=True)
class CheckSpec(Generic[S]):
    """A check's declaration; `S`, its Settings class, ties `run` to the settings it reads."""

    id: str
    settings: type[S]  # its fields' defaults declare the title, `what`, advice and thresholds
    evidence: Mapping[str, Evidence]
    # The module docstring: what it finds, why it matters, and (`What to do instead`) the advice
    # a finding builds from what it measured, beside its declared `advice`.
    doc: str
    # None for a check run on a whole service (checks/service_verdict.py calls it).
    run: Callable[[Analysis, S], Finding | NotApplicable] | None = None
    # Inputs without which the check cannot run: the engine says so in the check's place.
    needs: tuple[Input, ...] = ()
    # Inputs it uses when they are there (it runs, on less, without them).
    uses: tuple[Input, ...] = ()
    scope: str = "process"  # or "service": run on the processes of a service together
    # Its finding reads the machine's or the whole service's counters, the same from every
    # process: a worker tree states it once, not "in 3 of 3 worker processes" (service_verdict)
    machine_wide: bool = False
    # Used inputs that only add to the cause the check measures (a hidden lock wait the kernel
    # names): without one, what the finding saw is a floor and so is its gain.
    floor_without: tuple[Input, ...] = ()

    @property
    def defaults(self) -> S:
        """The check's declared settings, before any --rules override."""
        return self.settings()

    @property
    def title(self) -> str:
        return self.defaults.title

    def sections(self) -> dict[str, str]:
        return doc_sections(self.doc)


SECTIONS = ("What it finds", "Why it matters", "What to do instead")
INSTEAD = SECTIONS[2]  # in a docstring, only the advice a finding builds from the data: the rest is `advice`
_HEADING = re.compile(r"^(" + "|".join(SECTIONS) + r"):?\s*$")


def doc_sections(doc: str) -> dict[str, str]:
    """The docstring's parts by heading (a line of its own: `What it finds:` ...), each as one
    paragraph of text (blank lines kept as paragraph breaks)."""
    parts: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in (doc or "").splitlines():
        match = _HEADING.match(line.strip())
        if match:
            current = parts.setdefault(match.group(1), [])
        elif current is not None:
            current.append(line.strip())
    return {name: _paragraphs(lines) for name, lines in parts.items()}


def _paragraphs(lines: list[str]) -> str:
    out, paragraph = [], []
    for line in lines + [""]:
        if line:
            paragraph.append(line)
        elif paragraph:
            out.append(" ".join(paragraph))
            paragraph = []
    return "\n\n".join(out)
