"""The line a fixture program prints once it serves, and its one reader.

Format: ``READY pid=<pid>``, plus `` port=<port>`` for a program that listens on a port it chose.
Written by every fixture program (fixtures/workloads/_harness.py, fixtures/sanity/_ready.py,
fixtures/pyversions/_probe.py, fixtures/servers/*) and by the demo service (diagnose/demo/; its
command reads the line with a one-line pattern of its own, as the package never imports the
tests); read by the tests, fixtures/record.py, fixtures/pyversions/survey.py and the benchmarks
through `wait_ready` / `parse_ready`.
"""

from __future__ import annotations

import re
import select
import subprocess
import time
from dataclasses import dataclass
from typing import Optional

_KEYED = re.compile(r"READY(?P<fields>(?: +[a-z]+=\S*)+) *")


class NotReady(AssertionError):
    """The program exited, or printed no READY line in time. An AssertionError so a test that
    waits for a fixture fails (not errors) with the program's stderr in the message."""


@dataclass(frozen=True)
class Ready:
    pid: int
    port: Optional[int] = None


def ready_line(pid: int, port: Optional[int] = None) -> str:
    """The READY line for `pid` (and `port`), as the fixture programs print it."""
    return f"READY pid={pid}" + ("" if port is None else f" port={port}")


def parse_ready(line: str) -> Optional[Ready]:
    """The Ready a READY line announces; None for any other line. A READY line without a pid is
    an error, not "not ready": the program broke the contract."""
    line = line.strip()
    if not line.startswith("READY"):
        return None
    keyed = _KEYED.fullmatch(line)
    if keyed:
        fields = dict(f.split("=", 1) for f in keyed.group("fields").split())
        if fields.get("pid", "").isdigit() and fields.get("port", "0").isdigit():
            return Ready(int(fields["pid"]), int(fields["port"]) if "port" in fields else None)
    raise NotReady(f"malformed READY line: {line!r} (expected 'READY pid=<pid> [port=<port>]')")


def wait_ready(proc: subprocess.Popen, timeout: float = 60.0) -> Ready:
    """Reads `proc`'s stdout (a text pipe) until its READY line; lines before it are skipped.
    Raises NotReady, with the tail of stderr when it was piped, if the program exits first or
    `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise NotReady(f"{proc.args} printed no READY line within {timeout:g} s")
        readable, _, _ = select.select([proc.stdout], [], [], remaining)
        if not readable:
            continue
        line = proc.stdout.readline()
        if not line:
            proc.wait(timeout=5)
            raise NotReady(f"{proc.args} exited with {proc.returncode} before READY: "
                           f"{_stderr_tail(proc)}")
        ready = parse_ready(line)
        if ready is not None:
            return ready


def _stderr_tail(proc: subprocess.Popen) -> str:
    if proc.stderr is None:
        return "(stderr not captured)"
    text = proc.stderr.read()
    return (text.decode(errors="replace") if isinstance(text, bytes) else text)[-2000:]
