"""event_loop_blocked: an event loop runs synchronous app code long enough that requests queue.

One loop thread serves every request of its process. While an `async def` endpoint computes
inline or makes a blocking call, nothing else on that loop moves: the loop is "busy" but the
work could have run elsewhere. A loop idle in its selector most of the time is no problem.
"""

from __future__ import annotations

from diagnose.checks.base import (amdahl, NotApplicable, ScoreBasis, Site, make_finding, pct, ramp,
                                  serial_gain, short_path)

ID = "event_loop_blocked"
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


def run(analysis, settings):
    loops = analysis.event_loops
    if not loops:
        return NotApplicable(ID, "no event-loop thread was seen")
    loop = loops[0]  # the one blocked the most
    app_callbacks = [c for c in loop.callbacks if c.kind != "framework"]
    score = ramp(loop.app_share, settings["low"], settings["high"])
    top = app_callbacks[0] if app_callbacks else None
    evidence = {
        "loop_thread": loop.name, "loop_flavor": loop.flavor, "loop_samples": loop.samples,
        "loop_busy_share": loop.busy_share, "loop_idle_share": loop.idle_share,
        "app_sync_share": loop.app_share, "framework_share": loop.framework_share,
        "loop_thread_cpu_share_os": loop.cpu_share_os,
        "estimated_blocking_per_request_s": loop.est_block_per_request_s,
        "estimated_blocking_per_request_min_s": loop.est_block_min_s,
        "estimated_blocking_per_request_max_s": loop.est_block_max_s,
        "blocking_estimate_basis": loop.est_basis or None,
        "event_loops": len(loops),
    }
    if top is None:
        summary = (f"the event loop ({loop.name}) was busy {pct(loop.busy_share)} of the time, "
                   f"idle in its selector {pct(loop.idle_share)}; no app code ran on it")
        return make_finding(ID, settings, score, summary, evidence, advice=[], samples=loop.samples)
    what = (_BLOCKING_WORDS[top.blocking] if top.kind == "blocking_call"
            else _PHASE_WORDS.get(top.phase, "CPU work"))
    evidence["fix"] = {"knob": "offload", "value": _callee(top)}
    evidence.update({"coroutine": top.function, "work_kind": "blocking call" if top.kind == "blocking_call"
                     else "CPU work", "work": what, "call": top.detail})
    where = (f" at {short_path(top.call_site['file'])}:{top.call_site['line']}"
             if top.call_site else "")
    summary = (f"the event loop ({loop.name}, {loop.flavor}) ran synchronous code inside "
               f"{top.function} {pct(loop.app_share)} of the time — {what}{where} — so requests "
               f"queue behind it; it was idle in its selector {pct(loop.idle_share)} of the time")
    summary += _per_request(loop)
    sites = [Site(top.function, top.file, top.line, top.share)]
    if top.call_site and (top.call_site["file"], top.call_site["line"]) != (top.file, top.line):
        sites.append(Site(top.call_site["function"], top.call_site["file"], top.call_site["line"],
                          top.share))
    sites += [Site(c.function, c.file, c.line, c.share) for c in app_callbacks[1:4]]
    if top.kind == "blocking_call":
        gain = (amdahl(loop.app_share),
                f"estimate: the loop waits in a blocking call {pct(loop.app_share)} of the time; "
                f"awaited instead, the loop serves other requests meanwhile (Amdahl)")
    else:
        gain = serial_gain(loop.app_share, analysis, "synchronous work on the loop")
    return make_finding(ID, settings, score, summary, evidence, sites,
                        advice=_advice(top, analysis) + list(settings.get("advice", [])), gain=gain,
                        samples=loop.samples,
                        basis=ScoreBasis("app_sync_share", lambda s: ramp(s, settings["low"], settings["high"]),
                                         amdahl if top.kind == "blocking_call" else
                                         lambda s: serial_gain(s, analysis, "")[0]))


def _per_request(loop) -> str:
    low, high = loop.est_block_min_s, loop.est_block_max_s
    if low is not None and high is not None:
        return f" (estimated {1000 * low:.0f}-{1000 * high:.0f} ms of it per request)"
    if low is not None:
        return f" (estimated at least {1000 * low:.0f} ms of it per request)"
    if high is not None:
        return f" (estimated at most {1000 * high:.0f} ms of it per request)"
    return ""


def _callee(top) -> str:
    detail = top.detail.removeprefix("calls ")
    return detail.split(" at ", 1)[0] if not detail.startswith("at ") else "the blocking call"


def _advice(top, analysis) -> list[str]:
    fn = _callee(top)
    offload = (f"Move `{fn}` off the event loop: `await run_in_threadpool({fn}, ...)` "
               f"(Starlette / FastAPI), `await asyncio.to_thread({fn}, ...)` or "
               f"`await loop.run_in_executor(executor, {fn}, ...)` — or declare `{top.function}` "
               f"with plain `def` so the framework runs it in its thread pool.")
    if top.kind == "blocking_call":
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
