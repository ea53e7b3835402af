"""event_loop_blocked: an event loop runs synchronous app code long enough that requests queue.

What it finds:
    The share of an event-loop thread's samples inside the app's coroutines or callbacks:
    synchronous work on the loop, inline compute or a blocking call. A loop idle in its
    selector most of the time scores nothing.

Why it matters:
    One loop thread serves every request of its process. While one coroutine runs synchronous
    code the loop accepts, parses and answers nothing else: every other request of that process
    waits, and latency grows with concurrency.

What to do instead:
    Move the work off the event loop (`asyncio.to_thread`, `run_in_threadpool`,
    `loop.run_in_executor`, or a plain `def` endpoint the framework runs in its thread pool);
    replace a blocking call with its async counterpart (`asyncio.sleep`, an async HTTP client or
    database driver). Pure-Python work holds the GIL: run it in a process pool or more worker
    processes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from diagnose.checks.spec import NOT_MEASURED, CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements, Omitted
from diagnose.report.model.findings import Fix
from diagnose.vocab import CallbackKind
from diagnose.checks.base import (Finding, ScoreBasis, Site, amdahl, make_finding, pct, ramp,
                                  serial_gain, short_path)

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis
    from diagnose.report.model.sections import Callback, EventLoop

ID = "event_loop_blocked"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "The event loop is blocked by synchronous work"
    what: str = ("Share of an event-loop thread's samples inside the app's coroutines or callbacks (synchronous "
                 "work on the loop: inline compute or a blocking call); a loop idle in its selector scores nothing.")
    advice: tuple[str, ...] = (
        ("While one coroutine runs synchronous code the loop accepts, parses and answers nothing else: every other "
         "request of that process waits, and latency grows with concurrency."),
    )
    low: float = 0.2
    high: float = 0.6


@dataclass(frozen=True, kw_only=True)
class LoopEvidence(Measurements):
    loop_thread: str = key("event-loop thread", U.TEXT)
    loop_flavor: str = key("event-loop implementation", U.TEXT)
    loop_samples: int = key("samples of the event-loop thread", U.SAMPLES)
    loop_busy_share: float = key("share of loop time busy", U.PERCENT)
    loop_idle_share: float = key("share of loop time idle in its selector", U.PERCENT)
    app_sync_share: float = key("share of loop time running the app's synchronous code", U.PERCENT)
    framework_share: float = key("share of loop time in framework code", U.PERCENT)
    loop_thread_cpu_share_os: float | None = key(
        "loop thread's CPU time, share of the window (OS)", U.PERCENT, none=NOT_MEASURED)
    estimated_blocking_per_request_s: float | None = key(
        "estimated blocking per request", U.SECONDS, none="not estimated")
    estimated_blocking_per_request_min_s: float | None = key(
        "estimated blocking per request, at least", U.SECONDS, none="not estimated")
    estimated_blocking_per_request_max_s: float | None = key(
        "estimated blocking per request, at most", U.SECONDS, none="not estimated")
    blocking_estimate_basis: str | None = key("basis of the per-request estimate", U.TEXT, none="none")
    event_loops: int = key("event loops seen", U.LOOPS)
    # The app's code that ran longest on the loop, where some did.
    fix: Fix | Omitted = shared_key(optional=True)
    coroutine: str | Omitted = key("coroutine running on the loop", U.TEXT, optional=True)
    work_kind: str | Omitted = key("kind of work on the loop", U.TEXT, optional=True)
    work: str | Omitted = key("what the loop ran", U.TEXT, optional=True)
    call: str | Omitted = key("the call", U.TEXT, optional=True)


EVIDENCE = declarations(LoopEvidence)
_PHASE_WORDS = {"model": "model compute", "preprocess": "preprocessing",
                "postprocess": "serialization / postprocessing", "other": "CPU work"}
_BLOCKING_WORDS = {"sleep": "a blocking sleep", "network": "a synchronous network (HTTP/RPC) call",
                   "database": "a synchronous database / cache client call",
                   "file": "blocking file IO", "": "a blocking call"}
_ASYNC_REPLACEMENT = {
    "sleep": "replace `time.sleep(...)` with `await asyncio.sleep(...)`",
    "network": "use an async client (`httpx.AsyncClient`, `aiohttp`, `grpc.aio`)",
    "database": "use an async driver (`asyncpg`, `aiomysql`, `redis.asyncio`, SQLAlchemy's asyncio engine)",
    "file": "use `aiofiles` or `await asyncio.to_thread(...)` for the file IO",
    "": "use the library's async API",
}


def run(analysis: Analysis, settings: Settings) -> Finding:
    loops = analysis.event_loops
    loop = loops[0]  # the one blocked the most
    app_callbacks = list(loop.callbacks)  # only the app's own code is tallied as callbacks
    score = ramp(loop.app_share, settings.low, settings.high)
    top = app_callbacks[0] if app_callbacks else None
    evidence = LoopEvidence(
        loop_thread=loop.thread, loop_flavor=loop.flavor, loop_samples=loop.samples,
        loop_busy_share=loop.busy_share, loop_idle_share=loop.idle_share,
        app_sync_share=loop.app_share, framework_share=loop.framework_share,
        loop_thread_cpu_share_os=loop.cpu_share_os,
        estimated_blocking_per_request_s=loop.est_block_per_request_s,
        estimated_blocking_per_request_min_s=loop.est_block_min_s,
        estimated_blocking_per_request_max_s=loop.est_block_max_s,
        blocking_estimate_basis=loop.est_basis or None,
        event_loops=len(loops))
    if top is None:
        summary = (f"the event loop ({loop.thread}) was busy {pct(loop.busy_share)} of the time, "
                   f"idle in its selector {pct(loop.idle_share)}; no app code ran on it")
        return make_finding(ID, settings, score, summary, evidence, advice=[], samples=loop.samples)
    what = (_BLOCKING_WORDS[top.blocking] if top.kind == CallbackKind.BLOCKING_CALL
            else _PHASE_WORDS.get(top.phase, "CPU work"))
    evidence = replace(evidence, fix=Fix("offload", _callee(top)), coroutine=top.function,
                       work_kind="blocking call" if top.kind == CallbackKind.BLOCKING_CALL else "CPU work",
                       work=what, call=top.detail)
    where = (f" at {short_path(top.call_site.file)}:{top.call_site.line}"
             if top.call_site else "")
    summary = (f"the event loop ({loop.thread}, {loop.flavor}) ran synchronous code inside "
               f"{top.function} {pct(loop.app_share)} of the time — {what}{where} — so requests "
               f"queue behind it; it was idle in its selector {pct(loop.idle_share)} of the time")
    summary += _per_request(loop)
    sites = [Site(top.function, top.file, top.line, top.share)]
    if top.call_site and (top.call_site.file, top.call_site.line) != (top.file, top.line):
        sites.append(Site(top.call_site.function, top.call_site.file, top.call_site.line,
                          top.share))
    sites += [Site(c.function, c.file, c.line, c.share) for c in app_callbacks[1:4]]
    if top.kind == CallbackKind.BLOCKING_CALL:
        gain = (amdahl(loop.app_share),
                f"estimate: the loop waits in a blocking call {pct(loop.app_share)} of the time; "
                f"awaited instead, the loop serves other requests meanwhile (Amdahl)")
    else:
        gain = serial_gain(loop.app_share, analysis, "synchronous work on the loop")
    return make_finding(ID, settings, score, summary, evidence, sites,
                        advice=_advice(top, analysis) + list(settings.advice), gain=gain,
                        samples=loop.samples,
                        basis=ScoreBasis("app_sync_share", lambda s: ramp(s, settings.low, settings.high),
                                         amdahl if top.kind == CallbackKind.BLOCKING_CALL else
                                         lambda s: serial_gain(s, analysis, "")[0]))


def _per_request(loop: EventLoop) -> str:
    low, high = loop.est_block_min_s, loop.est_block_max_s
    if low is not None and high is not None:
        return f" (estimated {1000 * low:.0f}-{1000 * high:.0f} ms of it per request)"
    if low is not None:
        return f" (estimated at least {1000 * low:.0f} ms of it per request)"
    if high is not None:
        return f" (estimated at most {1000 * high:.0f} ms of it per request)"
    return ""


def _callee(top: Callback) -> str:
    detail = top.detail.removeprefix("calls ")
    return detail.split(" at ", 1)[0] if not detail.startswith("at ") else "the blocking call"


def _advice(top: Callback, analysis: Analysis) -> list[str]:
    fn = _callee(top)
    offload = (f"Move `{fn}` off the event loop: `await run_in_threadpool({fn}, ...)` "
               f"(Starlette / FastAPI), `await asyncio.to_thread({fn}, ...)` or "
               f"`await loop.run_in_executor(executor, {fn}, ...)` — or declare `{top.function}` "
               f"with plain `def` so the framework runs it in its thread pool.")
    if top.kind == CallbackKind.BLOCKING_CALL:
        return [f"`{top.function}` blocks the loop in {_BLOCKING_WORDS[top.blocking]} ({top.detail}): "
                f"{_ASYNC_REPLACEMENT[top.blocking]}, so the loop serves other requests while it waits.",
                offload]
    cores = analysis.os.usable_cores if analysis.os is not None else None
    workers = (f" (`uvicorn --workers {int(cores)}`, or gunicorn `-k uvicorn.workers.UvicornWorker "
               f"-w {int(cores)}`)") if cores else ""
    if top.python_share > 0.5:
        second = ("That code is mostly pure Python and holds the GIL, so a thread pool runs it one "
                  "thread at a time: run it in a process pool (`ProcessPoolExecutor`) or run more "
                  "worker processes" + workers + ".")
    else:
        second = ("Native compute (numpy, torch, ONNX Runtime) releases the GIL, so the thread pool "
                  "runs it on every core; then size the worker processes to the cores" + workers + ".")
    return [offload, second]


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 needs=(Input.EVENT_LOOPS,), uses=(Input.OS_COUNTERS,))
