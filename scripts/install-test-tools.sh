#!/usr/bin/env bash
# Debian packages the tests need: Chromium (browser tests of the HTML report), wrk (the load
# generator of the real-server tests), iproute2 (a remote host in a network namespace), protoc and Go (the independent pprof readers), Node.js and
# npm (TypeScript's checker of the page's script, package.json), and the speedscope web app (the
# npm package's offline build, opened by the browser tests). Skipped when
# they cannot be installed, e.g. without root or without the network: the tests that need them
# then skip with the reason, and the server tests fall back to a Python client. Idempotent: what
# is present is not installed again.
set -uo pipefail
# The speedscope release the browser tests open, and where it lives (never in the repository).
SPEEDSCOPE_VERSION=1.25.0
SPEEDSCOPE_DIR="${DIAGNOSE_SPEEDSCOPE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/diagnose/speedscope}"
speedscope_pkg="$SPEEDSCOPE_DIR/node_modules/speedscope/package.json"
speedscope_present() {
  [ -f "$SPEEDSCOPE_DIR/node_modules/speedscope/dist/release/index.html" ] \
    && grep -q "\"version\": \"$SPEEDSCOPE_VERSION\"" "$speedscope_pkg" 2>/dev/null
}

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
# protoc: the independent decoder of the pprof export test (and the regenerating command)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
# go: `go tool pprof`, the reference reader of the pprof files
command -v go >/dev/null 2>&1 || missing+=(golang-go)
# node and npm: TypeScript's checker of the page's script (scripts/test.sh runs it), and the
# speedscope package
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
# ip (iproute2): a network namespace joined by a veth pair, the "remote host" of the chain tests
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null) \
      || echo "warning: could not install ${missing[*]}; the tests that need them skip or fall back" >&2
  else
    echo "warning: ${missing[*]} not found and not root; the tests that need them skip or fall back" >&2
  fi
fi
if ! speedscope_present; then
  if command -v npm >/dev/null 2>&1; then
    mkdir -p "$SPEEDSCOPE_DIR" \
      && npm install --prefix "$SPEEDSCOPE_DIR" --no-audit --no-fund --ignore-scripts --silent \
           "speedscope@$SPEEDSCOPE_VERSION" >/dev/null \
      || echo "warning: could not install speedscope@$SPEEDSCOPE_VERSION; its browser tests skip" >&2
  else
    echo "warning: no npm to install speedscope@$SPEEDSCOPE_VERSION; its browser tests skip" >&2
  fi
fi
exit 0
