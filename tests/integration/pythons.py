"""The CPython interpreters this machine has, venvs with numpy for them, and py-spy support.

Used by cross-version integration tests and by fixtures/pyversions/survey.py:

    from tests.integration import pythons
    for interp in pythons.available_pythons():          # Interpreter(executable, version, ...)
        ok, why = pythons.py_spy_supports(interp.version)
        python, reason = pythons.venv_with_numpy(interp.minor_version)

Interpreters come from pyenv (`$PYENV_ROOT`, `pyenv root`, else ~/.pyenv and /root/.pyenv; each
`versions/<X.Y.Z>/bin/python`) plus the running interpreter. Venvs are created once and cached
under the user's cache directory, `${XDG_CACHE_HOME:-~/.cache}/diagnose/pythons/<X.Y>`, or under
$DIAGNOSE_PYTHONS_CACHE: outside the checkout, so a fresh clone or worktree on the same machine
reuses them instead of building eight venvs again (minutes each on a busy machine); a file lock
per version lets several test runs share them. Standard library only; runs on the project's Python (3.8+).
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent.parent
CACHE = Path(os.environ.get("DIAGNOSE_PYTHONS_CACHE")
             or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "diagnose" / "pythons")

# The oldest interpreter the probes (fixtures/pyversions) and the workloads' plumbing run on.
MIN_VERSION = (3, 6)

# py-spy 0.4.3 on Linux x86_64 (glibc 2.36, pyenv --enable-shared builds), measured on this
# project's machine with fixtures/pyversions/survey.py (record with and without --native,
# dump --native): every CPython 3.6-3.13 attaches and unwinds, 199/199 samples per thread in 2 s.
# 2.7.18 was only checked with dump/record of a sleeping process (the probes need 3.6+).
# Keys are (major, minor); values (supported, reason).
_PY_SPY_MEASURED = {
    (2, 7): (True, "measured: py-spy 0.4.3 dumps and records 2.7.18 (the probes need 3.6+, so "
                   "no state classification was checked)"),
    (3, 6): (True, "measured: py-spy 0.4.3 records 3.6.15 with and without --native"),
    (3, 7): (True, "measured: py-spy 0.4.3 records 3.7.16 with and without --native"),
    (3, 8): (True, "measured: py-spy 0.4.3 records 3.8.18 with and without --native"),
    (3, 9): (True, "measured: py-spy 0.4.3 records 3.9.18 with and without --native"),
    (3, 10): (True, "measured: py-spy 0.4.3 records 3.10.13 with and without --native"),
    (3, 11): (True, "measured: py-spy 0.4.3 records 3.11.7 with and without --native"),
    (3, 12): (True, "measured: py-spy 0.4.3 records 3.12.1 with and without --native"),
    (3, 13): (True, "measured: py-spy 0.4.3 records 3.13.0 with and without --native"),
}


class Interpreter(NamedTuple):
    executable: str  # path to run (not resolved: pyenv's versions/X/bin/python or sys.executable)
    version: str  # "3.11.7"
    source: str  # "pyenv" or "sys.executable"

    @property
    def version_info(self) -> Tuple[int, ...]:
        return parse_version(self.version)

    @property
    def minor_version(self) -> str:
        return ".".join(map(str, self.version_info[:2]))


def parse_version(version) -> Tuple[int, ...]:
    """"3.11.7" / "3.11" / (3, 11) / sys.version_info -> (3, 11, 7) / (3, 11)."""
    if isinstance(version, str):
        match = re.match(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?", version)
        if not match:
            raise ValueError(f"not a Python version: {version!r}")
        return tuple(int(g) for g in match.groups() if g is not None)
    return tuple(int(v) for v in tuple(version)[:3])


def pyenv_roots() -> list:
    roots = []
    if os.environ.get("PYENV_ROOT"):
        roots.append(Path(os.environ["PYENV_ROOT"]))
    pyenv = shutil.which("pyenv")
    if pyenv:
        try:
            out = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=10)
            if out.returncode == 0 and out.stdout.strip():
                roots.append(Path(out.stdout.strip()))
        except (OSError, subprocess.SubprocessError):
            pass
    roots += [Path.home() / ".pyenv", Path("/root/.pyenv")]
    seen, unique = set(), []
    for root in roots:
        key = str(root.resolve()) if root.exists() else str(root)
        if key not in seen and (root / "versions").is_dir():
            seen.add(key)
            unique.append(root)
    return unique


def _query_version(executable: str) -> Optional[str]:
    """The interpreter's own version, or None when it is not a runnable CPython."""
    code = "import platform,sys;sys.stdout.write(platform.python_implementation()+' '+platform.python_version())"
    try:
        out = subprocess.run([executable, "-c", code], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    impl, _, version = out.stdout.strip().partition(" ")
    return version if out.returncode == 0 and impl == "CPython" and version else None


@functools.lru_cache(maxsize=None)
def available_pythons(min_version: Tuple[int, int] = MIN_VERSION) -> Tuple[Interpreter, ...]:
    """One Interpreter per distinct X.Y.Z, oldest first; pyenv builds win over sys.executable."""
    found = {}
    for root in pyenv_roots():
        for entry in sorted((root / "versions").iterdir()):
            # Plain CPython builds only ("3.11.7"), not virtualenvs, pypy, anaconda, "3.13.0t".
            if not re.fullmatch(r"\d+\.\d+\.\d+", entry.name):
                continue
            executable = entry / "bin" / "python"
            if not executable.exists():
                executable = entry / "bin" / "python3"
            if not executable.exists():
                continue
            version = _query_version(str(executable))
            if version and version not in found:
                found[version] = Interpreter(str(executable), version, "pyenv")
    own = ".".join(map(str, sys.version_info[:3]))
    if sys.implementation.name == "cpython" and own not in found:
        found[own] = Interpreter(sys.executable, own, "sys.executable")
    return tuple(sorted((i for i in found.values() if i.version_info[:2] >= tuple(min_version)),
                        key=lambda i: i.version_info))


def find_python(version) -> Optional[Interpreter]:
    """The newest available interpreter matching "3.11" (or exactly "3.11.7")."""
    wanted = parse_version(version)
    matches = [i for i in available_pythons(min_version=(0, 0)) if i.version_info[:len(wanted)] == wanted]
    return matches[-1] if matches else None


def py_spy_supports(version) -> Tuple[bool, str]:
    """Whether py-spy 0.4.3 can record a CPython of this version, with and without --native.

    From the table measured on this machine; other versions get py-spy's documented range, and
    anything unknown (3.14+, not measured) is (False, reason) so that tests skip rather than fail.
    `py_spy_attaches` checks a real interpreter instead.
    """
    key = parse_version(version)[:2]
    if key in _PY_SPY_MEASURED:
        return _PY_SPY_MEASURED[key]
    if (2, 3) <= key <= (2, 6) or (3, 3) <= key <= (3, 5):
        return True, f"not measured here: {key[0]}.{key[1]} is inside py-spy's documented range (2.3-2.7, 3.3+)"
    if key >= (3, 14):
        return False, (f"not measured here: CPython {key[0]}.{key[1]} is newer than the versions checked "
                       "(py-spy reports 'Unsupported version of Python: X' for versions it does not know; "
                       "3.14 support landed in benfred/py-spy#833)")
    return False, f"CPython {key[0]}.{key[1]} is outside py-spy's documented range (2.3-2.7, 3.3+)"


def py_spy_attaches(executable: str, py_spy: str = "py-spy", native: bool = True,
                    settle: float = 2.0) -> Tuple[bool, str]:
    """Checks a real interpreter: start it, wait `settle` s, `py-spy dump [--native]` it.

    Attaching too early fails ("Failed to find a python interpreter in the .data section" was
    seen on 2.7 at 1 s; 3.x at ~0 s attaches but may show no stack yet), hence `settle`.
    """
    code = "import sys,time\nsys.stdout.write('UP\\n')\nsys.stdout.flush()\ntime.sleep(60)\n"
    try:
        proc = subprocess.Popen([executable, "-c", code], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
    except OSError as exc:
        return False, f"cannot start {executable}: {exc}"
    try:
        if proc.stdout.readline().strip() != "UP":
            return False, f"{executable} did not start"
        time.sleep(settle)
        cmd = [py_spy, "dump", "--pid", str(proc.pid)] + (["--native"] if native else [])
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            return False, f"{' '.join(cmd)}: {exc}"
        if out.returncode != 0 or "Thread " not in out.stdout:
            lines = (out.stderr or out.stdout).strip().splitlines()
            return False, f"py-spy dump failed (rc {out.returncode}): {lines[0] if lines else 'no output'}"
        return True, "py-spy dump" + (" --native" if native else "") + " shows the main thread"
    finally:
        proc.kill()
        proc.wait()


def _venv_ok(python: Path) -> bool:
    if not python.exists():
        return False
    out = subprocess.run([str(python), "-c", "import numpy"], capture_output=True, timeout=120)
    return out.returncode == 0


def _last_lines(text: str, n: int = 5) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-n:])


