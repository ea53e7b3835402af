"""The verdict under one load level: `attach` while the generator held it (sweep --pid,
experiment --diagnose-seconds), read off the report the attach wrote, or why there is none."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepDiagnosis:
    seconds: float
    concurrency: int | None = None  # the closed model's level
    rate: float | None = None  # the open model's level (requests/s)
    # Set when the diagnosis failed (the generator or the attach): then no verdict.
    error: str | None = None
    primary: str | None = None
    headline: str | None = None
    severity: str | None = None
    html: str | None = None  # the report's paths on this machine
    json: str | None = None
    html_name: str | None = None
    rps_while_sampled: float | None = None
    partial: bool = False

    def to_json(self) -> dict[str, Any]:
        """As the sweep and experiment reports carry it (docs/load.md): the level, the window,
        then the error or the verdict and its report."""
        level: dict[str, Any] = ({"concurrency": self.concurrency} if self.concurrency is not None
                                 else {"rate": self.rate})
        out: dict[str, Any] = {**level, "seconds": self.seconds}
        if self.error is not None:
            return {**out, "error": self.error}
        return {**out, "primary": self.primary, "headline": self.headline,
                "severity": self.severity, "html": self.html, "html_name": self.html_name,
                "json": self.json, "rps_while_sampled": self.rps_while_sampled,
                "partial": self.partial}

    @property
    def verdict(self) -> dict[str, Any] | None:
        """The step's verdict as the sweep report carries it; None without one."""
        if not self.primary:
            return None
        return {"primary": self.primary, "headline": self.headline, "severity": self.severity}
