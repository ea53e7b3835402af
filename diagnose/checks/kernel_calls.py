"""What kind of system calls the kernel's work was, and the remedy for that kind.

kernel_work names the line that made the calls; the remedy depends on what the calls do. Sends
on a socket are made fewer by joining messages (a statsd client that sends a datagram per metric:
76% of its CPU the kernel's, 4.37x the throughput with 50 metrics a datagram), writes to a file by
a buffer, small reads by larger blocks, opens and stats by keeping the file open, a process per
request by a worker kept for the job. The kind is the one whose calls most native samples caught,
where it holds most of them; calls of no single kind get the general remedy. Sends and receives
made by one function are requests and their answers, made fewer by asking for many items per
round trip (a key-value GET per feature: 9.88x the throughput with one MGET for 100 keys).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable


class CallKind(enum.Enum):
    SEND = "sending on sockets"
    RECEIVE = "receiving from sockets"
    WRITE = "writing files"
    READ = "reading files"
    FILES = "opening and inspecting files"
    SPAWN = "starting processes"
    ROUND_TRIP = "requests and their answers on sockets"
    MIXED = "calls of several kinds"


_KINDS: dict[str, CallKind] = {
    **dict.fromkeys(("send", "sendto", "sendmsg", "sendmmsg"), CallKind.SEND),
    **dict.fromkeys(("recv", "recvfrom", "recvmsg", "recvmmsg"), CallKind.RECEIVE),
    **dict.fromkeys(("write", "pwrite", "writev", "pwritev", "fsync", "fdatasync", "sync_file_range",
                     "ftruncate", "truncate", "fallocate"), CallKind.WRITE),
    **dict.fromkeys(("read", "pread", "readv", "preadv", "lseek", "fadvise", "posix_fadvise"), CallKind.READ),
    **dict.fromkeys(("open", "openat", "creat", "close", "fstat", "stat", "lstat", "fstatat", "newfstatat",
                     "statx", "access", "faccessat", "getdents", "unlink", "unlinkat", "rename", "renameat",
                     "mkdir", "rmdir"), CallKind.FILES),
    **dict.fromkeys(("fork", "vfork", "clone", "clone3", "execve", "posix_spawn", "posix_spawnp"),
                    CallKind.SPAWN),
}
# The share of the calls' samples one kind must hold to set the remedy.
DOMINANT_SHARE = 0.5
# Of one function's socket calls, the share the rarer of sends and receives must hold for them to
# be requests and their answers: a thread waits in recv for each answer, so its sends take few of
# the samples (7% on fixtures/servers/features_per_key.py, a GET per key).
ROUND_TRIP_SHARE = 0.05


def round_trips(caller_calls: Iterable[tuple[str, int]]) -> bool:
    """The calls one function made (`caller_calls`: a call's name and its samples) are sends and
    receives on sockets, each at least ROUND_TRIP_SHARE of them: a request, then a wait for its
    answer, item after item."""
    calls = list(caller_calls)
    total = sum(samples for _, samples in calls)
    sends = sum(samples for name, samples in calls if _KINDS.get(name) is CallKind.SEND)
    receives = sum(samples for name, samples in calls if _KINDS.get(name) is CallKind.RECEIVE)
    return (total > 0 and sends + receives > DOMINANT_SHARE * total
            and min(sends, receives) >= ROUND_TRIP_SHARE * total)


def call_kind(calls: Iterable[tuple[str, int]]) -> CallKind:
    """The kind of most of the calls' samples (`calls`: a call's name and its samples), MIXED where
    no kind holds DOMINANT_SHARE of them."""
    by_kind: Counter[CallKind] = Counter()
    total = 0
    for name, samples in calls:
        total += samples
        kind = _KINDS.get(name)
        if kind is not None:
            by_kind[kind] += samples
    if not by_kind:
        return CallKind.MIXED
    kind, samples = by_kind.most_common(1)[0]
    return kind if samples > DOMINANT_SHARE * total else CallKind.MIXED


_REMEDIES: dict[CallKind, str] = {
    CallKind.SEND: ("send fewer, larger messages: join what the calls send into one (many metrics or log lines "
                    "in one datagram, a response written once rather than piece by piece), or hand the "
                    "messages to a batcher that sends them every N messages or milliseconds"),
    CallKind.RECEIVE: ("receive in large blocks: a buffered reader over the socket (socket.makefile('rb')) or "
                       "recv_into a large buffer, not a few bytes a call; ask the peer for batches"),
    CallKind.WRITE: ("buffer the writes (a file opened with a buffer, or the pieces joined and written once); "
                     "sync once per batch, not per record"),
    CallKind.READ: ("read in large blocks (a buffered file object, or the whole file in one read) and cache "
                    "what every request reads again"),
    CallKind.FILES: ("keep the files open and cache what opening and stat-ing them returns, instead of opening, "
                     "inspecting and closing them per request"),
    CallKind.SPAWN: ("stop starting a process per request: keep a worker process for the job and send it the "
                     "work, or do the work in-process with a library"),
    CallKind.ROUND_TRIP: ("ask for many items per round trip: the calls send a request and wait for its answer, "
                          "item after item (a key-value GET per feature, a query per row, an HTTP call per "
                          "item); use the protocol's batch form (MGET or a pipeline, a bulk endpoint, one query "
                          "for all the rows), so that one round trip carries them all"),
    CallKind.MIXED: ("buffer the writes (a file opened with a buffer, or the pieces joined and written once), "
                     "read in large blocks, keep files open"),
}


def fewer_calls_advice(kind: CallKind, at: str, kernel_share: str) -> str:
    """kernel_work's first advice for calls of `kind` made `at` a line (" at f (file:line)", or
    empty), the kernel's time being `kernel_share` of the CPU."""
    if kind is CallKind.ROUND_TRIP:
        return (f"Make fewer round trips{at}: {_REMEDIES[kind]}. The kernel's entry and exit cost {kernel_share} "
                f"of the CPU, and each answer waits for the peer's own work per item.")
    return (f"Make fewer system calls{at}: {_REMEDIES[kind]}: the kernel's entry and exit cost {kernel_share} "
            f"of the CPU whatever each call moves.")