@functools.lru_cache(maxsize=None)
def venv_with_numpy(version, cache_dir: Optional[str] = None,
                    timeout: float = 900.0) -> Tuple[Optional[str], str]:
    """(python path, reason) for a venv of `version` ("3.9" or "3.9.18") with numpy installed.

    Created once under cache_dir/<X.Y> (a file lock makes parallel test workers wait for one
    another); on failure (no such interpreter, venv or pip failure, no wheel for this Python)
    returns (None, reason). Failures are remembered for the process only, so a later run retries.
    """
    interp = find_python(version)
    if interp is None:
        return None, f"no CPython {version} on this machine (pyenv roots: {[str(r) for r in pyenv_roots()]})"
    root = Path(cache_dir) if cache_dir else CACHE
    root.mkdir(parents=True, exist_ok=True)
    ignore = root.parent / ".gitignore" if root == REPO / ".cache" / "pythons" else root / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# created by tests/integration/pythons.py: cached interpreters\n*\n")
    venv = root / interp.minor_version
    python = venv / "bin" / "python"
    marker = venv / ".numpy-ready"
    with open(root / f".{interp.minor_version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and _venv_ok(python):
            return str(python), f"cached venv for CPython {interp.version}: {marker.read_text().strip()}"
        shutil.rmtree(venv, ignore_errors=True)
        t0 = time.monotonic()
        try:
            made = subprocess.run([interp.executable, "-m", "venv", str(venv)],
                                  capture_output=True, text=True, timeout=timeout)
            if made.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                return None, f"python{interp.minor_version} -m venv failed: {_last_lines(made.stderr + made.stdout)}"
            # --prefer-binary: never build numpy from source (slow, needs a compiler); an old
            # pip (3.6 ships pip 18.1) still finds numpy 1.19.5's manylinux1 wheel.
            pip = subprocess.run([str(python), "-m", "pip", "install", "--prefer-binary",
                                  "--only-binary", "numpy", "numpy"],
                                 capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            shutil.rmtree(venv, ignore_errors=True)
            return None, f"creating the CPython {interp.version} venv took over {timeout:.0f} s"
        if pip.returncode != 0 or not _venv_ok(python):
            shutil.rmtree(venv, ignore_errors=True)
            return None, (f"pip install numpy failed for CPython {interp.version}: "
                          f"{_last_lines(pip.stderr + pip.stdout)}")
        numpy_version = subprocess.run([str(python), "-c", "import numpy;print(numpy.__version__)"],
                                       capture_output=True, text=True).stdout.strip()
        note = f"numpy {numpy_version}, built in {time.monotonic() - t0:.1f} s"
        marker.write_text(note + "\n")
        return str(python), f"new venv for CPython {interp.version}: {note}"


SERVER_PACKAGES = ("gunicorn", "uvicorn", "fastapi")
AIOHTTP_PACKAGES = ("aiohttp",)
GRPC_PACKAGES = ("grpcio",)


def _venv_with_packages(version, packages: Tuple[str, ...], marker_name: str, check: str,
                        cache_dir: Optional[str], timeout: float) -> Tuple[Optional[str], str]:
    """(python path, reason) for the numpy venv of `version` with `packages` added once (pip
    picks the newest releases that support that CPython; `marker_name` in the venv records it),
    or (None, reason). `check` is code that imports them and prints their versions."""
    python, reason = venv_with_numpy(version, cache_dir, timeout)
    if python is None:
        return None, reason
    venv = Path(python).parent.parent
    marker = venv / marker_name
    names = ", ".join(packages)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return python, f"cached: {marker.read_text().strip()}"
        try:
            pip = subprocess.run([python, "-m", "pip", "install", "--prefer-binary", *packages],
                                 capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, f"installing {names} took over {timeout:.0f} s"
        if pip.returncode != 0:
            return None, (f"no {names} release installs on CPython {version}: "
                          f"{_last_lines(pip.stderr + pip.stdout)}")
        versions = subprocess.run([python, "-c", check], capture_output=True, text=True)
        if versions.returncode != 0:
            return None, f"{names} do not import on CPython {version}: {_last_lines(versions.stderr)}"
        marker.write_text(versions.stdout.strip() + "\n")
        return python, versions.stdout.strip()


def venv_with_servers(version, cache_dir: Optional[str] = None,
                      timeout: float = 900.0) -> Tuple[Optional[str], str]:
    """(python path, reason) for the numpy venv of `version` with gunicorn, uvicorn and FastAPI
    added (pip picks the newest releases that support that CPython), or (None, reason) when
    there are none for it."""
    return _venv_with_packages(
        version, SERVER_PACKAGES, ".servers-ready",
        "import gunicorn, uvicorn, fastapi;"
        "print('gunicorn', gunicorn.__version__, 'uvicorn', uvicorn.__version__,"
        " 'fastapi', fastapi.__version__)", cache_dir, timeout)


def venv_with_aiohttp(version, cache_dir: Optional[str] = None,
                      timeout: float = 900.0) -> Tuple[Optional[str], str]:
    """`venv_with_servers` plus aiohttp (the aiohttp server fixtures), in the same venv; a
    separate marker, so venvs built before aiohttp was wanted get it added, not rebuilt."""
    python, reason = venv_with_servers(version, cache_dir, timeout)
    if python is None:
        return None, reason
    return _venv_with_packages(version, AIOHTTP_PACKAGES, ".aiohttp-ready",
                               "import aiohttp; print('aiohttp', aiohttp.__version__)",
                               cache_dir, timeout)


def venv_with_grpc(version, cache_dir: Optional[str] = None,
                   timeout: float = 900.0) -> Tuple[Optional[str], str]:
    """The numpy venv of `version` plus grpcio (the gRPC server fixture
    fixtures/servers/grpc_locked.py and its load client), or (None, reason) when no grpcio
    release installs on that CPython; its own marker, so existing venvs get it added, not rebuilt."""
    return _venv_with_packages(version, GRPC_PACKAGES, ".grpcio-ready",
                               "import grpc; print('grpcio', grpc.__version__)",
                               cache_dir, timeout)


if __name__ == "__main__":  # python -m tests.integration.pythons [--venvs]
    for interp in available_pythons():
        ok, why = py_spy_supports(interp.version)
        line = f"{interp.version:9} {interp.source:14} {interp.executable}  py-spy: {'yes' if ok else 'NO'} ({why})"
        if "--venvs" in sys.argv[1:]:
            path, reason = venv_with_numpy(interp.minor_version)
            line += f"\n          venv: {path} ({reason})"
        print(line)
