"""The share of request-thread time spent waiting at wait sites of some kinds, and the finding a
wait check makes from it. lock_contention, pool_wait and logging_lock share this; each keeps its
kinds, its evidence and its words (lock_contention also what the kernel and the holders add)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from diagnose.checks.measurements import Measurements
from diagnose.checks.base import (Finding, FindingTexts, ScoreBasis, Site, make_finding, ramp, serial_gain,
                                  short_path, sites_from_waits)
from diagnose.report.model.sections import WaitSite

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis


class WaitSettings(FindingTexts, Protocol):
    """A wait check's settings: its texts and the shares its score ramps between."""

    @property
    def low(self) -> float: ...

    @property
    def high(self) -> float: ...


@dataclass(frozen=True)
class WaitShare:
    """The request-thread wait sites of some kinds, in analysis.waits' order (the top first),
    with their summed share of request-thread time and thread-seconds."""

    waits: tuple[WaitSite, ...]
    share: float
    thread_seconds: float

    @classmethod
    def of(cls, analysis: Analysis, kinds: Collection[str],
           keep: Callable[[WaitSite], bool] | None = None) -> WaitShare:
        waits = tuple(w for w in analysis.waits if w.kind in kinds and (keep is None or keep(w)))
        return cls(waits, sum(w.share for w in waits), sum(w.thread_seconds for w in waits))

    @property
    def top(self) -> WaitSite | None:
        return self.waits[0] if self.waits else None


def line_of(site: WaitSite) -> str:
    """`dir/file.py:42`: the site's line in a sentence."""
    return f"{short_path(site.file)}:{site.line}"


def where(site: WaitSite, *also: str) -> str:
    """`dir/file.py:42 (function[, also...])`."""
    return f"{line_of(site)} ({', '.join((site.function, *also))})"


def wait_finding(check_id: str, settings: WaitSettings, analysis: Analysis, measured: WaitShare, share_key: str,
                 summary: str, evidence: Measurements | Mapping[str, object], what: str, *,
                 gain: tuple[float, str] | None = None, advice: Iterable[str] | None = None,
                 lead: Iterable[Site] = ()) -> Finding:
    """The finding on `measured.share`: scored by ramp(low, high), its gain the serial gain of
    waiting on `what` unless the check gives its own `gain` (then the share's interval gives no
    gain interval: that gain does not follow from the share). `share_key`: the evidence key of
    the share; `lead`: sites ranked before the wait sites."""
    low, high = settings.low, settings.high
    return make_finding(check_id, settings, ramp(measured.share, low, high), summary, evidence,
                        [*lead, *sites_from_waits(measured.waits)], advice=advice,
                        gain=gain if gain is not None else serial_gain(measured.share, analysis, what),
                        samples=analysis.request_samples()["count"].sum(),
                        basis=ScoreBasis(share_key, lambda s: ramp(s, low, high),
                                         None if gain is not None else
                                         lambda s: serial_gain(s, analysis, "")[0]))
