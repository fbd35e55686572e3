#!/usr/bin/env bash
# Native decode speed, one thread, tokenometer against llama.cpp (llama-cpp-python), on SmolLM2 as
# shipped (Q4_1) and re-encoded (F32, Q8_0, Q4_0: `tokenometer convert`), interleaved round by
# round so that both see the same machine. Each round: llama.cpp 3 runs, then tokenometer 3 runs
# (bench's median), per file. Needs `make models`, `cargo build --release` and
#   pip install llama-cpp-python==0.3.36 numpy
# Usage: [THREADS=N] tests/bench/native_vs_llama_cpp.sh [ROUNDS] [gemma]
# THREADS (default 1): both engines' threads (`--threads`, llama.cpp's n_threads).
# With `gemma`: Gemma 3 270M as shipped (Q4_K_M; `make models`), on a raw prompt (it has no chat
# template), with BOS, on both sides.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
export THREADS=${THREADS:-1}
if [ "${2:-}" = gemma ]; then
  f=models/cache/gemma3-270m/gemma-3-270m-q4_k_m.gguf
  prompt="Once upon a time, in a small village by the sea, there lived a dragon who"
  for round in $(seq "$rounds"); do
    python3 tests/bench/llama_cpp_decode.py "$f" 3 "$prompt" | awk -v r="$round" '{print "round " r ": " $0}'
    target/release/tokenometer bench --model "$f" --prompt "$prompt" --max-tokens 64 --runs 3 --threads "$THREADS" 2>&1 \
      | awk -v r="$round" -v f="$f" '/^decode tok\/s/ {print "round " r ": tokenometer " f " threads " ENVIRON["THREADS"] " decode median " $3 " min " $4 " max " $5}'
  done
  exit 0
fi
src=models/cache/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p target/real
for q in f32 q8 q4; do
  [ -f target/real/smollm2-$q.gguf ] || target/release/tokenometer convert --model $src --to $q --out target/real/smollm2-$q.gguf
done
prompt="Tell me a long story about a dragon who learns to read."
for round in $(seq "$rounds"); do
  for f in $src target/real/smollm2-f32.gguf target/real/smollm2-q8.gguf target/real/smollm2-q4.gguf; do
    python3 tests/bench/llama_cpp_decode.py "$f" 3 | awk -v r="$round" '{print "round " r ": " $0}'
    target/release/tokenometer bench --model "$f" --prompt "$prompt" --max-tokens 64 --runs 3 --threads "$THREADS" 2>&1 \
      | awk -v r="$round" -v f="$f" '/^decode tok\/s/ {print "round " r ": tokenometer " f " threads " ENVIRON["THREADS"] " decode median " $3 " min " $4 " max " $5}'
  done
done
