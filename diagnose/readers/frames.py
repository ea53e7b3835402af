"""How py-spy names what it saw, the same in every format it writes: the pseudo-frames
`--threads` / `--subprocesses` put at the root of a stack, thread ids (decimal or hex) and
native frames. Shared by the readers of speedscope / collapsed text (loaders.py) and of
chrometrace (chrometrace.py)."""

from __future__ import annotations

import re

# --threads / --subprocesses add pseudo-frames at the root of every stack.
THREAD_PSEUDO = re.compile(r"^thread \((\d+|0x[0-9a-fA-F]+)\)(?:: (.*))?$", re.S)
PROCESS_PSEUDO = re.compile(r"^process \d+:", re.S)

_PYTHON_SOURCE = (".py", ".pyw", ".pyx", ".pyi")
_NATIVE_SOURCE = (".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".rs", ".S", ".s", ".cu", ".f", ".f90")


def is_native_frame(function: str, file: str, line: int) -> bool:
    """py-spy --native frames name a shared library, or (with debug info) a C source file."""
    if file.endswith(_PYTHON_SOURCE) or file.startswith("<"):
        return False
    if file.endswith(_NATIVE_SOURCE) or ".so" in file or function.startswith("0x"):
        return True
    # A binary named by its path (a static python executable). A bare name with no line
    # (`__init__` in `__init__`: a frame py-spy read torn, without blocking) is no evidence of
    # native frames: taken as one, it would mark a Python-only profile native.
    # The raw format names a static build's binary bare ("python3.11"): that is native too.
    return line == 0 and ("/" in file or _BARE_INTERPRETER.match(file) is not None)


_BARE_INTERPRETER = re.compile(r"^(python|pypy)[\d.]*[dmu]*$")


def parse_tid(text: str) -> int:
    return int(text, 16) if text.lower().startswith("0x") else int(text)
