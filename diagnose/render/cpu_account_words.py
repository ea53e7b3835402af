"""The CPU account in words (report/model/account.py): one summary line and one entry per part,
made once from the report and printed as they are by the page (its data's
`cpu_account_text`), its no-JavaScript view and the Markdown summary."""

from __future__ import annotations

import math
from dataclasses import dataclass

from diagnose.vocab import CpuPart
from diagnose.report.model.account import CpuAccount, CpuShare
from diagnose.report.model.codec import encode

LABELS: dict[str, str] = {
    CpuPart.PYTHON: "Python code",
    CpuPart.NATIVE: "native libraries",
    CpuPart.COLLECTOR: "garbage collector",
    CpuPart.KERNEL: "kernel (system time)",
    CpuPart.CHILDREN: "child processes",
    CpuPart.REAPED: "reaped children",
    CpuPart.UNEXPLAINED: "unexplained",
}
NOT_MEASURED = "not measured"
ESTIMATE = "estimate"
MEASURED = "measured"
# What the page and the summary say for a report without an account.
NO_ACCOUNT = ("not measured: this report's /proc record has no process-level CPU counters (an older "
              "recording, or no /proc record at all)")


@dataclass(frozen=True)
class PartWords:
    part: str
    label: str
    figure: str  # "1.33 s (36%)" or "not measured"
    tag: str  # "estimate", "measured" or "" (not measured)
    how: str
    share: float | None  # of the account's total, for the bar's width



@dataclass(frozen=True)
class AccountWords:
    measured: bool
    summary: str
    parts: tuple[PartWords, ...] = ()
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        """As the report model's codec writes it (the page's types are generated from it:
        scripts/gen_page_types.py)."""
        encoded = encode(self)
        assert isinstance(encoded, dict)
        return encoded


def _finite(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _part_words(part: CpuShare) -> PartWords:
    label = LABELS.get(part.part, str(part.part))
    seconds, share = _finite(part.cpu_s), _finite(part.share)
    if seconds is None:
        return PartWords(str(part.part), label, NOT_MEASURED, "", part.how, None)
    figure = f"{seconds:.2f} s" + (f" ({100 * share:.0f}%)" if share is not None else "")
    return PartWords(str(part.part), label, figure, ESTIMATE if part.estimated else MEASURED, part.how,
                     share)


def account_words(account: CpuAccount | None) -> AccountWords:
    """The account's words; "not measured" without one."""
    if account is None:
        return AccountWords(False, NO_ACCOUNT)
    parts = tuple(_part_words(p) for p in account.parts)
    shown = [p for p in parts if p.share]
    listed = ", ".join(f"{p.label} {100 * (p.share or 0):.0f}%" + (f" ({p.tag})" if p.tag == ESTIMATE else "")
                       for p in sorted(shown, key=lambda p: -(p.share or 0)))
    unmeasured = [p.label for p in parts if p.figure == NOT_MEASURED]
    summary = (f"{account.cpu_s:.2f} core-seconds over the {account.window_s:.1f} s window "
               f"({account.cores:.2f} cores), by the kernel's counters: {listed or 'none used'}")
    if unmeasured:
        summary += f"; {' and '.join(unmeasured)} not measured"
    return AccountWords(True, summary, parts, tuple(account.notes))
