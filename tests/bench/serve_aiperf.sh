#!/usr/bin/env bash
# A load tester nobody here wrote (AIPerf 0.13, in a virtual environment of its own) against
# `tokenometer serve` and llama.cpp's own `llama-server` on the same GGUF, interleaved: for each
# round and each concurrency, ours then theirs, each server started fresh on 1 thread (on 2 cores
# a 2-thread server and AIPerf starve each other). Never part of `make test`.
#
# Usage: AIPERF=.../bin/aiperf LLAMA_SERVER=.../llama-server tests/bench/serve_aiperf.sh MODEL.gguf
#   LEVELS="1 4 8" ROUNDS=2 OSL=64 ISL=128 PARALLEL=8 THREADS=1 OUT=target/bench/serve
#   SERVERS="ours llama" (add `before` with BEFORE=path/to/an/older/tokenometer to compare builds)
#   TEMPERATURE=0: the same sampler on every server (greedy; llama-server's own chain otherwise)
# AIPerf wants a Hugging Face tokenizer (its "builtin" one downloads its encoding): the model's
# own is written from the GGUF into $OUT/tokenizer by gguf_tokenizer_json.py, with PyPI's `gguf`
# installed in AIPerf's environment (pip install gguf).
# Needs target/release/tokenometer (cargo build --release). Prints one row per run and a summary,
# and keeps AIPerf's artifacts (with raw responses, for the servers' own timings) under $OUT.
# Traffic goes to 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:?usage: serve_aiperf.sh MODEL.gguf}
AIPERF=${AIPERF:?AIPERF= the aiperf command of its own virtual environment}
LLAMA_SERVER=${LLAMA_SERVER:?LLAMA_SERVER= the llama-server of llama.cpp}
LEVELS=${LEVELS:-"1 4 8"}
ROUNDS=${ROUNDS:-2}
OSL=${OSL:-64}
ISL=${ISL:-128}
PARALLEL=${PARALLEL:-8}
THREADS=${THREADS:-1}
SERVERS=${SERVERS:-"ours llama"}
TEMPERATURE=${TEMPERATURE:-0}
OUT=${OUT:-target/bench/serve}
PORT=${PORT:-18431}
URL="http://127.0.0.1:$PORT"
mkdir -p "$OUT"
TOKENIZER=${TOKENIZER:-$OUT/tokenizer}
[ -f "$TOKENIZER/tokenizer.json" ] || "$(dirname "$AIPERF")/python" tests/bench/gguf_tokenizer_json.py "$MODEL" "$TOKENIZER"

wait_healthy() {
  for _ in $(seq 1 600); do
    if curl -sf "$URL/health" > /dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "serve_aiperf: the server on $URL did not become healthy" >&2
  return 1
}

# Start server $1 (ours | llama) and wait until it answers /health.
start() {
  if [ "$1" = ours ] || [ "$1" = before ]; then
    bin=target/release/tokenometer
    [ "$1" = before ] && bin=${BEFORE:?BEFORE= an older tokenometer binary}
    "$bin" serve --model "$MODEL" --threads "$THREADS" --parallel "$PARALLEL" \
      --queue 256 --port "$PORT" --exit-after 1800 > "$OUT/server.log" 2>&1 &
  else
    # Each of llama-server's slots gets context/parallel tokens: 1024 a user is plenty here.
    "$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" -tb "$THREADS" --parallel "$PARALLEL" -c $((1024 * PARALLEL)) \
      --host 127.0.0.1 --port "$PORT" --no-webui > "$OUT/server.log" 2>&1 &
  fi
  SERVER=$!
  wait_healthy
}

SERVER=
stop() {
  [ -n "$SERVER" ] || return 0
  kill "$SERVER" 2> /dev/null || true
  wait "$SERVER" 2> /dev/null || true
  SERVER=
}
trap stop EXIT

for round in $(seq 1 "$ROUNDS"); do
  for c in $LEVELS; do
    for server in $SERVERS; do
      start "$server"
      name=$(curl -s "$URL/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
      dir="$OUT/$server-c$c-r$round"
      rm -rf "$dir"
      "$AIPERF" profile --model "$name" --url "$URL" --endpoint-type chat --streaming \
        --concurrency "$c" --request-count $((c * 6)) --warmup-request-count "$c" \
        --synthetic-input-tokens-mean "$ISL" --synthetic-input-tokens-stddev 0 \
        --output-tokens-mean "$OSL" --output-tokens-stddev 0 --extra-inputs ignore_eos:true \
        --extra-inputs temperature:"$TEMPERATURE" \
        --tokenizer "$TOKENIZER" --use-server-token-count --random-seed 7 \
        --export-level raw --artifact-dir "$dir" --ui-type none > "$dir.log" 2>&1 \
        || { echo "serve_aiperf: aiperf failed on $server at $c users (see $dir.log)" >&2; tail -20 "$dir.log" >&2; }
      stop
      echo "done: $server, $c users, round $round"
    done
  done
done
python3 tests/bench/serve_aiperf_summary.py "$OUT"
