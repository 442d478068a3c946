#!/usr/bin/env bash
# gpu-check.sh: prove batchd's CUDA device on a machine with an NVIDIA GPU,
# in at most 8 minutes, and write one report (markdown).
#
# Two halves, because the GPU machine has no Go (only the driver, the CUDA
# libraries, PyTorch and Triton):
#
#   scripts/gpu-check.sh build [DIR]    on a machine with Go, from the repository:
#                                       bin/batchd (-tags cuda), the kernel and engine
#                                       test binaries, this script, the PyTorch peer
#                                       and stories260K ($BATCHD_STORIES260K) into DIR
#                                       (default bin/gpu-check)
#   DIR/gpu-check.sh run [--report F]   on the GPU machine (F default gpu-check-report.md)
#                        [--smoke]      the same steps on the CPU with tiny shapes, to
#                                       test this script where there is no GPU
#
# The report: environment and library paths; each kernel against the CPU
# reference (the kernel tests); greedy tokens and logits on stories260K and a
# Qwen-shaped model, GPU against CPU; copy and GEMM ceilings; decode
# throughput and step latency by batch size with CUDA graphs on and off;
# offline throughput of one shared synthetic batch (1,000 requests) on the
# Qwen2.5-0.5B and Llama-3.1-8B shapes (random BF16 weights) beside the
# PyTorch peer (scripts/gpu_peer.py) on the same batch.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

build() {
	local out=${1:-bin/gpu-check}
	[ -f go.mod ] || { echo "gpu-check build: run it from the repository root" >&2; exit 2; }
	: "${BATCHD_STORIES260K:?set BATCHD_STORIES260K to the stories260K model directory}"
	mkdir -p "$out"
	export GOEXPERIMENT=simd CGO_ENABLED=0
	local ld="-s -w"
	go build -tags cuda -trimpath -ldflags "$ld -X main.version=$(git describe --tags --always 2>/dev/null || echo dev)" -o "$out/batchd" ./cmd/batchd || exit 1
	go test -c -tags cuda -trimpath -ldflags "$ld" -o "$out/cuda.test" ./kernels/cuda || exit 1
	go test -c -tags cuda -trimpath -ldflags "$ld" -o "$out/native.test" ./engine/native || exit 1
	cp scripts/gpu-check.sh scripts/gpu_peer.py "$out/"
	rm -rf "$out/stories260K" && cp -r "$BATCHD_STORIES260K" "$out/stories260K"
	du -sh "$out"
	echo "gpu-check: bundle in $out; on the GPU machine run: $out/gpu-check.sh run"
}

# --- run -------------------------------------------------------------------

report=gpu-check-report.md
smoke=0
start=$(date +%s)
budget=${GPU_CHECK_BUDGET:-470} # seconds; 8 minutes less a margin
results=()                      # summary lines

left() { echo $((budget - ($(date +%s) - start))); }

# step TITLE LIMIT CMD...: run CMD with at most LIMIT seconds (less if the
# budget is nearly spent), its output into the report.
step() {
	local title=$1 limit=$2
	shift 2
	local l
	l=$(left)
	if [ "$l" -lt 10 ]; then
		printf '\n### %s\n\nskipped: the 8-minute budget is spent\n' "$title" >>"$report"
		results+=("| $title | skipped (budget) |")
		return 124
	fi
	[ "$limit" -gt "$l" ] && limit=$l
	local t0 rc
	t0=$(date +%s)
	printf '\n### %s\n\n```\n$ %s\n' "$title" "$*" >>"$report"
	timeout --kill-after=5 "$limit" "$@" >"$tmp/out" 2>&1
	rc=$?
	# Logs are noise here: keep results, failures and the last lines.
	grep -v ' INFO \|level=INFO' "$tmp/out" | tail -n 60 >>"$report"
	printf '```\nexit %d in %ds\n' "$rc" $(($(date +%s) - t0)) >>"$report"
	case $rc in
	0) results+=("| $title | ok |") ;;
	124 | 137) results+=("| $title | TIMED OUT after ${limit}s |") ;;
	*) results+=("| $title | FAILED (exit $rc) |") ;;
	esac
	return $rc
}

