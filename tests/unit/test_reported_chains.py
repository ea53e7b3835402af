"""Where the waits end, in the report (report.chains, model/reported_chains.py): the chains of
waits of recorded attaches as `diagnose analyze` writes them to the .json, the page and the
ticket summary; which chains are kept; and names from the profiled process, hostile ones
included, kept inert in every output."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pandas as pd
import pytest

from diagnose.model.chains import Chain, Hop, Waiter
from diagnose.model.reported_chains import MAX_CHAINS, MIN_PROCESS_SHARE, reported_chains
from diagnose.render.html import render_html
from diagnose.render.markdown import render_markdown
from diagnose.report.model import Report
from diagnose.report.model.wait_chains import ChainEnd, ChainHop, ResourceKind, WaitChain
from diagnose.vocab import ProcessRole
from tests.conftest import RECORDED
from tests.replay import replay, replay_service
from tests.report_data import as_report
from tests.unit.test_markdown_summary import HOSTILE, assert_safe, plain

SCRIPT = "</script><img src=x onerror=alert(1)>"
CONTROL = "ctl\x1b[31m\x07\u202eevil"  # an escape sequence, a bell, a right-to-left override


# -- a recording: 16 request threads on a backend at its capacity ---------------------------------

@pytest.fixture(scope="module")
def saturated(tmp_path_factory) -> tuple[Report, dict]:
    """`diagnose analyze` of fixtures/recorded/backend_saturated_tcp with its companions: the
    report read back from its .json, and the .json itself."""
    into = tmp_path_factory.mktemp("backend_saturated_tcp")
    report = replay("backend_saturated_tcp", "front_end_16_threads", into)
    (written,) = [p for p in (into / "out").glob("*.json") if not p.name.endswith(".speedscope.json")]
    return report, json.loads(written.read_text())


def _recorded_pids() -> tuple[int, int]:
    """The front end's pid and the backend's, as the recording's /proc record has them."""
    procfs = json.loads((RECORDED / "backend_saturated_tcp" / "front_end_16_threads.procfs.json").read_text())
    (backend,) = {p for pids in procfs["servers"].values() for p in pids}
    (front,) = procfs["roots"]
    return front, backend


def test_a_saturated_local_backend_is_where_the_waits_end_with_every_hop(saturated):
    report, data = saturated
    front, backend = _recorded_pids()
    chain = report.chains[0]
    assert (chain.pid, chain.threads, chain.end) == (front, 16, ChainEnd.LOCAL_SERVER)
    assert chain.share > 0.9 and chain.thread_seconds > 50
    (hop,) = chain.hops
    assert hop.resource == ResourceKind.SOCKET and hop.pids == (backend,)
    assert hop.label == f"socket to {hop.address}" and hop.address.startswith("127.0.0.1:")
    assert hop.saturation is not None and hop.saturation > 0.9
    # the line names every hop, who serves it and the end
    assert chain.line.startswith(f"16 threads, {chain.share:.0%} of the time → {hop.label} → pid {backend} "
                                 "(python feature_backend.py ")
    assert chain.line.endswith("→ end: the server at capacity")
    # the .json carries it as written, and reads back to the same
    assert data["chains"][0]["end"] == "local_server" and data["chains"][0]["hops"][0]["pids"] == [backend]
    assert Report.from_json(data).chains == report.chains


def test_only_the_chains_that_matter_are_reported(saturated, tmp_path):
    """The recording's process has three chains; its main thread joining its workers and one
    resumed futex wait are each under MIN_PROCESS_SHARE of its thread time."""
    report, _ = saturated
    (view,) = replay_service("backend_saturated_tcp", "front_end_16_threads", tmp_path).processes
    assert len(view.analysis.chains) == 3
    assert [c.line for c in report.chains] == [report.chains[0].line]


