"""The hidden-waits benchmark table: what it reads from a report, how it applies the advice to
the asyncio workloads, and that names from the profiled process cannot break its rows."""

from __future__ import annotations

import sys

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import advice_gain  # noqa: E402
import hidden_waits_table as table  # noqa: E402


def report(*findings: dict, primary: str) -> dict:
    return {"verdict": {"primary": primary}, "findings": list(findings)}


ASYNC_WAIT = {"id": "async_wait", "severity": "critical", "predicted_gain": 1.0,
              "sites": [{"file": "/srv/app.py", "line": 37, "function": "predict"}],
              "advice": ["Requests wait 94% of their time on the asyncio.Semaphore: raise it"],
              "evidence": {"primitive": "asyncio.Semaphore", "primitive_name": "MODEL_SLOTS",
                           "permits": 2, "tasks_waiting_avg": 29.0, "tasks_waiting_max": 31,
                           "task_reads": 13, "top_site_share": 0.9}}
CYCLE = {"id": "deadlock", "severity": "critical", "predicted_gain": None,
         "sites": [{"file": "/srv/cache.py", "line": 48, "function": "refresh"}],
         "advice": ["Break the await cycle: task loader must not await task refresh"],
         "evidence": {"locks_in_cycle": "task refresh -> task loader", "victim_tasks": 8}}


def test_an_async_wait_row_names_the_primitive_its_permits_and_the_waiting_tasks():
    d = table.describe(report(ASYNC_WAIT, primary="async_wait"))
    assert d.verdict == "async_wait" and d.site == "app.py:37 (predict)"
    assert d.waited_on == ("asyncio.Semaphore MODEL_SLOTS, 2 permits; waiting avg 29.0, max 31 "
                           "(13 reads)")
    # The capped prediction, beside the check's own Little's-law bound (1 / (1 - 0.9)).
    assert d.predicted == "1.00x (uncapped 10.0x)"


def test_a_critical_deadlock_row_shows_the_cycle_not_a_primitive_the_async_check_saw():
    d = table.describe(report(CYCLE, ASYNC_WAIT, primary="deadlock"))
    assert d.waited_on == "cycle: task refresh -> task loader; 8 victims"
    assert d.predicted == "hung"


def test_names_from_the_profiled_process_cannot_break_a_table_row():
    hostile = {**ASYNC_WAIT, "sites": [{"file": "a|b\n.py", "line": 1, "function": "f`|`"}]}
    row = table.Row("f", "3.12.1", table.describe(report(hostile, primary="async_wait")), "x",
                    1.0, 2.0, 2.0, 0.0)
    line = table.markdown([row]).splitlines()[2]
    assert "\n" not in line and "`" not in line.split("| x |")[0]
    # every pipe inside a cell is escaped: the row keeps its 11 cells
    assert line.replace("\\|", "").count("|") == 12


def test_the_asyncio_workloads_take_their_findings_fix_knobs():
    assert advice_gain.knob_args("async_semaphore", {"knob": "slots", "value": 31}) == \
        ["--permits", "31"]
    assert advice_gain.knob_args("async_semaphore", {"knob": "slots", "value": True}) is None
    assert advice_gain.knob_args("await_cycle", {"knob": "break_await",
                                                 "value": "task loader -> task refresh"}) == \
        ["--acyclic"]
