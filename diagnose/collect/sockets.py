"""Who serves a socket a thread waits on: the local processes at its other end, from /proc alone.

A thread asleep in `recv()` on a connection waits for whoever answers it. On the same host that
is a process: another service started apart (a feature backend, a database), whatever language
it is written in. Its address comes from the target's own network namespace
(`/proc/PID/net/tcp`, `tcp6`, `unix`), so a container's 127.0.0.1 is its own; the processes that
listen on that address are found by the socket inodes their descriptors name (`/proc/*/fd`).
A listener rather than the one connection: every process that serves the address (a pre-fork
server, copies sharing a port with SO_REUSEPORT) is a server of it, and a per-request
connection is often gone before it is looked up.

A Unix stream socket names no peer in /proc: the kernel's sock_diag netlink interface
(`UNIX_DIAG_PEER`) gives the inode at its other end, whose entry in `/proc/net/unix` carries the
listening path. It answers for sockets of this process's network namespace only; elsewhere the
socket stays unnamed.

No ptrace, nothing read from any process's memory. psutil.net_connections would do the owner
scan too, but it reads the caller's network namespace, not the target's.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from dataclasses import dataclass

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
UDIAG_SHOW_PEER = 0x4
UNIX_DIAG_PEER = 2
NOCOOKIE = 0xFFFFFFFF


@dataclass(frozen=True)
class SocketRow:
    """One socket of a network namespace's tables: `local` and `remote` as "127.0.0.1:8000" (a
    Unix socket's `local` is its bound path, `remote` empty)."""

    kind: str  # "tcp" or "unix"
    inode: int
    local: str
    remote: str
    listening: bool


def socket_rows(pid: int) -> list[SocketRow]:
    """Every TCP and Unix socket of `pid`'s network namespace (/proc/PID/net/tcp, tcp6, unix)."""
    rows: list[SocketRow] = []
    for table in ("tcp", "tcp6"):
        for parts in _table(f"/proc/{pid}/net/{table}", 10):
            try:
                inode = int(parts[9])
            except ValueError:
                continue
            rows.append(SocketRow("tcp", inode, _address(parts[1]), _address(parts[2]),
                                  parts[3] == "0A"))  # TCP_LISTEN
    for parts in _table(f"/proc/{pid}/net/unix", 7):
        try:
            inode, flags = int(parts[6]), int(parts[3], 16)
        except ValueError:
            continue
        # SS_UNCONNECTED with __SO_ACCEPTCON: a listener
        listening = parts[5] == "01" and bool(flags & 0x10000)
        rows.append(SocketRow("unix", inode, parts[7] if len(parts) > 7 else "", "", listening))
    return rows