def test_the_summary_and_the_page_state_the_first_chain(saturated):
    report, data = saturated
    line = report.chains[0].line
    text = render_markdown(report)
    (under,) = [s for s in text.splitlines() if s.startswith("**Where the waits end:**")]
    assert plain(under) == f"Where the waits end: pid {report.chains[0].pid}: {line}"
    # under the verdict: before the findings
    assert text.index("**Primary finding:**") < text.index(under) < text.index("### Top findings")
    html = render_html({"report": data}, report)
    assert '<section id="wait-chains"' in html
    view = html[html.index("<noscript>"):html.index("</noscript>")]
    assert f"<li>pid {report.chains[0].pid}: {line}</li>" in view


def test_every_process_of_a_tree_names_its_own_chains(tmp_path):
    """A parent waiting on its child, the child on the parent's pipe: one chain each."""
    report = replay("knots", "parent_waiting_on_its_childs_pipe", tmp_path)
    roles = {p.role: p.pid for p in report.processes}
    parent, child = roles[ProcessRole.MASTER], roles[ProcessRole.WORKER]
    by_pid = {c.pid: c for c in report.chains}
    assert set(by_pid) == {parent, child}
    assert by_pid[parent].end == ChainEnd.CHILD and by_pid[parent].hops[0].pids == (child,)
    assert by_pid[child].end == ChainEnd.LOCAL_PEER and by_pid[child].hops[0].resource == ResourceKind.PIPE
    assert by_pid[child].hops[0].pids == (parent,)


# -- which chains are kept --------------------------------------------------------------------------

def _chain(threads: int, share: float, label: str) -> Chain:
    return Chain(tuple(Waiter(t, share) for t in range(threads)), 10.0,
                 (Hop(ResourceKind.LOCK, label),), ChainEnd.LOCK_HOLDER)


def _service(*processes: tuple[int, int, tuple[Chain, ...]]) -> SimpleNamespace:
    """A service of processes (pid, threads, chains), as reported_chains reads one."""
    return SimpleNamespace(processes=[
        SimpleNamespace(pid=pid, role=ProcessRole.WORKER, analysis=SimpleNamespace(
            threads=pd.DataFrame({"tid": range(threads), "role": ["request"] * (threads - 1) + ["library"]}),
            chains=chains, task_chains=(), worker_threads=None))
        for pid, threads, chains in processes])


def test_a_chain_under_the_floor_of_its_process_thread_time_is_left_out():
    # 20 threads, one library thread among them: 19 the chains are drawn from
    under = 19 * MIN_PROCESS_SHARE * 0.9
    over = 19 * MIN_PROCESS_SHARE * 1.1
    service = _service((7, 20, (_chain(1, over, "kept"), _chain(1, under, "left out"))))
    assert [c.hops[0].label for c in reported_chains(service)] == ["kept"]


def test_at_most_max_chains_of_every_process_most_thread_time_first():
    first = (_chain(4, 0.5, "a"), _chain(2, 0.5, "b"), _chain(1, 0.9, "c"))
    second = tuple(_chain(3, 0.2 + 0.05 * i, f"w{i}") for i in range(8))
    found = reported_chains(_service((1, 5, first), (2, 4, second)))
    assert len(found) == MAX_CHAINS
    seconds = [c.thread_seconds for c in found]
    assert seconds == sorted(seconds, reverse=True)
    assert {c.pid for c in found} == {1, 2}
    assert found[0].hops[0].label == "a" and found[0].pid == 1


# -- names from the profiled process -------------------------------------------------------------

def hostile_chain(name: str) -> WaitChain:
    hop = ChainHop(ResourceKind.PIPE, f"pipe 4173845 (other end: {name} 11434)", pids=(11434,))
    return WaitChain(pid=11438, threads=1, share=1.0, thread_seconds=3.1, hops=(hop,), end=ChainEnd.LOCAL_PEER,
                     line=f"1 thread, 100% of the time → {hop.label} → pid 11434 → end: a local process")


def with_chains(*chains: WaitChain) -> Report:
    return dataclasses.replace(as_report({"verdict": {"headline": "h"}}), chains=chains)


