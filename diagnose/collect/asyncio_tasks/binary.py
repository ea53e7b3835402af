"""Finds the target's interpreter: which file holds `_PyRuntime` (libpython3.X.so for a shared
build, the executable for a static one), where it is mapped, and the CPython version."""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from diagnose.outputs.files import WriteFailed, write_text

_LIBPYTHON = re.compile(r"/libpython3\.(\d+)[a-z]*\.so(\.[\d.]+)?$")
_EXE_VERSION = re.compile(r"python3\.(\d+)[a-z]*$")


class InterpreterNotFound(Exception):
    """The process has no readable CPython runtime (not Python, or an unknown build)."""


@dataclass(frozen=True)
class Mapping:
    start: int
    offset: int
    path: str


@dataclass(frozen=True)
class Interpreter:
    """The target's runtime: `_PyRuntime`'s address in the target and its version."""

    binary: str            # the file holding _PyRuntime, as the target maps it
    runtime_address: int   # &_PyRuntime in the target
    version_address: int   # &Py_Version in the target, 0 when the symbol is absent
    minor: int             # from the file name; Py_Version (read by the caller) outranks it
    exe: str               # the target's executable (/proc/PID/exe)
    runtime_size: int = 0  # sizeof(_PyRuntime) from its symbol (0: unknown): a futex inside it
    # is an interpreter-wide one, the GIL's (collect/kernel_waits.py)


def _maps(pid: int) -> list[Mapping]:
    out: list[Mapping] = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) < 6 or not parts[5].startswith("/"):
                continue
            out.append(Mapping(int(parts[0].split("-")[0], 16), int(parts[2], 16),
                               parts[5].rstrip("\n")))
    return out


def _host_path(pid: int, path: str) -> str:
    """The target's file as seen from here (it may live in another mount namespace)."""
    rooted = f"/proc/{pid}/root{path}"
    return rooted if os.path.exists(rooted) else path


@dataclass(frozen=True)
class _Symbols:
    runtime: int
    version: int
    is_exec: bool          # ET_EXEC: symbol values are absolute addresses
    first_load_vaddr: int  # the lowest PT_LOAD p_vaddr, page-aligned down
    runtime_size: int = 0


SYMBOL_CACHE = Path(os.path.expanduser("~/.cache/diagnose/python-symbols.json"))


def _symbols(path: str) -> _Symbols | None:
    """`_PyRuntime` and `Py_Version` from one file's symbol tables; None when absent. Parsing
    a libpython's symbols takes seconds on a busy machine: kept per file (device, inode,
    mtime, size; not per path, which names the target's pid), in memory and on disk."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    # "2:": entries cached before the runtime's size was kept are parsed again
    return _symbols_of(path, f"2:{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}:{st.st_size}")


@lru_cache(maxsize=16)
def _symbols_of(path: str, key: str) -> _Symbols | None:
    try:
        cached = json.loads(SYMBOL_CACHE.read_text()).get(key)
        if cached is not None:
            return _Symbols(**cached)
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    found = _parse_symbols(path)
    if found is not None:
        try:
            table = json.loads(SYMBOL_CACHE.read_text()) if SYMBOL_CACHE.exists() else {}
            if not isinstance(table, dict) or len(table) > 64:
                table = {}
            table[key] = asdict(found)
            SYMBOL_CACHE.parent.mkdir(parents=True, exist_ok=True)
            write_text(SYMBOL_CACHE, json.dumps(table))
        except (OSError, WriteFailed, ValueError):
            pass  # the in-memory cache serves this run
    return found


def _parse_symbols(path: str) -> _Symbols | None:
    # pyelftools (~20 ms of imports) only where a binary is parsed: the analysis, which imports
    # this module through the records it reads, never parses one.
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            found: dict[str, int] = {}
            runtime_size = 0
            # .dynsym (exported: small) before .symtab (everything: several times larger)
            sections = sorted((s for s in elf.iter_sections()
                               if isinstance(s, SymbolTableSection)),
                              key=lambda s: s.name != ".dynsym")
            for section in sections:
                if found.get("_PyRuntime") and found.get("Py_Version"):
                    break
                for name in ("_PyRuntime", "Py_Version"):
                    if name in found:
                        continue
                    symbols = section.get_symbol_by_name(name)
                    if symbols:
                        found[name] = int(symbols[0]["st_value"])
                        if name == "_PyRuntime":
                            runtime_size = int(symbols[0]["st_size"])
            if not found.get("_PyRuntime"):
                return None
            loads = [int(s["p_vaddr"]) for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
            return _Symbols(found["_PyRuntime"], found.get("Py_Version", 0),
                            elf["e_type"] == "ET_EXEC", min(loads) & ~0xFFF if loads else 0,
                            runtime_size)
    except (OSError, ELFError, ValueError, KeyError):
        return None


def _address(symbols: _Symbols, value: int, base: int) -> int:
    if not value:
        return 0
    return value if symbols.is_exec else base + value - symbols.first_load_vaddr


def find_interpreter(pid: int) -> Interpreter:
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        maps = _maps(pid)
    except OSError as exc:
        raise InterpreterNotFound(f"process {pid} is not readable: {exc.strerror}") from exc
    bases: dict[str, int] = {}
    for m in maps:
        if m.offset == 0 and m.path not in bases:
            bases[m.path] = m.start
    # a shared build's runtime lives in libpython; a static build's in the executable
    candidates = [p for p in bases if _LIBPYTHON.search(p)] + [p for p in bases if p == exe]
    for path in candidates:
        symbols = _symbols(_host_path(pid, path))
        if symbols is None:
            continue
        match = _LIBPYTHON.search(path) or _EXE_VERSION.search(os.path.basename(exe))
        return Interpreter(binary=path,
                           runtime_address=_address(symbols, symbols.runtime, bases[path]),
                           version_address=_address(symbols, symbols.version, bases[path]),
                           minor=int(match.group(1)) if match else 0, exe=exe,
                           runtime_size=symbols.runtime_size)
    raise InterpreterNotFound("no _PyRuntime symbol in the executable or a mapped libpython "
                              "(not a CPython process, or a stripped build)")