def _table(path: str, columns: int) -> list[list[str]]:
    try:
        with open(path, "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return []
    return [parts for line in text.splitlines()[1:] if len(parts := line.split()) >= columns]


def socket_table(pid: int, inodes: set[int]) -> dict[int, str]:
    """Socket inode -> what it is, from the target's own network namespace: "listen
    0.0.0.0:8000", "tcp 127.0.0.1:5432" (a connection it opened: the peer's address), "unix
    /run/x.sock" (a Unix connection it opened: the path its peer listens on, where the kernel
    names the peer), "accepted 10.0.0.7:51234" / "accepted /run/x.sock" (a connection one of its
    listeners accepted: the client's address, or the listener's path)."""
    out: dict[int, str] = {}
    if not inodes:
        return out
    rows = socket_rows(pid)
    paths = {r.inode: r.local for r in rows if r.kind == "unix"}
    # a connection whose own end is a listener's address was accepted there: the server's end
    listening = {r.local for r in rows if r.kind == "tcp" and r.listening}
    for row in rows:
        if row.inode not in inodes or row.inode in out:
            continue
        if row.kind == "tcp":
            if row.listening:
                out[row.inode] = f"listen {row.local}"
            else:
                accepted = listening & _listener_addresses(row.local)
                out[row.inode] = f"{'accepted' if accepted else 'tcp'} {row.remote}"
        elif row.listening:
            out[row.inode] = f"listen {row.local or '(unnamed)'}"
        elif row.local:  # the accepted end at the server carries the listener's path
            out[row.inode] = f"accepted {row.local}"
        else:  # a client's end is unnamed: the path its peer was accepted on names it
            peer = unix_peer_inode(row.inode)
            out[row.inode] = f"unix {paths.get(peer or -1) or '(unnamed)'}"
    return out


def _address(text: str) -> str:
    """`0100007F:1F90` -> `127.0.0.1:8080`; an IPv6 address in its 32 hex digits likewise."""
    host, _, port = text.partition(":")
    try:
        port_n = int(port, 16)
        raw = bytes.fromhex(host)
    except ValueError:
        return text
    if len(raw) == 4:
        return f"{'.'.join(str(b) for b in raw[::-1])}:{port_n}"
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
    addr = ipaddress.IPv6Address(b"".join(words))
    mapped = addr.ipv4_mapped
    return f"{mapped}:{port_n}" if mapped else f"[{addr}]:{port_n}"


def listener_inodes(pid: int, address: str) -> set[int]:
    """The inodes of the sockets listening on `address` ("127.0.0.1:8000", "unix /run/x.sock")
    in `pid`'s network namespace; a TCP listener bound to the wildcard address serves it too."""
    rows = socket_rows(pid)
    if address.startswith("unix "):
        path = address[5:]
        return {r.inode for r in rows if r.kind == "unix" and r.listening and r.local == path}
    wildcards = _listener_addresses(address)
    return {r.inode for r in rows if r.kind == "tcp" and r.listening and r.local in wildcards}


def _listener_addresses(address: str) -> set[str]:
    """Where a TCP listener that serves `address` ("127.0.0.1:8000") may be bound: that address,
    or the wildcard of its port (IPv4 or IPv6)."""
    port = address.rpartition(":")[2]
    return {address, f"0.0.0.0:{port}", f"[::]:{port}"}


def socket_owners(inodes: set[int]) -> dict[int, set[int]]:
    """Socket inode -> the pids holding a descriptor on it (every process's /proc/PID/fd, read
    once; a few milliseconds on a host of hundreds of processes)."""
    owners: dict[int, set[int]] = {}
    if not inodes:
        return owners
    wanted = {f"socket:[{i}]": i for i in inodes}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{name}/fd/{fd}")
            except OSError:
                continue
            inode = wanted.get(target)
            if inode is not None:
                owners.setdefault(inode, set()).add(int(name))
    return owners


def serving_pids(pid: int, address: str) -> tuple[int, ...]:
    """The processes (other than `pid`) listening on `address` as `pid` sees it; empty when no
    local process does (a remote host, another network namespace)."""
    inodes = listener_inodes(pid, address)
    owners = socket_owners(inodes)
    return tuple(sorted({p for pids in owners.values() for p in pids} - {pid}))


def unix_peer_inode(inode: int) -> int | None:
    """The inode at the other end of a connected Unix socket (sock_diag UNIX_DIAG_PEER), or None
    when the kernel does not say (no unix_diag, another network namespace, a closed socket)."""
    try:
        diag = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    except OSError:
        return None
    try:
        diag.settimeout(0.5)
        # struct unix_diag_req: family, protocol, pad, states, ino, show, cookie[2]
        request = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, inode,
                              UDIAG_SHOW_PEER, NOCOOKIE, NOCOOKIE)
        header = struct.pack("=IHHII", 16 + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0)
        diag.send(header + request)
        reply = diag.recv(65536)
    except OSError:
        return None
    finally:
        diag.close()
    return _peer_attribute(reply, inode)


def _peer_attribute(reply: bytes, inode: int) -> int | None:
    """UNIX_DIAG_PEER of the reply's unix_diag_msg for `inode` (an error reply has none)."""
    if len(reply) < 32:
        return None
    length, kind = struct.unpack_from("=IH", reply, 0)
    if kind != SOCK_DIAG_BY_FAMILY or length > len(reply):
        return None
    if struct.unpack_from("=I", reply, 20)[0] != inode:
        return None
    offset = 32  # nlmsghdr (16) + unix_diag_msg (16)
    while offset + 4 <= length:
        size, attribute = struct.unpack_from("=HH", reply, offset)
        if size < 4:
            return None
        if attribute == UNIX_DIAG_PEER and size >= 8:
            return int(struct.unpack_from("=I", reply, offset + 4)[0])
        offset += (size + 3) & ~3
    return None
