"""The verdict under one load level: `attach` while the generator held it (sweep --pid,
experiment --diagnose-seconds), read off the report the attach wrote, or why there is none.
Written into the sweep and experiment reports by the report model's codec (report/load_report.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from diagnose.report.model.codec import OPTIONAL, JsonValue, encode


@dataclass(frozen=True, kw_only=True)
class StepVerdict:
    """A step's or a variant's verdict, as the load reports carry it (a step's verdict may say
    no severity when its diagnosis had none to say)."""

    primary: str
    headline: str | None = None
    severity: str | None = None


@dataclass(frozen=True, kw_only=True)
class StepDiagnosis:
    # The level: one of the two, as a step says it.
    concurrency: int | None = field(default=None, metadata=OPTIONAL)  # the closed model's
    rate: float | None = field(default=None, metadata=OPTIONAL)  # the open model's (requests/s)
    seconds: float
    # Set when the diagnosis failed (the generator or the attach): then no verdict.
    error: str | None = field(default=None, metadata=OPTIONAL)
    primary: str | None = field(default=None, metadata=OPTIONAL)
    headline: str | None = field(default=None, metadata=OPTIONAL)
    severity: str | None = field(default=None, metadata=OPTIONAL)
    # The report's paths on this machine (the sweep's); the experiment keeps only the names.
    html: str | None = field(default=None, metadata=OPTIONAL)
    html_name: str | None = field(default=None, metadata=OPTIONAL)
    json: str | None = field(default=None, metadata=OPTIONAL)
    json_name: str | None = field(default=None, metadata=OPTIONAL)
    rps_while_sampled: float | None = field(default=None, metadata=OPTIONAL)
    partial: bool | None = field(default=None, metadata=OPTIONAL)  # None: no report written

    def to_json(self) -> dict[str, Any]:
        """As the sweep and experiment reports carry it: the level, the window, then the error
        or the verdict and its report (keys without a value left out)."""
        out: dict[str, JsonValue] = encode(self)
        return out

    @property
    def verdict(self) -> StepVerdict | None:
        """The step's verdict; None without one."""
        if not self.primary:
            return None
        return StepVerdict(primary=self.primary, headline=self.headline, severity=self.severity)
