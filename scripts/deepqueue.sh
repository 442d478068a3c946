#!/usr/bin/env bash
# deepqueue.sh: the deep queue end to end. Runs the real daemon (bin/batchd)
# with the native engine on a model, drops one file of REQUESTS completions
# over 8 shared prompts, and samples /metrics while it runs: requests the
# engine holds (batchd_dispatch_in_flight), waiting in the pipeline
# (batchd_dispatch_waiting), the window the engine asks for, and the
# sequences the engine has submitted and not retired. Prints the peaks, the
# wall time and the prefix cache's hit ratio.
#
#   scripts/deepqueue.sh MODEL.gguf [REQUESTS] [MAX_SEQS] [MAX_TOKENS]
#
# Environment: BIN (default bin/batchd), PORT (default 18411), DEVICE
# (native.device; unset: the config's default, cpu).
set -euo pipefail

model=${1:?usage: scripts/deepqueue.sh MODEL.gguf [REQUESTS] [MAX_SEQS] [MAX_TOKENS]}
requests=${2:-2000}
max_seqs=${3:-256}
max_tokens=${4:-16}
bin=${BIN:-bin/batchd}
port=${PORT:-18411}
device=${DEVICE:-}

work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/data"
cat >"$work/config.yaml" <<EOF
data: $work/data
listen: 127.0.0.1:$port
engine: native
native:
  models: [{name: m, path: $model}]
${device:+  device: $device}
  max_seqs: $max_seqs
log: {level: warn}
EOF

# 8 shared prompts of ~30 words, then a short per-request part: shuffled
# by construction (request i uses prompt i*5 mod 8).
awk -v n="$requests" -v mt="$max_tokens" 'BEGIN {
  split("Once upon a time there was a little girl named Lily who loved to play in the park with her big red ball and her dog", w, " ")
  for (i = 0; i < n; i++) {
    p = (i * 5) % 8; sys = ""
    for (j = 0; j < 30; j++) sys = sys w[(j * (p + 3)) % 24 + 1] " "
    printf "{\"custom_id\":\"r%d\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":\"m\",\"prompt\":\"%s. Then %s number %d\",\"max_tokens\":%d,\"temperature\":0}}\n", i, sys, w[i % 24 + 1], i, mt
  }
}' >"$work/deep.jsonl"

"$bin" run --config "$work/config.yaml" >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/log"; exit 1; }
  sleep 0.1
done
mkdir -p "$work/data/inbox"
cp "$work/deep.jsonl" "$work/data/inbox/.deep.jsonl" && mv "$work/data/inbox/.deep.jsonl" "$work/data/inbox/deep.jsonl"
start=$(date +%s.%N)
peak_flight=0 peak_wait=0 peak_engine=0 window=0
metric() { awk -v m="$1" '$1 == m { v = $2 } END { print int(v + 0) }' "$work/metrics"; }
while [ ! -e "$work/data/outbox/deep.output.jsonl" ]; do
  kill -0 "$pid" 2>/dev/null || { cat "$work/log"; exit 1; }
  curl -fs "http://127.0.0.1:$port/metrics" >"$work/metrics" 2>/dev/null || true
  f=$(metric batchd_dispatch_in_flight) w=$(metric batchd_dispatch_waiting) e=$(metric batchd_engine_in_flight)
  window=$(metric batchd_dispatch_window)
  ((f > peak_flight)) && peak_flight=$f
  ((w > peak_wait)) && peak_wait=$w
  ((e > peak_engine)) && peak_engine=$e
  sleep 0.5
done
end=$(date +%s.%N)
curl -fs "http://127.0.0.1:$port/metrics" >"$work/metrics"
hit=$(awk '$1 ~ /^batchd_prefix_cache_hit_ratio/ { print $2 }' "$work/metrics" | head -1)
lines=$(wc -l <"$work/data/outbox/deep.output.jsonl")
errors=$(cat "$work/data/outbox/deep.errors.jsonl" 2>/dev/null | wc -l)
awk -v n="$requests" -v s="$start" -v e="$end" -v ok="$lines" -v bad="$errors" -v ms="$max_seqs" \
  -v pf="$peak_flight" -v pw="$peak_wait" -v pe="$peak_engine" -v win="$window" -v hit="$hit" -v mt="$max_tokens" 'BEGIN {
  printf "requests %d (max_tokens %d), max_seqs %d: %d answered, %d errors in %.1f s (%.1f requests/s, %.0f output tok/s at most)\n", n, mt, ms, ok, bad, e - s, n / (e - s), n * mt / (e - s)
  printf "window %d; peak at the engine %d requests (batchd_dispatch_in_flight), peak waiting in the pipeline %d, peak engine sequences in flight %d\n", win, pf, pw, pe
  printf "prefix cache hit ratio %s\n", hit
}'
