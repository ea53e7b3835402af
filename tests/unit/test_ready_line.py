"""The READY line fixture programs print, and its one reader (tests/ready.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.ready import NotReady, Ready, parse_ready, ready_line, wait_ready


def test_the_keyed_line_carries_the_pid_and_an_optional_port():
    assert parse_ready("READY pid=41\n") == Ready(41)
    assert parse_ready("READY pid=41 port=8123") == Ready(41, 8123)
    assert parse_ready("READY port=8123 pid=41") == Ready(41, 8123)
    assert parse_ready(ready_line(7, 80)) == Ready(7, 80)


def test_the_positional_line_is_not_the_format():
    # one format: `READY 41` (what the demo service printed before) is a broken contract
    for positional in ("READY 41", "READY 41 8123"):
        with pytest.raises(NotReady, match="malformed READY line"):
            parse_ready(positional)


def test_other_lines_are_not_ready_and_a_broken_ready_line_is_an_error():
    assert parse_ready("SERVED 12 3.0") is None
    assert parse_ready("") is None
    for broken in ("READY", "READY port=80", "READY pid=x", "READY pid=4 port=", "READY now"):
        with pytest.raises(NotReady, match="malformed READY line"):
            parse_ready(broken)


def _program(source: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_the_reader_skips_lines_before_ready():
    proc = _program("import os; print('warming up', flush=True); "
                    "print(f'READY pid={os.getpid()} port=9', flush=True)")
    try:
        assert wait_ready(proc, 30) == Ready(proc.pid, 9)
    finally:
        proc.kill()
        proc.wait()


def test_a_program_that_exits_before_ready_fails_with_its_stderr():
    proc = _program("import sys; sys.exit('no model file')")
    with pytest.raises(NotReady, match="exited with 1 before READY: no model file"):
        wait_ready(proc, 30)


def test_a_program_that_never_says_ready_fails_after_the_timeout():
    proc = _program("import time; time.sleep(30)")
    try:
        with pytest.raises(NotReady, match="no READY line within 0.5 s"):
            wait_ready(proc, 0.5)
    finally:
        proc.kill()
        proc.wait()
