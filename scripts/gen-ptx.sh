#!/usr/bin/env bash
# Compiles the CUDA kernels (kernels/cuda/csrc/batchd.cu) to PTX for sm_80
# (Ampere; PTX ISA 7.0, loadable by CUDA 11+ drivers) and sm_90a (Hopper;
# PTX ISA 8.0), with Debian's clang-19 and no CUDA toolkit, into
# kernels/cuda/ptx/, which is committed and embedded in the binary.
#
#   scripts/gen-ptx.sh           regenerate kernels/cuda/ptx/*.ptx
#   scripts/gen-ptx.sh --check   fail if they are stale (CI)
#
# CLANG overrides the compiler (default clang-19; another version may emit
# different text, so --check wants the one CI uses).
set -euo pipefail
cd "$(dirname "$0")/.."

clang=${CLANG:-clang-19}
if ! command -v "$clang" >/dev/null; then
  echo "gen-ptx: $clang not found (install it: apt install clang-19)" >&2
  exit 1
fi

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: scripts/gen-ptx.sh [--check]" >&2; exit 2 ;;
esac

out=kernels/cuda/ptx
if [ "$check" = 1 ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"

# arch:PTX ISA feature
for target in sm_80:ptx70 sm_90a:ptx80; do
  arch=${target%%:*} isa=${target#*:}
  "$clang" -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch="$arch" \
    -Xclang -target-feature -Xclang "+$isa" -O3 -I kernels/cuda/csrc \
    -S -o "$out/$arch.ptx" kernels/cuda/csrc/batchd.cu
done

if [ "$check" = 1 ]; then
  for arch in sm_80 sm_90a; do
    if ! diff -u "kernels/cuda/ptx/$arch.ptx" "$out/$arch.ptx" >/dev/null 2>&1; then
      echo "gen-ptx: kernels/cuda/ptx/$arch.ptx is stale (the kernels changed): run scripts/gen-ptx.sh and commit the result" >&2
      diff -u "kernels/cuda/ptx/$arch.ptx" "$out/$arch.ptx" | head -40 >&2 || true
      exit 1
    fi
  done
  echo "gen-ptx: kernels/cuda/ptx is up to date"
fi
