"""The `.speedscope.json` files diagnose leaves beside its reports, opened in the real speedscope
app: the npm package `speedscope`'s offline build (pinned and installed outside the repository by
scripts/install-test-tools.sh), loaded the way its command line loads a file (`speedscope FILE`
writes a script that calls `speedscope.loadFileFromBase64` and opens
`index.html#localProfilePath=SCRIPT`), in the system Chromium.

Each file must import without an error and show one profile per thread of the JSON report, named
after it, with the report's weight (its samples x the interval). speedscope's own model is read
back through its Export button: the stacks it imported, with their weights and depth, are the
report's.

One difference is speedscope's, not the file's: a sample with no frame at all (late_thread has
one: a thread caught between its start and its first Python frame) keeps its weight in the file,
but speedscope adds it to no frame and leaves it out of the profile's total weight. The tests
assert that the file holds it and that speedscope's total is the rest."""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path

import pytest

from diagnose.report.model import Report
from tests.browser.conftest import requires_browser
from tests.browser.typed import read_report
from tests.conftest import RECORDED, invoke_cli
from tests.speedscope_file import EventedProfile, SpeedscopeFrame, read_evented, read_speedscope

pytestmark = [requires_browser]

SPEEDSCOPE_DIR = Path(os.environ.get("DIAGNOSE_SPEEDSCOPE_DIR")
                      or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                      / "diagnose" / "speedscope")
APP = SPEEDSCOPE_DIR / "node_modules" / "speedscope" / "dist" / "release" / "index.html"
requires_speedscope = pytest.mark.skipif(
    not APP.is_file(), reason=f"the speedscope app is not installed at {APP} "
                              "(bash scripts/install-test-tools.sh installs the pinned npm package)")

# lock_contention: py-spy's own file, which diagnose keeps. fork_tree (three processes of a forked
# tree) and late_thread (a thread that starts mid-recording): py-spy chrometrace recordings whose
# speedscope file diagnose writes (diagnose/render/speedscope_out.py).
RECORDINGS = {"lock_contention": "lock_contention.speedscope.json",
              "fork_tree": "fork_tree.chrometrace.json",
              "late_thread": "late_thread.chrometrace.json"}
WAIT_MS = 20000


@pytest.fixture(scope="module", params=sorted(RECORDINGS))
def analysed(request, tmp_path_factory) -> tuple[Report, Path]:
    """(the JSON report, the .speedscope.json beside it) of `diagnose analyze` on a recording."""
    name = request.param
    out = tmp_path_factory.mktemp(f"speedscope-{name}")
    proc, _ = invoke_cli("analyze", RECORDED / RECORDINGS[name], "--procfs",
                         RECORDED / f"{name}.procfs.json", "--output-dir", out, check_json=False)
    assert proc.returncode == 0, proc.stderr
    report_path = next(p for p in out.glob("*.json") if not p.name.endswith(".speedscope.json"))
    (speedscope,) = out.glob("*.speedscope.json")
    return read_report(report_path), speedscope


def report_threads(report: Report) -> dict:
    """The report's threads, by the profile name speedscope files give them: the stacks they
    were sampled in (frames as (function, file, line), root first) and seconds in each."""
    stacks = report.stacks
    interval = stacks.interval_s
    threads: dict = {}
    for row in stacks.samples:
        name = ((f"Process {row.pid} " if row.pid is not None else "")
                + f'Thread {row.tid} "{row.thread}"')
        stack = tuple((stacks.frames[i].function, stacks.frames[i].file, stacks.frames[i].line)
                      for i in row.stack)
        weights = threads.setdefault(name, {})
        weights[stack] = weights.get(stack, 0.0) + row.count * interval
    return threads


def framed_total(stacks: dict) -> float:
    """The seconds speedscope counts in a profile's total: those of samples with a frame."""
    return sum(seconds for stack, seconds in stacks.items() if stack)


def evented_stacks(profile: EventedProfile, frames: list[SpeedscopeFrame]) -> dict:
    """An evented profile (speedscope's export) as {stack: seconds}: the open frames between
    consecutive events, root first."""
    open_frames: list = []
    weights: dict = {}
    last = profile.start_value
    for event in profile.events:
        if open_frames and event.at > last:
            stack = tuple((frames[i].name, frames[i].file, frames[i].line) for i in open_frames)
            weights[stack] = weights.get(stack, 0.0) + event.at - last
        last = event.at
        if event.type == "O":
            open_frames.append(event.frame)
        else:
            assert open_frames.pop() == event.frame, "speedscope closed a frame it did not open"
    assert open_frames == []
    return weights


