#!/usr/bin/env bash
# Prefill and decode from an empty context, natively, tokenometer against llama.cpp timed as its
# users time it: its own `llama-bench` (`-p 512 -n 128`: pp512, and tg128 from depth 0), beside
# `tokenometer bench` on the same file and threads: a ~512-token prompt (prefill tok/s) and, apart,
# a 7-token prompt with 128 output tokens (decode tok/s near depth 0), medians of 3 runs after its
# warm-up. Interleaved round by round, per file and thread count, so that both see the same
# machine. Files: SmolLM2 135M as shipped (Q4_1) and re-encoded (F32, Q8_0, Q4_0: `tokenometer
# convert`), and Gemma 3 270M as shipped (Q4_K_M), raw prompts (no chat template) on both sides.
# Needs `make models`, `cargo build --release` and llama.cpp's `llama-bench` (README:
# "References"), its path in LLAMA_BENCH. (Before 2026-11-27 this script timed llama.cpp through
# llama-cpp-python: a Python call, a logits copy and a numpy argmax a token.)
# Usage: LLAMA_BENCH=path/to/llama-bench [THREADS="1 2"] [FILES="a.gguf b.gguf"]
#        tests/bench/native_vs_llama_cpp.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-1}
threads=${THREADS:-1 2}
bench=${LLAMA_BENCH:?set LLAMA_BENCH to the path of llama-bench}
src=models/cache/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf
gemma=models/cache/gemma3-270m/gemma-3-270m-q4_k_m.gguf
mkdir -p target/real
for q in f32 q8 q4; do
  [ -f target/real/smollm2-$q.gguf ] || target/release/tokenometer convert --model $src --to $q --out target/real/smollm2-$q.gguf
done
# About 512 tokens, raw: the same 510 words each time.
long=$(python3 -c '
import random
random.seed(1)
words = "the dragon learned to read books in the village by the sea where every child and every fisherman told stories about storms ships gold and long winters".split()
print(" ".join(random.choice(words) for _ in range(510)))')
short="Once upon a time, there was"
ours() { # file threads
  "target/release/tokenometer" bench --model "$1" --raw --prompt "$long" --max-tokens 2 --runs 3 --threads "$2" 2>&1 |
    awk -v r="$round" -v f="$1" -v t="$2" '
      /^conditions:/ { match($0, /prompt [0-9]+ tok/); p = substr($0, RSTART + 7, RLENGTH - 11) }
      /^prefill tok\/s/ { print "round " r ": tokenometer " f " threads " t " prefill (prompt " p ") " $3 " (" $4 "-" $5 ")" }'
  "target/release/tokenometer" bench --model "$1" --raw --prompt "$short" --max-tokens 128 --runs 3 --threads "$2" 2>&1 |
    awk -v r="$round" -v f="$1" -v t="$2" '
      /^decode tok\/s/ { print "round " r ": tokenometer " f " threads " t " decode (128 from depth 7) " $3 " (" $4 "-" $5 ")" }'
}
for round in $(seq "$rounds"); do
  for f in ${FILES:-target/real/smollm2-f32.gguf target/real/smollm2-q8.gguf target/real/smollm2-q4.gguf $src $gemma}; do
    for t in $threads; do
      "$bench" -m "$f" -p 512 -n 128 -t "$t" -r 3 -o csv 2>/dev/null | awk -F, -v r="$round" -v f="$f" -v t="$t" '
        NR == 1 { for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); col[$i] = i } }
        NR > 1 { gsub(/"/, ""); test = $col["n_prompt"] > 0 ? "pp" $col["n_prompt"] : "tg" $col["n_gen"];
                 print "round " r ": llama.cpp " f " threads " t " " test " " $col["avg_ts"] " +- " $col["stddev_ts"] }'
      ours "$f" "$t"
    done
  done
done
