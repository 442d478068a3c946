#!/usr/bin/env bash
# KL divergence of each quantized type from F32, by batchd and by llama.cpp,
# on the same demo-model files and the same token sequence: `batchd bench kl`
# writes the files and the token ids it compares, then kl.mjs runs them
# through llama.cpp (node-llama-cpp 3.21.1's prebuilt CPU addon, a benchmark
# aid only) and prints llama.cpp's table in the same form.
#
# usage: scripts/llamacpp/kl.sh [TYPES=q8_0,q6_k,...] (SHAPE, default tiny-k;
# THREADS, default 2; KERNELS, batchd's backend, default auto)
set -euo pipefail
cd "$(dirname "$0")/../.."
types=${1:-q8_0,q6_k,q5_1,q5_k_m,q5_0,q4_1,q4_k_m,q4_k,q4_0,iq4_nl,iq4_xs,mxfp4,q3_k_m,q2_k}
shape=${SHAPE:-tiny-k}
threads=${THREADS:-2}

make build >/dev/null
nlc=.cache/llamacpp
if [ ! -d "$nlc/node_modules/node-llama-cpp" ]; then
  mkdir -p "$nlc"
  (cd "$nlc" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --no-audit --no-fund --silent --ignore-scripts node-llama-cpp@3.21.1)
fi
cp scripts/llamacpp/kl.mjs "$nlc/kl.mjs"
data=$PWD/.cache/kl
mkdir -p "$data"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); batchd kernels: ${KERNELS:-auto}"
echo "== batchd"
bin/batchd bench kl --data "$data" --shape "$shape" --types "$types" --threads "$threads" \
  --kernels "${KERNELS:-auto}" --tokens-out "$data/tokens.json"
models=()
for t in ${types//,/ }; do models+=("$data/models/demo-$shape-$t.gguf"); done
echo "== llama.cpp"
(cd "$nlc" && THREADS=$threads node kl.mjs "$data/tokens.json" "$data/models/demo-$shape-f32.gguf" "${models[@]}")
