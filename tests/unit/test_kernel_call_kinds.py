"""kernel_work's first advice fits the calls the native samples caught (checks/kernel_calls.py):
sends on a socket are joined into fewer messages, file writes buffered, a process per request
kept as a worker; calls of no single kind get the general remedy."""

from __future__ import annotations

import pytest

from diagnose.checks import kernel_work
from diagnose.checks.base import Finding
from diagnose.checks.kernel_calls import CallKind, call_kind, fewer_calls_advice
from tests.conftest import REPO, marker_line
from tests.replay import replay
from tests.unit.test_gc_pressure import GIL_WAIT, LIBC, PYTHON, THREAD, analysis, native, py
from tests.unit.test_kernel_and_children import KERNEL, SPAWNING, WRITING, with_times

# a statsd client's line sending a datagram per metric: the thread inside libc's sendto
SENDING = THREAD + [py("emit", 29), native("sock_sendto"), native("__libc_sendto", LIBC)]
SERVERS = REPO / "fixtures" / "servers"
READING = THREAD + [py("load_row", 12), native("_io_FileIO_readinto"), native("read", LIBC)]


@pytest.mark.parametrize(("calls", "kind"), [
    ((("sendto", 24), ("send", 5), ("write", 2)), CallKind.SEND),
    ((("write", 30),), CallKind.WRITE),
    ((("openat", 6), ("newfstatat", 4), ("close", 3), ("read", 2)), CallKind.FILES),
    ((("vfork", 9), ("execve", 3)), CallKind.SPAWN),
    ((("write", 5), ("read", 5)), CallKind.MIXED),  # no kind holds most of them
    ((), CallKind.MIXED),
])
def test_the_calls_kind_is_the_one_holding_most_of_their_samples(calls, kind):
    assert call_kind(calls) is kind


def test_every_kind_has_its_own_remedy_and_keeps_the_line_and_the_share():
    texts = {fewer_calls_advice(kind, " at emit (app.py:29)", "76%") for kind in CallKind}
    assert len(texts) == len(CallKind)
    assert all(t.startswith("Make fewer system calls at emit (app.py:29): ") and "76% of the CPU" in t
               for t in texts)


def test_a_line_sending_a_datagram_per_message_is_told_to_join_the_messages():
    found = kernel_work.run(with_times(analysis({1: [(SENDING, 30), (PYTHON, 30)], 2: [(GIL_WAIT, 60)]}),
                                       0.8, 1.2), KERNEL)
    assert isinstance(found, Finding) and (found.sites[0].function, found.sites[0].line) == ("emit", 29)
    assert found.advice[0].startswith("Make fewer system calls at emit")
    assert "send fewer, larger messages" in found.advice[0] and "buffer the writes" not in found.advice[0]
    assert [f.knob for f in found.fixes] == ["batch_syscalls"]


def test_writes_and_reads_of_no_single_kind_get_the_general_remedy():
    found = kernel_work.run(with_times(analysis({1: [(WRITING, 20), (READING, 20), (PYTHON, 20)]}), 0.8, 1.2),
                            KERNEL)
    assert isinstance(found, Finding)
    assert "buffer the writes" in found.advice[0] and "read in large blocks" in found.advice[0]


def test_a_process_started_per_request_is_told_to_keep_a_worker():
    found = kernel_work.run(with_times(analysis({1: [(SPAWNING, 30), (PYTHON, 30)]}), 0.8, 1.2), KERNEL)
    assert isinstance(found, Finding) and found.sites[0].function == "fingerprint"
    assert "keep a worker process" in found.advice[0]


def test_recorded_statsd_client_sending_a_datagram_per_metric_is_told_to_batch_them(tmp_path):
    # fixtures/servers/metrics_emitter.py under gunicorn -k gthread and wrk on CPython 3.11: 76%
    # of the CPU the kernel's, the native samples in sendto (24), send (5) and write (2).
    # Batching 50 metrics a datagram (BATCH=1) measured 4.0-4.7x against 4.00x predicted.
    report = replay("kernel", "metrics_per_datagram_gthread", tmp_path)
    assert report.verdict.primary == "kernel_work"
    found = next(f for f in report.findings if f.id == "kernel_work")
    line = marker_line(SERVERS / "metrics_emitter.py", "metric-per-datagram")
    assert (found.sites[0].function, found.sites[0].line) == ("emit", line)
    assert report.verdict.first_advice[0].startswith("Make fewer system calls at emit")
    assert "send fewer, larger messages" in report.verdict.first_advice[0]
