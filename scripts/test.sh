#!/usr/bin/env bash
# Sets up a virtualenv with diagnose and its test dependencies, then runs the whole test suite
# (unit tests on recorded profiles, integration tests that attach the real py-spy to real
# processes, browser tests of the HTML report). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install --quiet --no-compile -e '.[test]'
# The type checker (14 s on a clean clone, one core) in the background while the rest installs
# beside it: the setup took 26 s after the install one step after another, 16 s so. Its result is
# still awaited before the tests run.
mypy_log=$(mktemp)
.venv/bin/python -m mypy diagnose > "$mypy_log" 2>&1 &
mypy_pid=$!
trap 'kill "$mypy_pid" 2>/dev/null; rm -f "$mypy_log"' EXIT  # a step below failed first
# Byte-compiled on both cores instead of by pip, one file after another (the install took 31 s on
# a clean clone; 16 s, then 8 s for this). torch and what only it needs stay uncompiled (below).
only_torch='/site-packages/(torch|functorch|torchgen|sympy|networkx|mpmath)/'
.venv/bin/python -m compileall -q -j 0 -x "$only_torch" .venv/lib/python*/site-packages >/dev/null
# torch for the DataLoader fixture: the CPU build from the wheels pip's configuration points at
# (not the multi-GB GPU build of the index); without one that test skips, saying so. Not
# byte-compiled: pip compiling its thousands of modules took 25 of the install's 33 s, for one
# serial test whose processes then import torch in 4 s instead of 2. (Installed beside the first
# pass instead, it slowed that pass by more than it saved.)
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  { .venv/bin/python -m pip install --quiet --no-compile --no-index --no-deps torch >/dev/null 2>&1 \
      && .venv/bin/python -m pip install --quiet --no-compile torch; } \
    || echo "warning: no CPU build of torch to install; the DataLoader test skips" >&2
fi
bash scripts/install-test-tools.sh
# Byte-compile the package and the fixtures once: the suite starts a few hundred Python processes
# (every `python -m diagnose`, every fixture), and where PYTHONDONTWRITEBYTECODE is set none of
# them may cache what it compiles (measured: 0.4 s of each attach compiling diagnose's source).
.venv/bin/python -m compileall -q -j 0 diagnose fixtures tests >/dev/null
# The linter, the type checker and the import direction first: a quick failure before the long
# run. The layers and the contracts are pyproject.toml's [tool.importlinter] (docs/architecture.md).
.venv/bin/python -m ruff check diagnose
.venv/bin/lint-imports --no-cache
# The page's script (reports/static/page/*.js): TypeScript's checker, at the version
# package-lock.json pins (installed again when the lock is newer than the install).
if [ ! -x node_modules/.bin/tsc ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  command -v npm >/dev/null 2>&1 \
    || { echo "error: npm is needed to check the page's script (apt-get install nodejs npm)" >&2; exit 1; }
  npm ci --no-audit --no-fund --loglevel=error
fi
node_modules/.bin/tsc -p reports/static/page
mypy_status=0
wait "$mypy_pid" || mypy_status=$?
trap - EXIT
cat "$mypy_log" && rm -f "$mypy_log"
[ "$mypy_status" -eq 0 ] || exit "$mypy_status"
# Two passes over the whole suite. First every test not marked `serial`, two at a time
# (pytest-xdist; each file, or group of files sharing a capture, on one worker): most tests wait
# on sampling windows, sleeps and process start-ups, which overlap. Three at a time took the pass
# from 724-840 s to 544 s, but a test that measures a spinning process's CPU, and the GIL's
# holder under a shared core, failed beside two neighbours on CI's 2 cores. Then the `serial`
# tests one at a time: they measure throughput, latency, gains or the run queue, and fail when
# another test shares the cores. A `-m` of the caller's own selects; then it is one plain run.
WORKERS="${DIAGNOSE_TEST_WORKERS:-2}"
for arg in "$@"; do
  case "$arg" in
    -m|-m*) exec .venv/bin/python -m pytest "$@" ;;
  esac
done
status=0
.venv/bin/python -m pytest -n "$WORKERS" --dist loadfile -m "not serial" "$@" || status=$?
serial=0
.venv/bin/python -m pytest -p no:xdist -m serial "$@" || serial=$?
# 5: the pass selected no test (a caller's file or -k held none of its kind)
[ "$status" -eq 5 ] && [ "$serial" -ne 5 ] && status=0
[ "$serial" -eq 5 ] && serial=0
[ "$status" -ne 0 ] && exit "$status"
exit "$serial"
