#!/usr/bin/env bash
# Installs what the ops status page's browser test (TestStatusPageInBrowser)
# needs: Debian's chromium and npm's playwright-core. Idempotent: when both are
# already there it only checks and returns. Prints nothing on success; on
# failure it prints the installer's output and exits non-zero.
#
# Environment:
#   BATCHD_CHROMIUM        chromium binary to use (default /usr/bin/chromium);
#                          when it is executable, apt is not touched
#   BATCHD_PLAYWRIGHT_DIR  where playwright-core goes (its node_modules parent;
#                          default .cache/npm-playwright at the repo root)
# Needs node and npm on PATH, and for a missing chromium, apt-get run as root
# (or sudo) with the Debian archive reachable; for a missing playwright-core,
# the npm registry.
set -euo pipefail
cd "$(dirname "$0")/.."

PLAYWRIGHT_VERSION=1.65.1
CHROMIUM=${BATCHD_CHROMIUM:-/usr/bin/chromium}
PWDIR=${BATCHD_PLAYWRIGHT_DIR:-$PWD/.cache/npm-playwright}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail() {
  echo "ci-browser.sh: $1" >&2
  cat "$log" >&2
  exit 1
}

for tool in node npm; do
  command -v "$tool" >/dev/null || fail "$tool is not on PATH; install Node.js (18 or newer)"
done

if [ ! -x "$CHROMIUM" ]; then
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || fail "chromium is missing and installing it needs root or sudo"
    sudo=(sudo -n)
  fi
  export DEBIAN_FRONTEND=noninteractive
  # A fresh container has empty package lists: try without updating first,
  # since an update is the slow part.
  if ! "${sudo[@]}" apt-get install -y -qq chromium >"$log" 2>&1; then
    "${sudo[@]}" apt-get update -qq >"$log" 2>&1 || fail "apt-get update failed"
    "${sudo[@]}" apt-get install -y -qq chromium >"$log" 2>&1 || fail "apt-get install chromium failed"
  fi
  [ -x "$CHROMIUM" ] || fail "chromium installed, but $CHROMIUM is not executable; set BATCHD_CHROMIUM"
fi

installed=$(PWDIR=$PWDIR node -p \
  "try { require(process.env.PWDIR + '/node_modules/playwright-core/package.json').version } catch { '' }" 2>/dev/null || true)
if [ "$installed" != "$PLAYWRIGHT_VERSION" ]; then
  mkdir -p "$PWDIR"
  [ -f "$PWDIR/package.json" ] || echo '{"private": true}' >"$PWDIR/package.json"
  npm install --prefix "$PWDIR" --no-audit --no-fund --silent \
    "playwright-core@$PLAYWRIGHT_VERSION" >"$log" 2>&1 || fail "npm install playwright-core@$PLAYWRIGHT_VERSION failed"
fi
