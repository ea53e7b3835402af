"""Source lines of the target's code, read for the report (queue names, a blocking call's line).

A profile names files that diagnose did not choose: a hostile or unlucky one names a FIFO, a
device (`/dev/zero`, `/dev/tty`) or a `/proc` file, and `linecache` would block on it or read it
forever. Here only regular files are opened, never more than `MAX_SOURCE_BYTES`, and a file that
cannot be read is simply no evidence ("" lines).

A live target in a container sees its own filesystem: its files are read through
`/proc/<pid>/root` (and a relative name through `/proc/<pid>/cwd`) while `reading_from(pids)` is
active. Without live pids (offline analysis), or once the target is gone, the names are read as
they are.
"""

from __future__ import annotations

import io
import os
import stat
import tokenize
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

MAX_SOURCE_BYTES = 8 << 20  # a source file larger than this is no source file
_SPECIAL_TREES = ("/dev/", "/proc/", "/sys/")

_roots: list[str] = [""]  # prefixes under which an absolute name is looked up; "" is our own root
_cwds: list[str] = []  # live targets' working directories, for relative names
_cache: dict[str, list[str]] = {}


def getline(filename: str, lineno: int) -> str:
    """Line `lineno` (1-based, with its newline) of `filename`, or "" when it cannot be read."""
    if not filename or lineno < 1:
        return ""
    lines = _cache.get(filename)
    if lines is None:
        lines = _cache[filename] = _load(filename)
    return lines[lineno - 1] if lineno <= len(lines) else ""


def stripped_line(filename: str, lineno: int | None) -> str:
    """`getline`, stripped; "" for no line or a source that fails to read (unreadable source is
    no evidence either way: callers read it for what a line does)."""
    try:
        return getline(filename, lineno).strip() if lineno else ""
    except Exception:
        return ""


def lines(filename: str) -> list[str]:
    """Every line of `filename` (with newlines), read as `getline` reads it; [] when it cannot be
    read. The list is the cache's own: callers must not change it (its identity says the cache
    was not cleared since)."""
    if not filename:
        return []
    found = _cache.get(filename)
    if found is None:
        found = _cache[filename] = _load(filename)
    return found


def text(filename: str) -> str:
    """The whole of `filename` (as `getline` reads it), or "" when it cannot be read."""
    return "".join(lines(filename))


def clear() -> None:
    _cache.clear()


@contextmanager
def reading_from(pids: Iterable[int | None] = ()) -> Iterator[None]:
    """Reads the files of the live processes `pids` as they see them (through /proc/<pid>/root);
    an empty `pids` reads names as they are. The cache lives for the context."""
    global _roots, _cwds
    saved = _roots, _cwds
    _roots, _cwds = _live_roots(pids)
    clear()
    try:
        yield
    finally:
        _roots, _cwds = saved
        clear()


def _mount_namespace(proc: str) -> str | None:
    try:
        return os.readlink(f"{proc}/ns/mnt")
    except OSError:
        return None


def _live_roots(pids: Iterable[int | None]) -> tuple[list[str], list[str]]:
    """(root prefixes, working directories) of the live `pids`; "" stands for our own root: a
    process with our root directory in our mount namespace sees the files we see."""
    roots, cwds, seen = [], [], set()
    try:
        own = os.stat("/")
        own_id = (own.st_dev, own.st_ino, _mount_namespace("/proc/self"))
    except OSError:
        own_id = None
    for pid in dict.fromkeys(p for p in pids if p):
        root = f"/proc/{int(pid)}/root"
        try:
            st = os.stat(root)
        except OSError:  # gone, or not ours to read
            continue
        # Another mount namespace (a container, `unshare -m`) may mount other files at the
        # same paths under the same root directory.
        ident = (st.st_dev, st.st_ino, _mount_namespace(f"/proc/{int(pid)}"))
        if ident not in seen:
            seen.add(ident)
            roots.append("" if ident == own_id else root)
        cwd = f"/proc/{int(pid)}/cwd"
        try:
            os.stat(cwd)
            cwds.append(cwd)
        except OSError:
            pass
    return (roots or [""]), cwds


def _candidates(filename: str) -> list[str]:
    if filename.startswith("<"):  # <string>, <frozen ...>: no file
        return []
    if os.path.isabs(filename):
        if filename.startswith(_SPECIAL_TREES):
            return []
        return [root + filename for root in _roots]
    return [os.path.join(cwd, filename) for cwd in _cwds] + [filename]


def _load(filename: str) -> list[str]:
    for candidate in _candidates(filename):
        data = _read_regular(candidate)
        if data is not None:
            return _split(data)
    return []


def _read_regular(path: str) -> bytes | None:
    """The bytes of a regular file, or None: never opens a FIFO, device or socket, never blocks
    on one, never reads more than the cap."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SOURCE_BYTES:
        return None
    if st.st_size == 0:  # empty, or a /proc-style file whose size says nothing: no source
        return None
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for something else since the stat
            return None
        chunks, left = [], min(st.st_size, MAX_SOURCE_BYTES)
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _split(data: bytes) -> list[str]:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except (SyntaxError, LookupError):
        encoding = "utf-8"
    try:
        lines = io.TextIOWrapper(io.BytesIO(data), encoding=encoding, errors="replace").readlines()
    except LookupError:
        lines = data.decode("utf-8", "replace").splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return lines
