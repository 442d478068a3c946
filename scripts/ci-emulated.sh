#!/usr/bin/env bash
# Runs the kernels and the native engine on CPUs CI does not have, under
# QEMU's user-mode emulation (Debian's qemu-user, installed when missing):
#
#   - x86-64 with AVX2, FMA and F16C but no AVX-512 (QEMU 7.2's -cpu max):
#     auto must pick the avx2 backend and its tests must pass, and an
#     AVX-512 instruction reached without a feature check dies with SIGILL;
#     the daemon binary (bin/batchd, from make build) must start, report
#     its kernels and run the engine there;
#   - arm64 with the dot-product extension (QEMU's -cpu max) and without it
#     (-cpu cortex-a53): auto must pick neon on both, its SDOT path runs on
#     the first and its plain NEON path on the second (an SDOT reached
#     without the asimddp check dies with SIGILL there).
#
# Emulated AVX2 is slow (about ten times arm64's emulation), so the x86-64
# engine run is a selection that covers every backend-dependent path; the
# rest runs with -test.short. Prints each step's time.
#
# Environment: BATCHD_STORIES260K and BATCHD_TOKENIZER_VECTORS as for the
# tests (unset: those tests skip). Needs root for apt-get when qemu-user is
# missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v qemu-x86_64 >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq qemu-user >/dev/null
fi
qemu-x86_64 --version | head -1

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# step NAME CMD...: runs CMD and prints how long it took.
step() {
  local name=$1 t0=$SECONDS
  shift
  echo "--- emulated: $name"
  "$@"
  echo "--- emulated: $name: ok in $((SECONDS - t0))s"
}

# The engine tests that depend on the kernel backend: selection, the forward
# pass on every backend and weight type, and the vector helpers of sampling
# and logprobs.
native_x86='^(TestKernelsSelection|TestStoriesGoldenOnEveryBackend|TestQuantizedModelsOnEveryBackend|TestStoriesGreedyFromBOSMatchesGolden|TestStoriesLogprobsMatchForward|TestStoriesLogitsAtPositionZero|TestDemoChatAndCompletionShapes|TestEmbeddingsNormalizedAndTruncated|TestLogSumExp|TestChooseGreedyTopK1AndMinP1|TestChooseNeverDrawsMasked|TestTopCandidatesMatchesSort|TestLogprobsAreRaw)$'

build() {
  GOEXPERIMENT=simd GOARCH=amd64 go test -c -o "$out/kernels-amd64.test" ./kernels
  GOEXPERIMENT=simd GOARCH=amd64 go test -c -o "$out/native-amd64.test" ./engine/native
  GOARCH=arm64 go test -c -o "$out/kernels-arm64.test" ./kernels
  GOARCH=arm64 go test -c -o "$out/native-arm64.test" ./engine/native
}

# A test binary runs in its package's directory (testdata, and the kernels'
# source check reads the module). BATCHD_EXPECT_BACKEND makes
# kernels.TestBackendSelection assert what auto picks; -test.v shows which
# backends ran and which were skipped for lack of what.
quiet() { grep -v -E '^=== (RUN|PAUSE|CONT|NAME)| INFO ' || true; }
kernels_x86() {
  (cd kernels && BATCHD_EXPECT_BACKEND=avx2 qemu-x86_64 -cpu max "$out/kernels-amd64.test" -test.short -test.v 2>&1 | quiet)
}
native_x86() {
  (cd engine/native && qemu-x86_64 -cpu max "$out/native-amd64.test" -test.short -test.v -test.run "$native_x86" 2>&1 | quiet)
}
kernels_arm64() {
  (cd kernels && BATCHD_EXPECT_BACKEND=neon qemu-aarch64 -cpu max "$out/kernels-arm64.test" -test.short -test.v 2>&1 | quiet) | tee "$out/arm64.log"
  if grep -q 'SDOT not tested' "$out/arm64.log"; then echo "-cpu max has no asimddp: SDOT did not run"; return 1; fi
}
# Without asimddp only the tests that reach the neon backend's kernels.
kernels_arm64_nodot() {
  (cd kernels && BATCHD_EXPECT_BACKEND=neon qemu-aarch64 -cpu cortex-a53 "$out/kernels-arm64.test" -test.short -test.v \
    -test.run 'NEON|Backend|Quant|MatMul|SIMD|NoSIMDAtInit' 2>&1 | quiet) | tee "$out/arm64-nodot.log"
  grep -q 'SDOT not tested' "$out/arm64-nodot.log" || { echo "cortex-a53 has asimddp: the plain NEON path was not the one run"; return 1; }
}
native_arm64() {
  (cd engine/native && qemu-aarch64 -cpu max "$out/native-arm64.test" -test.short 2>&1 | quiet)
}
native_arm64_nodot() {
  (cd engine/native && qemu-aarch64 -cpu cortex-a53 "$out/native-arm64.test" -test.short -test.run "$native_x86" 2>&1 | quiet)
}

step "build test binaries" build
step "kernels, x86-64 without AVX-512" kernels_x86
step "engine/native, x86-64 without AVX-512" native_x86
step "kernels, arm64 with dotprod" kernels_arm64
step "kernels, arm64 without dotprod" kernels_arm64_nodot
step "engine/native, arm64 with dotprod" native_arm64
step "engine/native, arm64 without dotprod" native_arm64_nodot

# The daemon binary on an AVX2-only CPU: it starts, names avx2 as auto's
# choice, runs the engine on it, and refuses avx512 naming what is missing.
batchd() { qemu-x86_64 -cpu max bin/batchd "$@"; }
smoke() {
  batchd --help >/dev/null
  batchd version | tee "$out/version"
  grep -q '^kernels: avx2 (auto)' "$out/version" || { echo "batchd version: auto should pick avx2 here"; return 1; }
  batchd bench engine --data "$out/data" --shape tiny --type q8_0 --prompt 32 --steps 4 --seqs 1,4 2>&1 | grep -v ' INFO '
  if batchd bench engine --data "$out/data" --shape tiny --type q8_0 --kernels avx512 >"$out/avx512" 2>&1; then
    echo "bench engine --kernels avx512 ran on a CPU without AVX-512"; return 1
  fi
  grep -q 'lacks avx512f' "$out/avx512" || { echo "--kernels avx512 failed without naming avx512f:"; cat "$out/avx512"; return 1; }
}
step "bin/batchd, x86-64 without AVX-512" smoke
