"""Report size and render time for a long, wide capture.

    python benchmarks/report_size.py [--threads 64] [--seconds 600] [--rate 100] [--stacks 400]
                                     [--loads 3] [--out DIR] [--no-browser] [--profile]

Builds a synthetic capture (by default 64 threads sampled at 100 Hz for 10 minutes: 3.84 M
samples) directly as a `diagnose.samples.profile.Profile`, runs it through the real pipeline
(analyze_profile, run_checks, build_report, page_data, render_html), writes the HTML, and opens it
in the system Chromium (headless, via Playwright, network blocked) to time the page until
`html[data-ready="true"]`. Prints one table. Targets: HTML < 5 MB, ready in < 2 s.

The capture is shaped like a real inference service: request threads that preprocess, run the
model and postprocess, several of them mostly queued on one model lock (native
`PyThread_acquire_lock_timed` frames), pool workers idle in concurrent/futures/thread.py
`_worker`, a main thread in an event loop and a few background threads. A few hundred distinct
stacks of depth 15-40 are drawn from a skewed (Zipf-like) distribution, in runs of consecutive
samples as real requests produce, with per-thread timed tracks of weight 1/rate.
`--profile` prints the slowest pipeline functions (cProfile) as well.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from diagnose.checks.engine import run_checks  # noqa: E402
from diagnose.classify.categories import Categorizer  # noqa: E402
from diagnose.model.analysis import analyze_profile  # noqa: E402
from diagnose.samples.profile import Frame, Profile, ThreadTrack  # noqa: E402
from diagnose.collect.run_context import RecordedSampling, RunContext  # noqa: E402
from diagnose.report.model import Target  # noqa: E402
from diagnose.model.service import ProcessView, Service  # noqa: E402
from diagnose.vocab import ProcessRole  # noqa: E402
from diagnose.render.html import render_html  # noqa: E402
from diagnose.render.html_data import page_data  # noqa: E402
from diagnose.run.build_report import build_report  # noqa: E402

SIZE_TARGET_MB = 5.0
RENDER_TARGET_S = 2.0

PY = "/usr/lib/python3.11"
LIBPY = "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
APP = "/srv/app"
SITE = "/srv/venv/lib/python3.11/site-packages"
TORCH = f"{SITE}/torch/lib/libtorch_cpu.so"


# ---------------------------------------------------------------------------------- stacks

class StackFactory:
    """Builds distinct, plausible stacks of depth 15-40 into a Profile."""

    def __init__(self, profile: Profile, rng: np.random.Generator):
        self.p = profile
        self.rng = rng

    def f(self, function: str, file: str, line: int = 0, native: bool | None = None) -> int:
        native = (line == 0) if native is None else native
        return self.p.intern_frame(Frame(function, file, line, native))

    def thread_base(self) -> list[int]:
        return [self.f("0x7f3a1c2d8ec", LIBC), self.f("0x7f3a1c29d1f5", LIBC),
                self.f("thread_run", LIBPY),
                self.f("Thread._bootstrap", f"{PY}/threading.py", 1002),
                self.f("Thread._bootstrap_inner", f"{PY}/threading.py", 1045),
                self.f("Thread.run", f"{PY}/threading.py", 982)]

    def request_prefix(self, variant: int) -> list[int]:
        layers = [("RequestWorker.loop", f"{APP}/server/worker.py", 88 + variant % 3),
                  ("Router.dispatch", f"{APP}/server/router.py", 141),
                  ("AuthMiddleware.__call__", f"{APP}/server/middleware.py", 57),
                  ("TracingMiddleware.__call__", f"{APP}/server/middleware.py", 112),
                  ("TimeoutMiddleware.__call__", f"{APP}/server/middleware.py", 164),
                  ("Handler.call", f"{APP}/server/handlers.py", 51),
                  ("handle_predict", f"{APP}/server/handlers.py", 203 + variant % 4)]
        return self.thread_base() + [self.f(*layer) for layer in layers]

    def python_chain(self, names: list[tuple[str, str]], depth: int) -> list[int]:
        out = []
        for i in range(depth):
            name, file = names[i % len(names)]
            out.append(self.f(name if i < len(names) else f"{name}_{i}", file,
                              int(20 + 7 * i + self.rng.integers(0, 3))))
        return out

    def preprocess(self, variant: int) -> list[int]:
        names = [("Pipeline.preprocess", f"{APP}/model/pipeline.py"),
                 ("decode_image", f"{APP}/model/image.py"),
                 ("Image.convert", f"{SITE}/PIL/Image.py"),
                 ("resize", f"{APP}/model/image.py"),
                 ("normalize", f"{APP}/model/image.py"),
                 ("Tokenizer.encode", f"{SITE}/tokenizers/implementations/base_tokenizer.py"),
                 ("to_tensor", f"{APP}/model/tensors.py")]
        return self.python_chain(names[variant % 3:], 4 + variant % 6)

    def model(self, variant: int) -> list[int]:
        chain = [self.f("Pipeline.run_model", f"{APP}/model/pipeline.py", 61),
                 self.f("Model.predict", f"{APP}/model/model.py", 40)]
        for i in range(3 + variant % 8):
            chain.append(self.f("Module._call_impl", f"{SITE}/torch/nn/modules/module.py", 1527))
            chain.append(self.f(["Encoder.forward", "Attention.forward", "MLP.forward",
                                 "Linear.forward", "LayerNorm.forward"][(i + variant) % 5],
                                f"{APP}/model/layers.py", 30 + 11 * ((i + variant) % 9)))
        return chain

    def postprocess(self, variant: int) -> list[int]:
        names = [("Pipeline.postprocess", f"{APP}/model/pipeline.py"),
                 ("decode_predictions", f"{APP}/model/outputs.py"),
                 ("serialize_response", f"{APP}/server/encode.py"),
                 ("dumps", f"{PY}/json/__init__.py"),
                 ("JSONEncoder.encode", f"{PY}/json/encoder.py")]
        return self.python_chain(names, 2 + variant % 4)

    # leaves -----------------------------------------------------------------
    def leaf_lock(self) -> list[int]:
        return [self.f("lock_PyThread_acquire_lock", LIBPY),
                self.f("PyThread_acquire_lock_timed", LIBPY),
                self.f("0x7f3a1c2a4d90", LIBC), self.f("0x7f3a1c299f16", LIBC)]

    def leaf_gil(self) -> list[int]:
        return [self.f("take_gil", LIBPY), self.f("pthread_cond_timedwait", LIBC)]

    def leaf_native(self, variant: int) -> list[int]:
        return [self.f("THPVariable_matmul", f"{SITE}/torch/lib/libtorch_python.so"),
                self.f("at::native::matmul", TORCH),
                self.f(["sgemm_kernel", "sgemm_oncopy", "gemm_thread_n"][variant % 3],
                       f"{SITE}/torch/lib/libopenblas.so.0")]

    def add(self, frames: list[int]) -> int:
        frames = frames[:40]
        assert len(frames) >= 15, len(frames)
        return self.p.intern_stack(tuple(frames))

    def build(self, n_stacks: int) -> dict[str, list[int]]:
        """Distinct stacks per thread kind, each list ordered most- to least-likely."""
        kinds = {"request": [], "locked": [], "idle": [], "main": [], "background": []}
        v = 0
        # request threads: busy in the three phases, sometimes queued for the GIL
        while len(kinds["request"]) < int(n_stacks * 0.85):
            prefix = self.request_prefix(v)
            phase = v % 5
            if phase in (0, 1):
                body = self.preprocess(v)
            elif phase in (2, 3):
                body = self.model(v) + (self.leaf_native(v) if v % 2 else [])
            else:
                body = self.postprocess(v)
            if v % 7 == 0:
                body = body + self.leaf_gil()
            sid = self.add(prefix + body)
            if sid not in kinds["request"]:
                kinds["request"].append(sid)
            v += 1
            if v > 50 * n_stacks:
                break
        # the model lock: `with self._lock:` in Model.predict, reached from a few routes
        model_lock = self.f("Model.predict", f"{APP}/model/model.py", 38)
        for r in range(6):
            prefix = self.request_prefix(r) + self.preprocess(r)[:1]
            kinds["locked"].append(self.add(prefix + [self.f("Pipeline.run_model",
                                                             f"{APP}/model/pipeline.py", 61),
                                                      model_lock] + self.leaf_lock()))
        # pool workers waiting for work
        base = self.thread_base()
        worker = self.f("_worker", f"{PY}/concurrent/futures/thread.py", 81)
        for r in range(4):
            tail = [self.f("_PyEval_EvalFrameDefault", LIBPY),
                    self.f("method_vectorcall_FASTCALL_KEYWORDS", LIBPY),
                    self.f("_queue_SimpleQueue_get", LIBPY),
                    self.f("_queue_SimpleQueue_get_impl", LIBPY),
                    self.f("PyThread_acquire_lock_timed", LIBPY),
                    self.f(f"0x7f3a1c2a4d9{r}", LIBC), self.f("0x7f3a1c299f16", LIBC),
                    self.f("syscall", LIBC), self.f("futex_wait", LIBC)]
            kinds["idle"].append(self.add(base + [worker] + tail))
        # main thread: event loop in select, now and then handling a connection
        main = [self.f("_start", "/usr/bin/python3.11"), self.f("__libc_start_main", LIBC),
                self.f("0x55d0c2a1b24a", "/usr/bin/python3.11"), self.f("Py_BytesMain", LIBPY),
                self.f("pymain_run_python", LIBPY), self.f("<module>", f"{APP}/serve.py", 12),
                self.f("main", f"{APP}/serve.py", 77),
                self.f("run", f"{PY}/asyncio/runners.py", 190),
                self.f("Runner.run", f"{PY}/asyncio/runners.py", 118),
                self.f("BaseEventLoop.run_until_complete", f"{PY}/asyncio/base_events.py", 640),
                self.f("BaseEventLoop.run_forever", f"{PY}/asyncio/base_events.py", 607),
                self.f("BaseEventLoop._run_once", f"{PY}/asyncio/base_events.py", 1884)]
        for r in range(3):
            kinds["main"].append(self.add(main + [
                self.f("EpollSelector.select", f"{PY}/selectors.py", 468),
                self.f("select_epoll_poll", LIBPY), self.f("epoll_wait", LIBC),
                self.f("0x7f3a1c31e0a1", LIBC), self.f("0x7f3a1c31e0b7", LIBC)][: 3 + r]))
        # background threads: metrics flush, heartbeats, log shipping
        for r in range(max(6, n_stacks - sum(len(k) for k in kinds.values()))):
            body = [self.f("BackgroundTask.run", f"{APP}/ops/background.py", 22),
                    self.f(["MetricsFlusher.tick", "Heartbeat.tick", "LogShipper.tick"][r % 3],
                           f"{APP}/ops/background.py", 30 + r % 13),
                    self.f("Event.wait", f"{PY}/threading.py", 629),
                    self.f("Condition.wait", f"{PY}/threading.py", 331),
                    self.f("lock_PyThread_acquire_lock", LIBPY),
                    self.f("PyThread_acquire_lock_timed", LIBPY),
                    self.f("0x7f3a1c2a4d90", LIBC), self.f("syscall", LIBC)]
            extra = self.python_chain([("collect", f"{APP}/ops/metrics.py"),
                                       ("Counter.snapshot", f"{APP}/ops/metrics.py")], 1 + r % 9)
            kinds["background"].append(self.add(base + extra + body))
        return kinds


def zipf_weights(n: int, s: float = 1.1) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** s
    return w / w.sum()


def draw_track(rng, choices: list[int], probs: np.ndarray, n: int, mean_run: float) -> np.ndarray:
    """n stack ids in runs of consecutive samples (a request stays in one place a while)."""
    runs = int(n / mean_run * 1.3) + 16
    lengths = rng.geometric(1.0 / mean_run, size=runs)
    picks = rng.choice(np.asarray(choices, dtype=np.int32), size=runs, p=probs)
    return np.repeat(picks, lengths)[:n].astype(np.int32)


def synthetic_profile(threads: int, seconds: float, rate: float, n_stacks: int,
                      seed: int = 7) -> Profile:
    rng = np.random.default_rng(seed)
    profile = Profile(native=True, source="speedscope", interval_s=1.0 / rate)
    kinds = StackFactory(profile, rng).build(n_stacks)
    n = int(round(seconds * rate))
    weight = 1.0 / rate
    n_idle, n_bg = max(1, threads // 8), max(1, threads // 16)
    n_request = threads - 1 - n_idle - n_bg
    n_locked = n_request // 3
    req = kinds["request"]
    for index in range(threads):
        if index == 0:
            name, choices, probs, mean_run = "MainThread", kinds["main"], np.array([0.9, 0.06, 0.04]), 40
        elif index <= n_request:
            k = index - 1
            name = f"request-{k}"
            # each request thread favours its own slice of the routes: skewed, not identical
            order = np.roll(np.arange(len(req)), -7 * k)
            body = [req[i] for i in order]
            lock_share = 0.8 if k < n_locked else 0.15
            choices = kinds["locked"] + body
            probs = np.concatenate([zipf_weights(len(kinds["locked"])) * lock_share,
                                    zipf_weights(len(body)) * (1 - lock_share)])
            mean_run = 12
        elif index <= n_request + n_idle:
            name = f"ThreadPoolExecutor-0_{index - n_request - 1}"
            busy = [req[i] for i in range(0, len(req), 9)][:8]
            choices = kinds["idle"] + busy
            probs = np.concatenate([zipf_weights(len(kinds["idle"])) * 0.92,
                                    zipf_weights(len(busy)) * 0.08])
            mean_run = 30
        else:
            name = ["metrics-flusher", "heartbeat", "log-shipper"][(index - n_request - n_idle - 1) % 3]
            choices = kinds["background"]
            probs = zipf_weights(len(choices), 0.8)
            mean_run = 50
        ids = draw_track(rng, choices, probs / probs.sum(), n, mean_run)
        profile.threads.append(ThreadTrack(40000 + index, name, ids, np.full(n, weight)))
    return profile


# ---------------------------------------------------------------------------------- pipeline

def run_pipeline(profile: Profile, run: RunContext) -> tuple[str, dict, dict]:
    """The real pipeline, step by step; timings are (wall s, CPU s) per step."""
    timings = {}
    categorizer = Categorizer()

    def step(name, fn, *a):
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn(*a)
        timings[name] = (time.perf_counter() - wall, time.process_time() - cpu)
        return out

    analysis = step("analyze_profile", analyze_profile, profile, categorizer, None, run)
    results = step("run_checks", run_checks, analysis)
    service = Service(analysis, [ProcessView(run.target.pid, None, ProcessRole.SINGLE,
                                             list(run.argv), analysis)])
    report = step("build_report", build_report, service, results)
    data = step("page_data", page_data, report, analysis, categorizer, "2026-01-01T00:00:00Z")
    html = step("render_html", render_html, data, report)
    return html, data, timings


# ---------------------------------------------------------------------------------- browser

# Records the moment the page marks itself ready, in ms since navigation start.
_READY_PROBE = """
new MutationObserver((_, obs) => {
  if (document.documentElement && document.documentElement.getAttribute('data-ready') === 'true') {
    window.__readyAt = performance.now();
    obs.disconnect();
  }
}).observe(document, {attributes: true, subtree: true, attributeFilter: ['data-ready']});
"""


def browser_times(html_path: Path, loads: int) -> dict | str:
    """Median and all load times, or a string saying why the browser could not run."""
    from tests.browser.conftest import CHROMIUM_ARGS, browser_unavailable, chromium_path

    reason = browser_unavailable()
    if reason:
        return reason
    from playwright.sync_api import sync_playwright

    url = html_path.resolve().as_uri()
    ready_ms, wall_s, switch_ms, blocked = [], [], [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            for _ in range(loads):
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                context.route("**/*", lambda r: r.continue_() if r.request.url == url
                              else (blocked.append(r.request.url), r.abort()))
                page = context.new_page()
                errors = []
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.add_init_script(_READY_PROBE)
                t = time.perf_counter()
                page.goto(url, wait_until="commit", timeout=120000)
                page.wait_for_selector('html[data-ready="true"]', state="attached", timeout=120000)
                wall_s.append(time.perf_counter() - t)
                ready_ms.append(page.evaluate("window.__readyAt"))
                # one interaction: rebuild the flame tree for the waits-only view
                switch_ms.append(page.evaluate("""() => {
                  const sel = document.getElementById('flame-state');
                  const t0 = performance.now();
                  sel.value = 'waits';
                  sel.dispatchEvent(new Event('change'));
                  return performance.now() - t0;
                }"""))
                drawn = int(page.get_attribute("#flame", "data-drawn-count"))
                lanes = int(page.get_attribute("#timeline", "data-lanes"))
                if errors:
                    raise RuntimeError(f"the page logged errors: {errors[:3]}")
                context.close()
        finally:
            browser.close()
    return {"ready_s": statistics.median(ready_ms) / 1000, "all_ready_s": [r / 1000 for r in ready_ms],
            "wall_s": statistics.median(wall_s), "switch_ms": statistics.median(switch_ms),
            "drawn": drawn, "lanes": lanes, "blocked": blocked}


# ---------------------------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--stacks", type=int, default=400, help="distinct stacks (about)")
    ap.add_argument("--loads", type=int, default=3, help="browser loads to take the median of")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "diagnose-bench")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--profile", action="store_true", help="cProfile the pipeline, print the top")
    args = ap.parse_args(argv)

    t = time.perf_counter()
    profile = synthetic_profile(args.threads, args.seconds, args.rate, args.stacks)
    build_s = time.perf_counter() - t
    command = ("python", "-m", "app.serve", "--workers", str(args.threads))
    run = RunContext(
        Target(pid=4242, python="3.11.7", threads=args.threads, cores=8, cmdline=" ".join(command)),
        RecordedSampling(mode="synthetic benchmark", duration_s=args.seconds, rate_hz=args.rate),
        argv=command)

    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    html, data, timings = run_pipeline(profile, run)
    if profiler:
        profiler.disable()

    args.out.mkdir(parents=True, exist_ok=True)
    html_path = args.out / "report.html"
    html_path.write_text(html, encoding="utf-8")
    size_mb = html_path.stat().st_size / 1e6
    flame_mb = len(json.dumps(data["flame"], separators=(",", ":"))) / 1e6
    timeline_mb = len(json.dumps(data["timeline"], separators=(",", ":"))) / 1e6
    analysis_s = sum(w for w, _ in timings.values())
    analysis_cpu = sum(c for _, c in timings.values())
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    browser = None if args.no_browser else browser_times(html_path, args.loads)

    rows = [
        ("samples", f"{profile.total_samples:,}"),
        ("threads", f"{len(profile.threads)}"),
        ("distinct stacks", f"{len(profile.stacks)}"),
        ("flame rows (stack, thread, state)", f"{len(data['flame']['stacks']):,}"),
        ("timeline runs", f"{sum(len(l['runs']) for l in data['timeline']['lanes']):,}"),
        ("build synthetic profile s", f"{build_s:.2f}"),
    ]
    rows += [(f"  {k} s (wall / CPU)", f"{w:.2f} / {c:.2f}") for k, (w, c) in timings.items()]
    rows += [
        ("analysis s, pipeline total (wall / CPU)", f"{analysis_s:.2f} / {analysis_cpu:.2f}"),
        ("peak RSS of the pipeline process MB", f"{peak_mb:.0f}"),
        ("HTML MB", f"{size_mb:.2f}  (flame {flame_mb:.2f}, timeline {timeline_mb:.2f})"),
    ]
    if isinstance(browser, dict):
        rows += [
            (f"browser to data-ready s (median of {args.loads})",
             f"{browser['ready_s']:.2f}  (loads: {', '.join(f'{x:.2f}' for x in browser['all_ready_s'])})"),
            ("browser goto+wait wall s (median)", f"{browser['wall_s']:.2f}"),
            ("flame switch to waits-only ms (median)", f"{browser['switch_ms']:.0f}"),
            ("flame nodes drawn / timeline lanes", f"{browser['drawn']} / {browser['lanes']}"),
        ]
        if browser["blocked"]:
            rows.append(("requests blocked (should be none)", str(browser["blocked"])))
    elif browser is not None:
        rows.append(("browser", f"skipped: {browser}"))
    width = max(len(k) for k, _ in rows)
    print(f"| {'measure'.ljust(width)} | value |")
    print(f"| {'-' * width} | ----- |")
    for k, v in rows:
        print(f"| {k.ljust(width)} | {v} |")
    print(f"\nreport: {html_path}")
    ok_size = size_mb < SIZE_TARGET_MB
    ok_time = not isinstance(browser, dict) or browser["ready_s"] < RENDER_TARGET_S
    print(f"targets: HTML < {SIZE_TARGET_MB:g} MB: {'met' if ok_size else 'MISSED'}; "
          f"ready < {RENDER_TARGET_S:g} s: "
          f"{'met' if ok_time and isinstance(browser, dict) else 'MISSED' if not ok_time else 'not measured'}")
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
        print(out.getvalue())
    return 0 if ok_size and ok_time else 1


if __name__ == "__main__":
    sys.exit(main())
