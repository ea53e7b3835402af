"""The JSON report (schema_version 1): the contract other tools read."""

from __future__ import annotations

from diagnose.checks.engine import CheckResults
from diagnose.model.analysis import Analysis
from diagnose.model.waits import describe
from diagnose.render.redact import redact_cmdline

SCHEMA_VERSION = 1


def _num(value):
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    return round(value, 4) if isinstance(value, float) else value


def thread_rows(analysis: Analysis) -> list[dict]:
    rows = []
    os_threads = analysis.os.threads if analysis.os else {}
    state_cols = [c for c in analysis.threads.columns if c not in ("tid", "name", "role", "samples")]
    for _, row in analysis.threads.iterrows():
        tos = os_threads.get(int(row["tid"]))
        rows.append({
            "tid": int(row["tid"]), "name": str(row["name"]), "role": str(row["role"]),
            "samples": int(row["samples"]),
            "states": {c: int(row[c]) for c in state_cols if int(row[c])},
            "os": None if tos is None else {
                "cpu_s": _num(tos.cpu_s), "runqueue_wait_s": _num(tos.runqueue_wait_s),
                "voluntary_ctx": tos.voluntary_ctx, "involuntary_ctx": tos.involuntary_ctx,
                "observer_stops": tos.observer_stops,
            },
        })
    return rows


def build_report(analysis: Analysis, results: CheckResults) -> dict:
    meta = analysis.meta
    target = dict(meta.get("target", {}))
    cmdline = target.get("cmdline") or []
    target["cmdline"] = redact_cmdline(cmdline) if isinstance(cmdline, list) else redact_cmdline([str(cmdline)])
    sampling = dict(meta.get("sampling", {}))
    ticks = int(analysis.threads["samples"].max()) if len(analysis.threads) else 0
    sampling.setdefault("samples", int(analysis.samples["count"].sum()))
    if sampling.get("samples") is None:
        sampling["samples"] = int(analysis.samples["count"].sum())
    sampling["thread_samples"] = int(analysis.samples["count"].sum())
    duration = sampling.get("duration_s")
    sampling["achieved_rate_hz"] = round(ticks / duration, 2) if duration else None
    sampling["native"] = bool(sampling.get("native", analysis.profile.native))
    sampling["state_estimated"] = bool(analysis.samples["estimated"].any())
    if analysis.os is not None:
        # Share of /proc observations that found a thread stopped by py-spy: the observer's pause.
        sampling["paused_share"] = round(analysis.os.observer_stop_share, 4)
    sampling["partial"] = bool(meta.get("partial", False))
    sampling["notes"] = list(meta.get("notes", []))
    return {
        "schema_version": SCHEMA_VERSION,
        "target": target,
        "sampling": sampling,
        "verdict": {"primary": results.verdict.primary, "headline": results.verdict.headline,
                    "severity": results.verdict.severity},
        "findings": [f.to_dict() for f in results.findings],
        "waits": [dict(w.to_dict(), summary=describe(w)) for w in analysis.waits],
        "not_applicable": [{"id": n.id, "reason": n.reason} for n in results.not_applicable],
        "threads": thread_rows(analysis),
    }
