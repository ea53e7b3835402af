"""What `diagnose diff` found, as frozen values: the one thing the diff page, the CLI and the
.json read. Written to and read from JSON by the report's codec (report/model/codec.py), so a
field here is a key of `diagnose-diff-*.json` under the same name (docs/report-data.md, "The
diff").

Every figure is computed from the two reports' own measurements (shares of their samples,
thread-seconds waited, wall time, throughput); none is estimated here. Names (functions, files,
command lines) come from the profiled process: the renderers escape them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from diagnose.report.model.codec import OPTIONAL, JsonValue, decode, encode

SCHEMA_VERSION = 1
KIND = "diagnose-diff"


class Status(enum.StrEnum):
    """How a finding's severity moved from BEFORE to AFTER (compare/report_diff.severity_change)."""

    UNCHANGED = "unchanged"
    CHANGED = "changed"
    WITHIN_NOISE = "within noise"
    ONLY_AFTER = "not applicable before"
    ONLY_BEFORE = "not applicable after"
    NOT_COMPARABLE = "not comparable"  # the primary finding is missing from one report


class WaitChange(enum.StrEnum):
    """How a wait site moved; the "(within noise)" ones are in or out of the 1% floor, but their
    intervals overlap."""

    UNCHANGED = "unchanged"
    CHANGED = "changed"
    APPEARED = "appeared"
    DISAPPEARED = "disappeared"
    APPEARED_IN_NOISE = "appeared (within noise)"
    DISAPPEARED_IN_NOISE = "disappeared (within noise)"


@dataclass(frozen=True)
class Side:
    """One report of the pair: what ran, how it was sampled, its verdict."""

    name: str
    pid: int | None
    cmdline: str
    wall_s: float | None
    mode: str  # "offline" for any offline analysis (its file's name is not a setting)
    plan: str | None
    rate_hz: float | None
    native: bool
    thread_samples: int
    threads: int
    throughput_rps: float | None
    states_estimated: bool
    primary: str
    severity: str
    headline: str


@dataclass(frozen=True)
class FindingSide:
    score: int
    severity: str
    summary: str
    low_confidence: bool


@dataclass(frozen=True)
class FindingChange:
    id: str
    title: str
    before: FindingSide | None  # None: the check did not apply to that report
    after: FindingSide | None
    score_change: int | None
    status: Status
    why: str


@dataclass(frozen=True)
class PrimaryChange:
    """BEFORE's verdict finding as it stands AFTER, and AFTER's own verdict."""

    id: str
    before: FindingSide | None
    after: FindingSide | None
    status: Status
    why: str
    after_primary: str
    after_primary_severity: str


@dataclass(frozen=True)
class WaitSide:
    """A wait site in one report: its share of request-thread time with the 95% interval over
    sampling ticks, and thread-seconds per second of wall time (`waiting_threads`)."""

    thread_seconds: float
    samples: int
    share: float
    share_low: float
    share_high: float
    waiting_threads: float | None  # None: the report's wall time is unknown
    # Only when both reports carry their throughput (the diff's `per_request`).
    ms_per_request: float | None = field(default=None, metadata=OPTIONAL)


@dataclass(frozen=True)
class WaitSiteChange:
    kind: str
    label: str
    function: str
    file: str
    line: int
    change: WaitChange
    beyond_noise: bool  # the two shares' intervals do not overlap
    before: WaitSide
    after: WaitSide
    waiting_threads_change: float | None

    @property
    def real(self) -> bool:
        """A change the sampling cannot explain: shown first, counted in the summary line."""
        return self.beyond_noise and self.change != WaitChange.UNCHANGED


@dataclass(frozen=True)
class StateShare:
    state: str
    before: float
    after: float
    change: float


@dataclass(frozen=True)
class RoleStates:
    """The state mix of one thread role, as shares of that role's samples."""

    role: str
    in_before: bool
    in_after: bool
    states: tuple[StateShare, ...]


@dataclass(frozen=True)
class FlameNode:
    """A call path of AFTER (depth-first): its last frame and its share of each report's
    samples."""

    function: str
    file: str  # the matched key (compare/paths.py), not the path as written
    depth: int
    after: float
    before: float
    change: float


@dataclass(frozen=True)
class VanishedPath:
    path: tuple[str, ...]  # function names, root first
    file: str
    before: float


@dataclass(frozen=True)
class FlameDiff:
    nodes: tuple[FlameNode, ...]
    dropped_nodes: int
    vanished: tuple[VanishedPath, ...]
    vanished_more: int
    samples_before: int
    samples_after: int


@dataclass(frozen=True)
class PathRoot:
    """A pair of directories the same files ran from ("(relative path)" for none)."""

    before: str
    after: str
    files: int
    functions: int


@dataclass(frozen=True)
class PathMatching:
    """How the two reports' files were matched (compare/paths.py)."""

    rule: str
    same_paths: bool
    roots: tuple[PathRoot, ...]  # only the pairs that differ
    note: str | None


@dataclass(frozen=True)
class Rules:
    """The thresholds the judgements used, for the reader of the page."""

    severity_margin: int
    interval: str


@dataclass(frozen=True, kw_only=True)
class Diff:
    kind: str = KIND
    schema_version: int = SCHEMA_VERSION
    before: Side
    after: Side
    sampling_differs: tuple[str, ...]  # of compare/report_diff.SAMPLING_FIELDS
    normalised_only: bool  # sampling differs: raw counts are not comparable
    per_request: bool  # both reports carry their throughput
    paths: PathMatching
    primary: PrimaryChange
    findings: tuple[FindingChange, ...]
    waits: tuple[WaitSiteChange, ...]
    states: tuple[RoleStates, ...]
    flame: FlameDiff
    rules: Rules
    summary: str = ""  # the one line (compare/report_diff.summary_line), set once the rest is known

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = encode(self)
        return out

    @classmethod
    def from_json(cls, data: Any) -> Diff:
        """A diff read back from its .json; NotAReport names the key missing or malformed."""
        return decode(cls, data)
