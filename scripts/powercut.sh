#!/usr/bin/env bash
# Longer power-cut runs for manual use: cmd/batchd's TestPowerCut* with
# CUTS random cuts per scenario (default 200; make test takes 12). The
# daemon runs on internal/lazyfs (a FUSE filesystem that keeps only what
# was fsynced), is killed before a random filesystem operation, the power
# is cut (unsynced data dropped or torn, unsynced directory changes undone),
# and it restarts on what survived; every batch must end as an
# uninterrupted run's, and `batchd check` and `batchd ledger check` pass.
# Needs root and /dev/fuse.
#
# usage: scripts/powercut.sh [CUTS]
#   SEED=N  replays a seed (the tests log the ones they used)
set -euo pipefail
cd "$(dirname "$0")/.."
cuts=${1:-200}
if ! [[ $cuts =~ ^[1-9][0-9]*$ ]]; then
  echo "powercut.sh: CUTS $cuts: want a positive whole number" >&2
  exit 2
fi
args=()
[ -n "${SEED:-}" ] && args=(-args -powercut.seed="$SEED")
export BATCHD_POWERCUT_CUTS="$cuts" BATCHD_REQUIRE_FUSE=1
# About 0.5 s a cut on 2 cores, four scenarios.
GOEXPERIMENT=${GOEXPERIMENT-simd} exec go test -count=1 -run '^TestPowerCut' -v -timeout "$((cuts * 4 + 600))s" ./cmd/batchd/ "${args[@]}"