_UNITS = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def shown_seconds(text: str) -> tuple[float, float]:
    """A duration as speedscope prints it ("833.33ms", "3.97s", "1:05"): (seconds, rounding)."""
    if match := re.fullmatch(r"(\d+):(\d\d)", text):
        return int(match.group(1)) * 60 + int(match.group(2)), 1.0
    match = re.fullmatch(r"([\d.]+)(ns|µs|us|ms|s)", text)
    assert match, f"not a duration: {text!r}"
    decimals = len(match.group(1).partition(".")[2])
    unit = _UNITS[match.group(2)]
    return float(match.group(1)) * unit, 0.5 * 10 ** -decimals * unit * 1.01


def open_in_speedscope(browser, profile_path: Path, tmp_path: Path):
    """Loads the file as `speedscope FILE` does; returns (page, context, console, errors,
    requests outside the app)."""
    script = tmp_path / "load-profile.js"
    script.write_text("speedscope.loadFileFromBase64(%s, %s)" % (
        json.dumps(profile_path.name), json.dumps(base64.b64encode(profile_path.read_bytes())
                                                  .decode("ascii"))), encoding="utf-8")
    context = browser.new_context(viewport={"width": 1400, "height": 900}, accept_downloads=True,
                                  service_workers="block")
    console: list = []
    errors: list = []
    outside: list = []
    allowed = (APP.parent.as_uri() + "/", script.as_uri(), "file:///" + str(script))

    def route(r):
        url = r.request.url.split("#")[0]
        if url.startswith(allowed) or url.startswith("data:") or url.startswith("blob:"):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("console", lambda m: console.append((m.type, m.text)))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_default_timeout(WAIT_MS)
    page.goto(APP.as_uri() + "#localProfilePath=" + str(script), wait_until="load")
    return page, context, console, errors, outside


@requires_speedscope
def test_speedscope_imports_the_file_with_the_reports_threads_stacks_and_weights(
        browser, analysed, tmp_path):
    report, profile_path = analysed
    threads = report_threads(report)
    written = read_speedscope(profile_path)
    page, context, console, errors, outside = open_in_speedscope(browser, profile_path, tmp_path)
    try:
        # the toolbar names the first profile and counts them: "NAME (1/N)"
        counter = page.get_by_text(re.compile(r"^\(1/\d+\)$"))
        counter.wait_for()
        assert counter.inner_text() == f"(1/{len(threads)})"
        body = page.inner_text("body")
        assert "Something went wrong" not in body and "Unrecognized format" not in body
        assert any(text.startswith("Importing as speedscope json") for _, text in console)

        # its profile list: one row per thread, with speedscope's total weight of each
        counter.click()
        rows = page.locator("tr").all_inner_texts()
        listed = {}
        for row in rows:
            cells = row.split("\t")
            if len(cells) == 3 and cells[0].isdigit():
                listed[cells[1]] = cells[2]
        assert sorted(listed) == sorted(threads)
        for name, stacks in threads.items():
            seconds, rounding = shown_seconds(listed[name])
            assert seconds == pytest.approx(framed_total(stacks), abs=rounding), name
        page.keyboard.press("Escape")

        # speedscope's model of the file, written back by its Export button
        with page.expect_download(timeout=WAIT_MS) as download:
            page.get_by_text("Export", exact=False).first.click()
        exported = read_evented(Path(download.value.path()))
    finally:
        context.close()
    assert errors == [] and [t for k, t in console if k == "error"] == []
    assert outside == []

    assert exported.exporter.startswith("speedscope@")
    # the file holds every sample of the report, those without a frame included
    assert sorted(p.name for p in written.profiles) == sorted(threads)
    for profile in written.profiles:
        assert sum(profile.weights) == pytest.approx(sum(threads[profile.name].values()))
    profiles = {p.name: p for p in exported.profiles}
    assert sorted(profiles) == sorted(threads)
    for name, stacks in threads.items():
        imported = evented_stacks(profiles[name], exported.frames)
        # its time range spans every sample; its frames, the samples that have one
        span = profiles[name].end_value - profiles[name].start_value
        assert span == pytest.approx(sum(stacks.values()))
        assert sum(imported.values()) == pytest.approx(framed_total(stacks))
        framed = {stack: seconds for stack, seconds in stacks.items() if stack}
        if written.exporter == "diagnose":
            assert max(map(len, imported)) == max(map(len, framed)), name
            assert imported.keys() == framed.keys(), name
            for stack, seconds in framed.items():
                assert imported[stack] == pytest.approx(seconds), (name, stack)
        else:  # py-spy's own file: a process and a thread frame above the report's stacks
            assert written.exporter.startswith("py-spy")
            assert max(map(len, imported)) == max(map(len, framed)) + 2, name
