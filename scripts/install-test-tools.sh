#!/usr/bin/env bash
# Debian packages the tests need: Chromium (browser tests of the HTML report) and wrk (the load
# generator of the real-server tests). Skipped when they cannot be installed, e.g. without root:
# the browser tests then skip with the reason, and the server tests fall back to a Python client.
set -uo pipefail
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
# protoc: the independent decoder of the pprof export test (and the regenerating command)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null) \
    || echo "warning: could not install ${missing[*]}; the tests that need them skip or fall back" >&2
else
  echo "warning: ${missing[*]} not found and not root; the tests that need them skip or fall back" >&2
fi
exit 0
