"""The local processes a service's connections lead to, found before the window
(`attach --follow-peers`): each connected TCP or Unix socket of the service's processes, and
whoever on this host listens where it leads. A Python one is then sampled as part of the
service (its stacks and threads), so a verdict that ends at it names what it runs; any other is
read from /proc as every server is (collect/procfs.TreeSampler._find_servers)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from diagnose.collect.sockets import serving_pids, socket_table

MAX_PEERS = 4  # peers sampled beside the service, at most: each takes a recorder and a budget


@dataclass(frozen=True)
class Peer:
    """A local process serving one of the service's connections."""

    pid: int
    address: str  # where the connection leads, as the sockets name it ("tcp 127.0.0.1:8000")
    python: bool  # it runs CPython: its stacks can be sampled


def _socket_inodes(pid: int) -> set[int]:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return set()
    inodes = set()
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def connected_peers(pids: Iterable[int]) -> list[Peer]:
    """The processes outside `pids` listening where `pids`' open connections lead, by pid (an
    accepted connection leads back to a client, not to a server, and is left out)."""
    from diagnose.collect.tree import node  # psutil lives there

    family = set(pids)
    found: dict[int, Peer] = {}
    parents: dict[int, int | None] = {}
    for pid in sorted(family):
        for value in sorted(set(socket_table(pid, _socket_inodes(pid)).values())):
            kind, _, address = value.partition(" ")
            if kind not in ("tcp", "unix") or address == "(unnamed)":
                continue
            for server in serving_pids(pid, address if kind == "tcp" else value):
                if server not in family and server not in found:
                    info = node(server)
                    found[server] = Peer(server, value, info is not None and info.python)
                    parents[server] = info.ppid if info is not None else None
    # a pre-fork server's workers share its listener: the master is followed, and its workers
    # with it as its children
    return [found[p] for p in sorted(found) if parents[p] not in found]
