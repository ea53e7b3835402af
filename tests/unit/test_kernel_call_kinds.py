"""kernel_work's first advice fits the calls the native samples caught (checks/kernel_calls.py):
sends on a socket are joined into fewer messages, file writes buffered, a process per request
kept as a worker; calls of no single kind get the general remedy."""

from __future__ import annotations

import pytest

from diagnose.checks import kernel_work
from diagnose.checks.base import Finding
from diagnose.checks.kernel_calls import CallKind, call_kind, fewer_calls_advice, round_trips
from tests.conftest import REPO, marker_line
from tests.replay import replay
from tests.unit.test_gc_pressure import GIL_WAIT, LIBC, PYTHON, THREAD, analysis, native, py
from tests.unit.test_kernel_and_children import KERNEL, SPAWNING, WRITING, with_times

# a statsd client's line sending a datagram per metric: the thread inside libc's sendto
SENDING = THREAD + [py("emit", 29), native("sock_sendto"), native("__libc_sendto", LIBC)]
SERVERS = REPO / "fixtures" / "servers"
# a feature fetched per key: the request's send, then the wait in recv for its answer, two lines
# of one function (the thread waits for each answer, so its sends take few of the samples)
ASKING = THREAD + [py("fetch_features", 49), native("sock_sendall"), native("__libc_send", LIBC)]
AWAITING = THREAD + [py("fetch_features", 50), native("_io__Buffered_readline"),
                     native("sock_recv_into"), native("__libc_recv", LIBC)]
# the server reading the next request from its client, in its own function
SERVING = THREAD + [py("ThreadWorker.handle", 553, "/srv/venv/lib/python3.11/site-packages/gunicorn/gthread.py"),
                    native("sock_recv_into"), native("__libc_recv", LIBC)]
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
    assert all(t.startswith(("Make fewer system calls at emit (app.py:29): ", "Make fewer round trips at emit "
                             "(app.py:29): ")) and "76% of the CPU" in t for t in texts)


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


@pytest.mark.parametrize(("calls", "answer"), [
    ((("recv", 168), ("send", 13)), True),  # the features_per_key recording's fetch_features
    ((("send", 10), ("recv", 10)), True),
    ((("recv", 100), ("send", 2)), False),  # a large answer read in small pieces: one send
    ((("sendto", 30),), False),  # datagrams, no answers
    ((("recv", 30),), False),
    ((("recv", 5), ("send", 5), ("write", 30)), False),  # mostly file writes
    ((), False),
])
def test_sends_and_receives_of_one_function_are_round_trips(calls, answer):
    assert round_trips(calls) is answer


def test_a_function_asking_for_each_item_is_told_to_ask_for_many_per_round_trip():
    found = kernel_work.run(with_times(analysis({1: [(AWAITING, 40), (ASKING, 8), (PYTHON, 12)],
                                                 2: [(AWAITING, 40), (PYTHON, 20)]}), 0.8, 1.2), KERNEL)
    assert isinstance(found, Finding) and found.sites[0].function == "fetch_features"
    assert found.advice[0].startswith("Make fewer round trips at fetch_features")
    assert "MGET or a pipeline" in found.advice[0]
    assert [(f.knob, f.value) for f in found.fixes] == [("batch_round_trips", "fetch_features:50")]


def test_sends_beside_a_servers_own_receives_elsewhere_are_no_round_trips():
    # the service sends datagrams at emit; the server's recv of its requests is another function
    found = kernel_work.run(with_times(analysis({1: [(SENDING, 30), (SERVING, 10), (PYTHON, 20)]}), 0.8, 1.2),
                            KERNEL)
    assert isinstance(found, Finding) and found.sites[0].function == "emit"
    assert found.advice[0].startswith("Make fewer system calls at emit")
    assert found.fixes[0].knob == "batch_syscalls" and found.gain_floor is None


def test_recorded_feature_fetch_per_key_is_told_to_batch_its_round_trips(tmp_path):
    # fixtures/servers/features_per_key.py (gunicorn -k gthread -w 2, a GET per feature to
    # kv_store.py on the same cores): 62% of the CPU the kernel's, in recv (168) and send (13)
    # of fetch_features. The advice was "receive in large blocks: a buffered reader", which it
    # used already, its gain "at most 2.60x"; one MGET for the 100 keys measured 9.88x.
    report = replay("kernel", "features_fetched_per_key_gthread", tmp_path)
    assert report.verdict.primary == "kernel_work"
    found = report.finding("kernel_work")
    assert found is not None
    line = marker_line(SERVERS / "features_per_key.py", "get-per-key")
    assert (found.sites[0].function, found.sites[0].line) == ("fetch_features", line)
    assert report.verdict.first_advice[0].startswith(f"Make fewer round trips at fetch_features "
                                                     f"(servers/features_per_key.py:{line})")
    # the kernel's share is a floor for it: the store's work per key goes too
    assert found.gain_floor is not None and "peer's work" in found.gain_floor
    # the ranked lever is the advice's own, a floor: not "if the system calls cost nothing", an
    # upper bound, beside a note calling the same figure a lower bound
    lever = found.levers[0]
    assert lever.label == "with fewer round trips" and not lever.upper_bound
    assert lever.gain == found.predicted_gain and "a floor" in lever.basis
    assert found.fared is not None and "MGET" in found.fared
