#!/usr/bin/env bash
# Measures llama.cpp (node-llama-cpp 3.21.1's prebuilt CPU addon, a benchmark
# aid only) and `batchd bench engine` on the same model files, alternating
# the two so that both see the same memory bandwidth: on a shared machine it
# drifts by tens of percent within minutes, so only interleaved figures
# compare.
#
# usage: scripts/llamacpp/compare.sh [ROUNDS=2] [TYPES="q8_0 f16 bf16"]
# Files: .cache/bench/qwen2.5-0.5b-TYPE.gguf (made by batchd demo-model).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-2}
types=${2:-"q8_0 f16 bf16"}
threads=${THREADS:-2}

make build >/dev/null
nlc=.cache/llamacpp
if [ ! -d "$nlc/node_modules/node-llama-cpp" ]; then
  mkdir -p "$nlc"
  (cd "$nlc" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --no-audit --no-fund --silent --ignore-scripts node-llama-cpp@3.21.1)
fi
cp scripts/llamacpp/bench.mjs "$nlc/bench.mjs"

mkdir -p .cache/bench
for t in $types; do
  f=.cache/bench/qwen2.5-0.5b-$t.gguf
  [ -f "$f" ] || bin/batchd demo-model --shape qwen2.5-0.5b --type "$t" --out "$f" >/dev/null
done

for r in $(seq 1 "$rounds"); do
  for t in $types; do
    f=$PWD/.cache/bench/qwen2.5-0.5b-$t.gguf
    echo "== round $r, $t"
    (cd "$nlc" && UV_THREADPOOL_SIZE=1 node bench.mjs "$f" 2 "$threads" 2>&1 | grep -E "SUMMARY|peak RSS" | sed 's/^/llama.cpp: /')
    bin/batchd bench engine --model "$f" --threads "$threads" 2>/dev/null | sed 's/^/batchd:    /'
  done
done
