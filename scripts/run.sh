#!/usr/bin/env bash
# `make run`: start batchd on $DATA, submit examples/, show where results are,
# then keep the daemon running (Ctrl-C stops it; RUN_ONCE=1 stops after the
# examples).
#
# Engine: batchd's own in-process engine on MODEL (a .gguf file or a Hugging
# Face directory). Without MODEL, `batchd demo-model` makes a tiny model with
# random weights and a real tokenizer: it runs in milliseconds, and its text
# is noise. OPENAI_URL (e.g. http://127.0.0.1:8000/v1) sends the requests to
# a remote OpenAI-compatible server (vLLM, SGLang, llama.cpp server) instead.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=./bin/batchd
DATA=${DATA:-./data}
LISTEN=${LISTEN:-127.0.0.1:8080}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

if [ -n "${OPENAI_URL:-}" ]; then
  engine=(--engine openai --openai-url "$OPENAI_URL")
  echo "== engine: the remote server at $OPENAI_URL"
else
  model=${MODEL:-}
  if [ -z "$model" ]; then
    model=$($BIN demo-model --data "$DATA")
    echo "== engine: native, on the demo model $model (random weights: its answers are noise; set MODEL=path/to/model.gguf for a real one)"
  else
    echo "== engine: native, on $model"
  fi
  engine=(--model "$model")
fi

$BIN run --data "$DATA" "${engine[@]}" --listen "$LISTEN" &
daemon=$!
pids+=($daemon)

for f in examples/*.jsonl examples/*.json; do
  case "$f" in *.options.json) continue;; esac
  name=$(basename "$f"); name=${name%.*}
  opts=()
  [ -f "examples/$name.options.json" ] && opts=(--options "examples/$name.options.json")
  $BIN submit --data "$DATA" --wait "${opts[@]}" "$f" || true
done
echo
$BIN status --data "$DATA"
echo
echo "== results are in $DATA/outbox/ (NAME.output.jsonl, NAME.errors.jsonl, NAME.batch.json)"
head -c 600 "$DATA/outbox/hello.output.jsonl"; echo
if [ -n "${RUN_ONCE:-}" ]; then exit 0; fi
echo "== status page: http://$LISTEN/   metrics: http://$LISTEN/metrics   OpenAI-compatible API: http://$LISTEN/v1"
echo "== batchd keeps watching $DATA/inbox/ — drop more *.jsonl files there, or run 'bin/batchd submit FILE'. Ctrl-C stops it."
wait $daemon
