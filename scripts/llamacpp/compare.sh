#!/usr/bin/env bash
# Measures llama.cpp (node-llama-cpp 3.21.1's prebuilt CPU addon, a benchmark
# aid only) and `batchd bench engine` on the same model files, alternating
# the two so that both see the same memory bandwidth: on a shared machine it
# drifts by tens of percent within minutes, so only interleaved figures
# compare.
#
# usage: scripts/llamacpp/compare.sh [ROUNDS=2] [TYPES="q8_0 f16 bf16"]
# Files: .cache/bench/SHAPE-TYPE.gguf (made by batchd demo-model; SHAPE is
# $SHAPE, default qwen2.5-0.5b; TYPE any demo-model --type, e.g. q4_k_m).
#
# KERNELS=avx2 forces batchd's backend (`bench engine --kernels`).
# LLAMA_CPU=haswell makes llama.cpp load only that CPU variant of its
# backend (node-llama-cpp ships one shared library per x86-64 level and
# loads the best the CPU supports; haswell is AVX2+FMA+F16C): with
# KERNELS=avx2 both engines run AVX2 code on an AVX-512 machine, the
# closest this machine gets to an AVX2-only one.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-2}
types=${2:-"q8_0 f16 bf16"}
threads=${THREADS:-2}
shape=${SHAPE:-qwen2.5-0.5b}
layers=${LAYERS:-} # LAYERS=N: only N of the shape's layers (demo-model --layers), in SHAPE-Nl-TYPE.gguf

make build >/dev/null
nlc=.cache/llamacpp
if [ ! -d "$nlc/node_modules/node-llama-cpp" ]; then
  mkdir -p "$nlc"
  (cd "$nlc" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --no-audit --no-fund --silent --ignore-scripts node-llama-cpp@3.21.1)
fi
if [ -n "${LLAMA_CPU:-}" ]; then
  bins=node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
  [ -f "$nlc/$bins/libggml-cpu-$LLAMA_CPU.so" ] || { echo "no llama.cpp CPU variant $LLAMA_CPU in $nlc/$bins" >&2; exit 2; }
  one=.cache/llamacpp-$LLAMA_CPU
  if [ ! -f "$one/$bins/libggml-cpu-$LLAMA_CPU.so" ]; then
    rm -rf "$one"
    cp -al "$nlc" "$one" # hard links: no copy of the 700 MB
    for f in "$one/$bins"/libggml-cpu-*.so; do
      [ "$(basename "$f")" = "libggml-cpu-$LLAMA_CPU.so" ] || rm "$f"
    done
  fi
  nlc=$one
fi
cp scripts/llamacpp/bench.mjs "$nlc/bench.mjs"
kernels=${KERNELS:-auto}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|avx2|fma|f16c|avx512f|avx512_vnni|avx512_bf16|avx_vnni|amx_int8)$' | tr '\n' ' ')"
echo "batchd kernels: $kernels; llama.cpp CPU variant: ${LLAMA_CPU:-best for this CPU}"

mkdir -p .cache/bench
file=$shape${layers:+-${layers}l}
for t in $types; do
  f=.cache/bench/$file-$t.gguf
  [ -f "$f" ] || bin/batchd demo-model --shape "$shape" ${layers:+--layers "$layers"} --type "$t" --out "$f" >/dev/null
done

for r in $(seq 1 "$rounds"); do
  for t in $types; do
    f=$PWD/.cache/bench/$file-$t.gguf
    echo "== round $r, $t"
    (cd "$nlc" && UV_THREADPOOL_SIZE=1 node bench.mjs "$f" 2 "$threads" 2>&1 | grep -E "system info|SUMMARY|peak RSS" | sed 's/^/llama.cpp: /')
    bin/batchd bench engine --model "$f" --threads "$threads" --kernels "$kernels" 2>/dev/null | sed 's/^/batchd:    /'
  done
done
