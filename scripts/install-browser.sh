#!/usr/bin/env bash
# Debian's Chromium, for the browser tests of the HTML report. Skipped (and those tests skip
# with the reason) when it cannot be installed, e.g. without root.
set -uo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "warning: could not install chromium; browser tests will skip" >&2
else
  echo "warning: chromium not found and not root; browser tests will skip" >&2
fi
exit 0
