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
.venv/bin/python -m pip install --quiet -e '.[test]'
bash scripts/install-test-tools.sh
exec .venv/bin/python -m pytest "$@"
