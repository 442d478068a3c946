#!/usr/bin/env bash
# End to end through the daemon: 16 completions of ~175 prompt tokens and 24
# generated tokens each (greedy) dropped as one batch file, timed from
# `batchd submit --wait` until the outputs are final (model load included).
#
# usage: scripts/bench-daemon.sh MODEL.gguf [BIN=bin/batchd]
# KERNELS=avx2 forces the kernel backend (BATCHD_KERNELS); the engine uses
# every core.
set -euo pipefail
model=${1:?usage: scripts/bench-daemon.sh MODEL.gguf [BIN]}
bin=${2:-bin/batchd}
d=$(mktemp -d)
trap 'kill "${pid:-}" 2>/dev/null || true; rm -rf "$d"' EXIT

words="the quick brown fox jumps over the lazy dog while a small bird sings in the old oak tree near the river and children play in the warm afternoon sun"
read -ra w <<<"$words"
for i in $(seq 0 15); do
  text=""
  for j in $(seq 0 69); do text+="${w[$(((i + j) % ${#w[@]}))]} "; done
  printf '{"custom_id":"c%d","method":"POST","url":"/v1/completions","body":{"prompt":"%s","max_tokens":24,"temperature":0}}\n' "$i" "${text% }"
done >"$d/sixteen.jsonl"

BATCHD_KERNELS=${KERNELS:-auto} "$bin" run --data "$d/data" --model "$model" --listen off 2>"$d/log" &
pid=$!
start=$(date +%s.%N)
"$bin" submit --data "$d/data" --wait "$d/sixteen.jsonl" >/dev/null 2>&1
end=$(date +%s.%N)
echo "$(grep -o 'kernels=[a-z0-9]*' "$d/log" | head -1) cpu=\"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')\""
echo "requests: $(grep -c custom_id "$d/data/outbox/sixteen.output.jsonl") completed; tokens: $(grep -o '"prompt_tokens":[0-9]*,"completion_tokens":[0-9]*' "$d/data/outbox/sixteen.output.jsonl" | head -1)"
echo "elapsed: $(echo "$end - $start" | bc) s"
