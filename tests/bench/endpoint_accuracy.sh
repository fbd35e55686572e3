#!/usr/bin/env bash
# How far `bench --endpoint`'s figures are from a load tester nobody here wrote (AIPerf 0.13, in a
# virtual environment of its own) and from the server's own `timings`, on the same server and
# load: llama.cpp's `llama-server` (--parallel 4, 1 thread: the clients need the other core) on
# one GGUF, concurrency 1 and 4, 64 tokens a request (ignore_eos), the same prompts (AIPerf's
# synthetic ones, seeded, read back from its inputs.json). Interleaved: each round and level runs
# AIPerf, then ours, against one warm server. Never part of `make test`.
#
# Usage: AIPERF=.../bin/aiperf LLAMA_SERVER=.../llama-server tests/bench/endpoint_accuracy.sh M.gguf
#   LEVELS="1 4" ROUNDS=2 OSL=64 ISL=128 PARALLEL=4 THREADS=1 DURATION=15 OUT=target/bench/endpoint
# Needs target/release/tokenometer. AIPerf counts tokens with the model's own tokenizer, written
# from the GGUF by gguf_tokenizer_json.py (PyPI's `gguf` in AIPerf's environment), and is told to
# use the server's counts. Traffic goes to 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:?usage: endpoint_accuracy.sh MODEL.gguf}
AIPERF=${AIPERF:?AIPERF= the aiperf command of its own virtual environment}
LLAMA_SERVER=${LLAMA_SERVER:?LLAMA_SERVER= the llama-server of llama.cpp}
LEVELS=${LEVELS:-"1 4"}
ROUNDS=${ROUNDS:-2}
OSL=${OSL:-64}
ISL=${ISL:-128}
PARALLEL=${PARALLEL:-4}
THREADS=${THREADS:-1}
DURATION=${DURATION:-15}
OUT=${OUT:-target/bench/endpoint}
PORT=${PORT:-18432}
URL="http://127.0.0.1:$PORT"
mkdir -p "$OUT"
TOKENIZER=${TOKENIZER:-$OUT/tokenizer}
[ -f "$TOKENIZER/tokenizer.json" ] || "$(dirname "$AIPERF")/python" tests/bench/gguf_tokenizer_json.py "$MODEL" "$TOKENIZER"

# --no-cache-prompt: both clients send the same prompts, and a cached prompt skips its prefill
# (TTFT 25 ms instead of 390 here): every request prefills its whole prompt.
"$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" -tb "$THREADS" --parallel "$PARALLEL" -c $((1024 * PARALLEL)) \
  --no-cache-prompt --host 127.0.0.1 --port "$PORT" --no-webui > "$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2> /dev/null || true; wait $SERVER 2> /dev/null || true' EXIT
for _ in $(seq 1 600); do curl -sf "$URL/health" > /dev/null 2>&1 && break; sleep 0.1; done
name=$(curl -s "$URL/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')

for round in $(seq 1 "$ROUNDS"); do
  for c in $LEVELS; do
    dir="$OUT/aiperf-c$c-r$round"
    rm -rf "$dir"
    "$AIPERF" profile --model "$name" --url "$URL" --endpoint-type chat --streaming \
      --concurrency "$c" --request-count $((c * 6)) --warmup-request-count "$c" \
      --synthetic-input-tokens-mean "$ISL" --synthetic-input-tokens-stddev 0 \
      --output-tokens-mean "$OSL" --output-tokens-stddev 0 --extra-inputs ignore_eos:true \
      --tokenizer "$TOKENIZER" --use-server-token-count --random-seed 7 \
      --export-level raw --artifact-dir "$dir" --ui-type none > "$dir.log" 2>&1 \
      || { echo "endpoint_accuracy: aiperf failed at $c users (see $dir.log)" >&2; tail -20 "$dir.log" >&2; }
    # The same prompts for ours: AIPerf's, one a line.
    [ -f "$OUT/prompts.txt" ] || python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
for s in d["data"]:
    for p in s["payloads"]:
        print(" ".join(p["messages"][-1]["content"].split()))' "$dir/inputs.json" > "$OUT/prompts.txt"
    target/release/tokenometer bench --endpoint "$URL/v1" --endpoint-model "$name" --concurrency "$c" \
      --max-tokens "$OSL" --ignore-eos --prompts "$OUT/prompts.txt" --duration "$DURATION" --json \
      > "$OUT/ours-c$c-r$round.json" 2> "$OUT/ours-c$c-r$round.log" \
      || { echo "endpoint_accuracy: ours failed at $c users" >&2; cat "$OUT/ours-c$c-r$round.log" >&2; }
    echo "done: $c users, round $round"
  done
done
python3 tests/bench/endpoint_accuracy_summary.py "$OUT" "$OSL"
