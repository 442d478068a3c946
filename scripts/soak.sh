#!/usr/bin/env bash
# A long soak of bin/batchd for manual runs: cmd/batchd's TestSoak for
# TIME (default 30m) of chaos — inputs dropped, the daemon SIGKILLed and
# restarted, the stand-in engine answering with seeded errors, resets,
# truncated bodies, hangs and latency, and killed, paused and restarted —
# then every batch checked with `batchd check`, the ledger with `batchd
# ledger check`, and the idle daemon's goroutines, fds and heap compared
# across rounds of the same work. The daemon is built with the race
# detector unless RACE=0.
#
# usage: scripts/soak.sh [TIME]
#   SEED=N  replays a seed (the soak logs the one it used)
#   DIR=D   works in D and keeps it (logs: D/batchd.log, D/engine.log)
set -euo pipefail
cd "$(dirname "$0")/.."
time=${1:-30m}
export BATCHD_SOAK=1 BATCHD_SOAK_TIME="$time" BATCHD_SOAK_RACE="${RACE:-1}"
[ -n "${SEED:-}" ] && export BATCHD_SOAK_SEED="$SEED"
[ -n "${DIR:-}" ] && export BATCHD_SOAK_DIR="$DIR"
# The chaos phase, then up to 10 minutes to finish its work, three rounds
# of more work and the checks.
if [[ ! $time =~ ^([0-9]+)([smh])$ ]]; then
  echo "soak.sh: TIME $time: want a whole number of s, m or h, such as 30m or 2h" >&2
  exit 2
fi
declare -A unit=([s]=1 [m]=60 [h]=3600)
limit=$((BASH_REMATCH[1] * ${unit[${BASH_REMATCH[2]}]} + 1800))s
GOEXPERIMENT=${GOEXPERIMENT-simd} exec go test -count=1 -run '^TestSoak$' -v -timeout "$limit" ./cmd/batchd/
