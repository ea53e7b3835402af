"""Reading a file a user names, safely: a regular file or a pipe, never a device or socket, and
never more than a size cap. Shared by profiles and rules files; each names its own error."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Generator


def size_text(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


def _too_large(what: str, limit: int, hint: str) -> str:
    return f"is larger than a {what} may be ({size_text(limit)})" + (f"; {hint}" if hint else "")


def _open_checked(path: Path, what: str, limit: int, error: type[Exception], too_large: str):
    """The file opened for reading once it is known to be a regular file or a pipe under the
    cap; every failure is `error(message)` naming the file and what it should have been."""
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{path}: is a directory, not a {what}")
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            raise error(f"{path}: not a regular file (a device or socket), not a {what}")
        if st.st_size > limit:
            raise error(f"{path}: {size_text(st.st_size)} {too_large}")
        return open(path, "rb")
    except FileNotFoundError:
        raise error(f"{path}: no such file (expected a {what})")
    except OSError as exc:
        raise error(f"{path}: cannot read it: {exc.strerror or exc}")


def read_bounded(path: str | Path, what: str, limit: int, error: type[Exception],
                 hint: str = "") -> bytes:
    """The file's bytes. Every failure is `error(message)`, the message naming the file and
    `what` it should have been; `hint` follows a too-large message."""
    path = Path(path)
    too_large = _too_large(what, limit, hint)
    with _open_checked(path, what, limit, error, too_large) as fh:
        try:
            raw = fh.read(limit + 1)  # a pipe has no size: read one byte past the cap to tell
        except MemoryError:
            raise error(f"{path}: too large to read into memory")
        except OSError as exc:
            raise error(f"{path}: cannot read it: {exc.strerror or exc}")
    if len(raw) > limit:
        raise error(f"{path}: {too_large}")
    return raw


def read_chunks(path: str | Path, what: str, limit: int, error: type[Exception], hint: str = "",
                chunk: int = 16 << 20) -> Generator[bytes, None, None]:
    """The file's bytes in chunks, with the checks and messages of `read_bounded`: a file over
    the cap is refused before any is read, and a pipe is refused as soon as it passes it. A
    reader that parses as it goes holds one chunk at a time, not the file."""
    path = Path(path)
    too_large = _too_large(what, limit, hint)
    fh = _open_checked(path, what, limit, error, too_large)
    with fh:
        seen = 0
        while True:
            try:
                data = fh.read(chunk)
            except MemoryError:
                raise error(f"{path}: too large to read into memory")
            except OSError as exc:
                raise error(f"{path}: cannot read it: {exc.strerror or exc}")
            if not data:
                return
            seen += len(data)
            if seen > limit:
                raise error(f"{path}: {too_large}")
            yield data
