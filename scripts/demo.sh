#!/usr/bin/env bash
# Sets up a virtualenv with diagnose, starts the bundled demo inference service, diagnoses it
# and prints where the report is. Extra arguments go to `diagnose demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet -e .
exec .venv/bin/diagnose demo "$@"
