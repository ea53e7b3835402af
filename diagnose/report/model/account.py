"""The account of the service's core-seconds over the window (`cpu_account` in the JSON): where
every core-second the kernel counted went (model/cpu_account.py builds it)."""

from __future__ import annotations

from dataclasses import dataclass

from diagnose.vocab import CpuPart


@dataclass(frozen=True)
class CpuShare:
    """One part of the account: its CPU seconds (None: not measured in this window), its share
    of the account's total, whether the seconds are an estimate (user time apportioned by the
    samples) or measured (the kernel's counters), and how they were found, in words."""

    part: CpuPart
    cpu_s: float | None = None
    share: float | None = None
    estimated: bool = False
    how: str = ""


@dataclass(frozen=True)
class CpuAccount:
    """Every core-second the kernel counted for the service over the window: its processes' own
    (user and kernel time, /proc/PID/stat, exited threads included), the children they reaped
    (cutime + cstime) and the child processes not sampled, split into parts (CpuShare). `cpu_s`
    sums the measured parts; `samples` is how many running samples apportion the user time
    (None when the split rests on no samples)."""

    window_s: float
    cpu_s: float
    cores: float
    parts: tuple[CpuShare, ...] = ()
    samples: int | None = None
    native_frames: bool = False  # the split rests on native samples (the collector told apart)
    notes: tuple[str, ...] = ()

    def part(self, which: CpuPart) -> CpuShare | None:
        return next((p for p in self.parts if p.part == which), None)
