#!/usr/bin/env bash
# Runs every fuzz target for FUZZTIME each (default 10s: CI's bounded run,
# about 5 minutes for all on 2 cores with the builds; `make fuzz` runs them
# longer), one after another, and prints a table of executions per target.
# A failure stops the run; its input is written under the package's
# testdata/fuzz/FuzzXxx/ (commit it with the fix, as a regression seed).
#
#   FUZZTIME=5m bash scripts/fuzz.sh              # all targets, 5 minutes each
#   bash scripts/fuzz.sh FuzzLedgerOpen FuzzAPI   # some targets
#
# Minimizing is kept to 3s: new inputs of the ledger target are files of
# tens of KiB, and minimizing each froze that target for most of its time.
# go test -fuzz takes one target per package and invocation, hence the
# loop. The committed seeds under testdata/fuzz run in every plain
# `go test` too.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZTIME:-10s}
# package target
targets="
./engine/native/ FuzzNativeRequest
./engine/native/gguf/ FuzzOpen
./kernels/ FuzzQuantBlocks
./engine/native/weights/ FuzzSafetensors
./engine/native/chat/ FuzzRender
./engine/native/chat/ FuzzParse
./engine/native/tokenizer/ FuzzEncode
./engine/native/tokenizer/ FuzzEncodeSPM
./engine/native/tokenizer/ FuzzScanners
./engine/openai/ FuzzReplaceModel
./pipeline/ FuzzOptions
./pipeline/ledger/ FuzzLedgerOpen
./pipeline/validate/ FuzzCheck
./pipeline/validate/ FuzzLineReader
./pipeline/validate/ FuzzDocReader
./daemon/ FuzzAPI
./daemon/ FuzzLoadConfig
./filecontract/ FuzzSafeName
./watcher/dir/ FuzzClassify
./wire/ FuzzTranslations
"

# inputs counts the files in a corpus folder (0 when it does not exist).
inputs() { if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi; }

want=" $* "
summary=""
log=$(mktemp)
trap 'rm -f "$log"' EXIT
while read -r pkg target; do
  [ -n "$pkg" ] || continue
  if [ $# -gt 0 ] && [[ "$want" != *" $target "* ]]; then
    continue
  fi
  echo "== $target ($pkg, $fuzztime)"
  start=$(date +%s)
  corpus="${pkg}testdata/fuzz/$target"
  for attempt in 1 2; do
    before=$(inputs "$corpus")
    if go test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" -fuzzminimizetime 3s "$pkg" 2>&1 | tee "$log"; then
      break
    fi
    # Go 1.26's fuzz coordinator can report the end of -fuzztime itself as a
    # failure ("context deadline exceeded", no input written: go.dev/issue/75804,
    # fixed in Go 1.27). Only that exact signature is retried; a failing input
    # always stops the run.
    if [ "$(inputs "$corpus")" = "$before" ] && grep -qx '    context deadline exceeded' "$log"; then
      if [ "$attempt" = 1 ]; then
        echo "fuzz target $target: Go's fuzztime deadline race (go.dev/issue/75804), no input found; running it again" >&2
        continue
      fi
      echo "fuzz target $target: Go's fuzztime deadline race twice in a row, no input found; counted as a flake, not a finding" >&2
      break
    fi
    echo "fuzz target $target in $pkg failed; its input is under $corpus/" >&2
    exit 1
  done
  execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  # A target that is not in its package passes silently ("no test files",
  # "no tests to fuzz"): the list above must name where each one lives.
  if [ -z "$execs" ]; then
    echo "fuzz target $target did not run in $pkg: is it defined there?" >&2
    exit 1
  fi
  summary+=$(printf '%-20s %-28s %12s %6ss' "$target" "$pkg" "${execs:-0}" "$(( $(date +%s) - start ))")$'\n'
done <<< "$targets"
echo
printf '%-20s %-28s %12s %7s\n' target package execs wall
printf '%s' "$summary"