def test_a_hostile_name_in_a_chain_stays_inert_in_the_page():
    report = with_chains(hostile_chain(SCRIPT + CONTROL))
    data = report.to_json()
    assert Report.from_json(data) == report
    html = render_html({"report": data}, report)
    assert SCRIPT not in html and "<img" not in html
    assert html.count("</script>") == 2  # the data block's and the page script's own
    view = html[html.index('<ol id="noscript-wait-chains">'):html.index("</noscript>")]
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in view  # each shown as its code point (in the data, a JSON string: inert)
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in view
    assert "[U+001B]" in view and "[U+202E]" in view


@pytest.mark.parametrize("name", [*HOSTILE, SCRIPT + CONTROL])
def test_a_hostile_name_in_a_chain_stays_one_escaped_line_in_the_summary(name):
    text = render_markdown(with_chains(hostile_chain(name)))
    assert_safe(text)
    (line,) = [s for s in text.splitlines() if s.startswith("**Where the waits end:**")]
    assert plain(line).startswith("Where the waits end: pid 11438: 1 thread, 100% of the time → pipe 4173845")


def test_a_report_without_chains_has_no_key_no_line_and_a_hidden_section():
    report = with_chains()
    assert "chains" not in report.to_json()
    assert Report.from_json(report.to_json()).chains == ()
    html = render_html({"report": report.to_json()}, report)
    assert '<section id="wait-chains" class="card" aria-labelledby="wait-chains-h" hidden>' in html
    assert "noscript-wait-chains" not in html
    assert "Where the waits end" not in render_markdown(report)


def test_a_wait_no_request_spends_time_in_is_left_out_beside_the_requests_own_chains():
    # replayed, every recording's report listed its main thread joining the workers ("lock ...
    # end: the lock's holder") beside the requests' chain, and a busy gunicorn tree's only line
    # was its master's own wait
    pid = 100
    main = Chain((Waiter(pid, 1.0),), 10.0, (Hop(ResourceKind.LOCK, "lock at 0x1"),), ChainEnd.LOCK_HOLDER)
    backend = Chain(tuple(Waiter(t, 0.9) for t in range(4)), 10.0,
                    (Hop(ResourceKind.SOCKET, "socket to 127.0.0.1:8000"),), ChainEnd.LOCAL_SERVER)
    idle = Chain((Waiter(5, 1.0),), 10.0, (Hop(ResourceKind.SOCKET, "accept"),), ChainEnd.WAITING_FOR_WORK)
    hung = Chain((Waiter(pid, 1.0),), 10.0, (Hop(ResourceKind.LOCK, "lock at 0x2"),), ChainEnd.KNOT)
    child = Chain((Waiter(pid, 1.0),), 10.0, (Hop(ResourceKind.CHILD, "a child process"),), ChainEnd.CHILD)

    def service(role: ProcessRole, tids: list[int], *chains: Chain) -> SimpleNamespace:
        roles = ["idle" if t == 5 else "other" for t in tids]  # waiting threads are not "request"
        return SimpleNamespace(processes=[SimpleNamespace(pid=pid, role=role, analysis=SimpleNamespace(
            threads=pd.DataFrame({"tid": tids, "role": roles}), chains=chains, task_chains=(),
            worker_threads=None))])

    threaded = [pid, 0, 1, 2, 3, 5]
    lines = [c.line for c in reported_chains(service(ProcessRole.SINGLE, threaded, main, backend, idle, hung))]
    assert len(lines) == 2 and "socket to 127.0.0.1:8000" in lines[0] and "knot" in lines[1], lines
    # a process whose main thread is its only thread: its wait is its work's
    assert [c.end for c in reported_chains(service(ProcessRole.SINGLE, [pid], main))] == [ChainEnd.LOCK_HOLDER]
    # a master's own waits are not the requests', but its wait for a child to exit is how a tree hangs
    assert [c.end for c in reported_chains(service(ProcessRole.MASTER, [pid], main, child))] == [ChainEnd.CHILD]
