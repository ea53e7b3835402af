"""Poll loops (model/poll_loops.py, checks/poll_loop.py): a request thread asleep at a sleep
inside a `while` loop of its own code polls for a result another thread produces. Only that
shape is a poll: a sleep on its own, in a `for` loop, in a nested def or awaited is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnose.model.poll_loops import _sleeps_in_while_loops
from diagnose.samples import source
from tests.conftest import WORKLOADS, marker_line
from tests.replay import replay

SERVICE = '''\
import asyncio, time

def wait_polling(results, key):
    while key not in results:
        time.sleep(0.02)  # polls
    return results.pop(key)

def remote_call():
    time.sleep(0.005)  # a simulated call: no loop

def retry(call):
    for attempt in range(3):
        try:
            return call()
        except OSError:
            time.sleep(2 ** attempt)  # backoff: a for loop

def spin_up(pool):
    while not pool.ready():
        def later():
            time.sleep(1)  # a nested def's body runs elsewhere
        pool.submit(later)
        sleep(0.1)  # a bare name polls too

async def poll_task(flag):
    while not flag.is_set():
        await asyncio.sleep(0.01)  # the event loop's sleep, not a thread's
'''


@pytest.fixture
def service(tmp_path: Path) -> str:
    path = tmp_path / "service.py"
    path.write_text(SERVICE)
    source.clear()
    return str(path)


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(SERVICE.splitlines(), 1) if text in line)


def test_a_sleep_inside_a_while_loop_is_a_poll_and_maps_to_its_loop(service):
    found = _sleeps_in_while_loops(service)
    assert found[line_of("# polls")] == line_of("while key not in results")
    assert found[line_of("# a bare name polls too")] == line_of("while not pool.ready()")


def test_a_lone_sleep_a_for_loops_backoff_a_nested_def_and_an_awaited_sleep_are_no_polls(service):
    found = _sleeps_in_while_loops(service)
    for text in ("# a simulated call", "# backoff", "# a nested def", "# the event loop's sleep"):
        assert line_of(text) not in found, text


def test_an_unreadable_or_unparsable_file_has_no_polls(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("while True:\n    time.sleep(1\n")
    source.clear()
    assert _sleeps_in_while_loops(str(broken)) == {}
    assert _sleeps_in_while_loops(str(tmp_path / "missing.py")) == {}


def test_a_recorded_poll_for_its_result_is_the_verdict_not_waiting_for_work(tmp_path):
    # fixtures/workloads/poll_for_result.py at its defaults: 8 request threads sleeping 20 ms
    # between looks at the results; before poll_loop it read "underloaded: waiting on calls
    # outside the process (IO, sleep)"
    report = replay("poll", "poll_for_result", tmp_path)
    assert report.verdict.primary == "poll_loop", report.verdict
    found = next(f for f in report.findings if f.id == "poll_loop")
    line = marker_line(WORKLOADS / "poll_for_result.py", "poll-sleep")
    assert (found.sites[0].function, found.sites[0].line) == ("wait_polling", line)
    assert found.score >= 75 and found.predicted_gain is not None and found.predicted_gain > 2
    assert report.verdict.first_advice[0].startswith("Stop polling at wait_polling")
    assert "threading.Event" in report.verdict.first_advice[0]
    underloaded = next(f for f in report.findings if f.id == "underloaded")
    assert underloaded.score < 25, underloaded.summary


def test_a_worker_processs_supervising_loop_under_its_start_is_no_poll(tmp_path):
    # fixtures/workloads/forked_workers.py: each worker process's main thread runs
    # `while not stop and time.monotonic() < deadline: ...; time.sleep(0.1)` right under its
    # multiprocessing start (a forked child's stack keeps its parent's main() under it). It read
    # as a poll at 33 (20% of the "request" time) beside the tree's real findings.
    report = replay("poll", "forked_workers_supervising", tmp_path)
    found = next(f for f in report.findings if f.id == "poll_loop")
    assert found.score == 0 and not found.sites, found.summary
    assert report.verdict.primary != "poll_loop"


def test_a_pipeline_starved_because_its_requests_poll_is_not_waiting_for_work(tmp_path):
    # CI's live attach of poll_for_result: a sample caught the request threads' put, so the
    # structure read a pipeline (requests -> queue -> model thread) whose one stage, the model
    # thread, starved all window; underloaded read that as every stage waiting for input (100),
    # though the requests feeding it were in flight, asleep in their poll
    report = replay("poll", "poll_for_result_as_a_pipeline", tmp_path)
    assert report.verdict.primary == "poll_loop"
    underloaded = next(f for f in report.findings if f.id == "underloaded")
    assert underloaded.score < 25, underloaded.summary
