#!/usr/bin/env bash
# Regenerates diagnose/export/profile_pb2.py from diagnose/export/profile.proto (google/pprof's
# published profile.proto).
#
# The compiler is the protoc bundled in grpcio-tools 1.63.0 (libprotoc 26.1): its Python code
# runs on the protobuf runtime from 5.26.0 on, the floor pyproject.toml declares. Code from a
# newer protoc demands a runtime at least as new as that protoc, so the version is pinned. It
# is installed in a throwaway virtualenv so the project's own protobuf runtime is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

GRPCIO_TOOLS_VERSION=1.63.0
venv="$(mktemp -d)"
trap 'rm -rf "$venv"' EXIT

python3 -m venv "$venv"
"$venv/bin/pip" install --quiet "grpcio-tools==${GRPCIO_TOOLS_VERSION}"
# --proto_path=. registers the file in protobuf's default pool as
# "diagnose/export/profile.proto", a name no other library's profile.proto can collide with.
"$venv/bin/python" -m grpc_tools.protoc --proto_path=. --python_out=. diagnose/export/profile.proto
compiler="$("$venv/bin/python" -m grpc_tools.protoc --version)"
echo "regenerated diagnose/export/profile_pb2.py with ${compiler}"
