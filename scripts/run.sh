#!/usr/bin/env bash
# `make run`: start batchd on $DATA, submit examples/, show where results are,
# then keep the daemon running (Ctrl-C stops it; RUN_ONCE=1 stops after the
# examples).
#
# Engine: until the native engine lands, batchd runs requests on a remote
# OpenAI-compatible server. Set OPENAI_URL (e.g. http://127.0.0.1:8000/v1 for
# vLLM or llama.cpp server) to use yours; without it this script starts
# `batchd echo-server`, a stand-in whose answers only echo the prompt — it
# shows the pipeline working, not a model.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=./bin/batchd
DATA=${DATA:-./data}
LISTEN=${LISTEN:-127.0.0.1:8080}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

url=${OPENAI_URL:-}
if [ -z "$url" ]; then
  port_file=$(mktemp)
  $BIN echo-server --listen 127.0.0.1:0 --addr-file "$port_file" &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$port_file" ] && break; sleep 0.1; done
  url="http://$(cat "$port_file")/v1"
  rm -f "$port_file"
  echo "== no OPENAI_URL set: using the stand-in echo server at $url (answers echo the prompt; not a model)"
fi

$BIN run --data "$DATA" --engine openai --openai-url "$url" --listen "$LISTEN" &
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
echo "== batchd keeps watching $DATA/inbox/ — drop more *.jsonl files there, or run 'bin/batchd submit FILE'. Ctrl-C stops it."
wait $daemon