run() {
	while [ $# -gt 0 ]; do
		case $1 in
		--report) report=$2; shift ;;
		--smoke) smoke=1 ;;
		*) echo "gpu-check run: unknown flag $1" >&2; exit 2 ;;
		esac
		shift
	done
	local b=$here
	[ -x "$b/batchd" ] || b=$here/../bin/gpu-check
	[ -x "$b/batchd" ] || { echo "gpu-check: no bundle next to this script or in bin/gpu-check: run 'scripts/gpu-check.sh build' first" >&2; exit 2; }
	b=$(cd "$b" && pwd)
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	export BATCHD_STORIES260K=$b/stories260K
	local stories
	stories=$(ls "$b"/stories260K/*.gguf | head -1)
	local dev=cuda qwen=qwen2.5-0.5b llama=llama-3.1-8b reqs=1000 out=256 maxp=512 seqs=1,8,64,256 steps=64 py=python3
	local data=$tmp/data
	if [ $smoke = 1 ]; then
		dev=cpu qwen=tiny llama=tiny-llama reqs=24 out=8 maxp=48 seqs=1,4 steps=4
		export BATCHD_CUDA_TEST=emu
		# Debian's python3 carries its own torch; pyenv shims may not.
		[ -x /usr/bin/python3 ] && py=/usr/bin/python3
	else
		export BATCHD_CUDA_TEST=gpu
	fi
	: >"$report"
	{
		echo "# batchd gpu-check report"
		echo
		echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname); mode: $([ $smoke = 1 ] && echo 'SMOKE (CPU, tiny shapes: not GPU figures)' || echo GPU)"
	} >>"$report"
	printf '\n## Environment\n' >>"$report"
	if [ $smoke = 1 ] && ! command -v nvidia-smi >/dev/null; then
		results+=("| nvidia-smi | not run (smoke, no driver) |")
	else
		step "nvidia-smi" 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv
	fi
	step "batchd version (CUDA libraries found)" 30 "$b/batchd" version
	[ $smoke = 1 ] && ! "$py" -c 'import torch' 2>/dev/null && results+=("| PyTorch and Triton | not run (smoke, no PyTorch) |") ||
		step "PyTorch and Triton" 60 "$py" -c 'import torch, importlib.util as u
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
print("triton", __import__("triton").__version__ if u.find_spec("triton") else "absent")'

	printf '\n## Correctness: GPU against the CPU reference\n' >>"$report"
	step "kernels vs CPU reference (elementwise 1e-3, attention 1e-2)" 90 "$b/cuda.test" -test.v -test.count=1
	step "stories260K greedy goldens on the device" 60 env BATCHD_DEVICE=$dev "$b/native.test" -test.run 'Stories' -test.v -test.count=1
	step "stories260K: $dev vs cpu, logits and greedy tokens" 60 "$b/batchd" bench engine --model "$stories" --parity cpu,$dev --prompt 64 --steps 64
	step "$qwen-shaped BF16: $dev vs cpu, logits and greedy tokens" 120 "$b/batchd" bench engine --data "$data" --shape $qwen --type bf16 --parity cpu,$dev --prompt 64 --steps 32

	printf '\n## Ceilings\n' >>"$report"
	if [ $smoke = 1 ]; then
		results+=("| copy and GEMM ceilings | not run (smoke: needs a GPU) |")
	else
		step "copy and GEMM ceilings" 60 "$b/batchd" bench gpu
	fi

	printf '\n## Decode by batch size (aggregate tok/s; step latency = batch / tok/s)\n' >>"$report"
	for g in on off; do
		step "$qwen BF16 decode, CUDA graphs $g" 60 env BATCHD_CUDA_GRAPHS=$g "$b/batchd" bench engine --data "$data" --device $dev --shape $qwen --type bf16 --prompt 256 --steps $steps --seqs $seqs
	done

	printf '\n## Offline throughput: one shared synthetic batch, %d requests, prompts 32..%d tokens, %d output tokens each\n' $reqs $maxp $out >>"$report"
	for shape in $qwen $llama; do
		step "$shape: write the batch" 120 "$b/batchd" bench engine --data "$data" --shape $shape --type bf16 --offline $reqs --prompt $maxp --output $out --write-batch "$tmp/$shape.jsonl"
		step "$shape BF16 offline: batchd" 150 "$b/batchd" bench engine --data "$data" --device $dev --shape $shape --type bf16 --offline $reqs --prompt $maxp --output $out --max-seqs 256
		if [ $smoke = 1 ] && ! "$py" -c 'import torch' 2>/dev/null; then
			results+=("| $shape offline: PyTorch peer | not run (smoke, no PyTorch) |")
		elif [ $smoke = 1 ]; then
			step "$shape offline: PyTorch peer (CPU)" 60 "$py" "$b/gpu_peer.py" --batch-file "$tmp/$shape.jsonl" --shape $shape --device cpu --dtype float32 --wave 8
		else
			step "$shape BF16 offline: PyTorch peer, CUDA graphs" 150 "$py" "$b/gpu_peer.py" --batch-file "$tmp/$shape.jsonl" --shape $shape --graphs
		fi
	done

	{
		printf '\n## Summary (%ds of %ds)\n\n| step | result |\n|---|---|\n' $(($(date +%s) - start)) "$budget"
		printf '%s\n' "${results[@]}"
	} >>"$report"
	# The summary first: move it to the top.
	awk '/^## Summary/{s=1} s{print > "'"$tmp"'/sum"; next} {print > "'"$tmp"'/body"}' "$report"
	{ head -n 3 "$tmp/body"; cat "$tmp/sum"; tail -n +4 "$tmp/body"; } >"$report"
	echo "gpu-check: report in $report"
	grep -q 'FAILED\|TIMED OUT' "$report" && return 1
	return 0
}

case ${1:-} in
build) shift; build "$@" ;;
run) shift; run "$@" ;;
*) sed -n '2,22p' "$0" >&2; exit 2 ;;
esac
