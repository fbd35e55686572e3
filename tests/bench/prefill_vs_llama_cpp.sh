#!/usr/bin/env bash
# Prefill and decode at a depth, natively, tokenometer against llama.cpp's own `llama-bench`
# (issue 42), interleaved round by round so that both see the same machine. Each round, per file
# and thread count: `llama-bench -p 512 -n 0` (pp512), `llama-bench -p 0 -n 64 -d 530` (tg64 after
# 530 tokens), then `tokenometer bench` on a ~530-token prompt with 64 output tokens (medians of
# 3 runs after its warm-up), and, where BEFORE names an older build of tokenometer, that one too.
# Files: SmolLM2 135M as shipped (Q4_1) and re-encoded (F32, Q8_0: `tokenometer convert`), and
# Gemma 3 270M as shipped (Q4_K_M). Needs `make models`, `cargo build --release` and llama.cpp's
# `llama-bench` (README: "References"), its path in LLAMA_BENCH.
# Usage: LLAMA_BENCH=path/to/llama-bench [BEFORE=path/to/old/tokenometer] [THREADS="1 2"] [FILES="a.gguf b.gguf"]
#        tests/bench/prefill_vs_llama_cpp.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-2}
threads=${THREADS:-1 2}
bench=${LLAMA_BENCH:?set LLAMA_BENCH to the path of llama-bench}
src=models/cache/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf
gemma=models/cache/gemma3-270m/gemma-3-270m-q4_k_m.gguf
mkdir -p target/real
for q in f32 q8; do
  [ -f target/real/smollm2-$q.gguf ] || target/release/tokenometer convert --model $src --to $q --out target/real/smollm2-$q.gguf
done
# About 530 tokens with SmolLM2's chat template: the same 500 words each time.
prompt=$(python3 -c '
import random
random.seed(1)
words = "the dragon learned to read books in the village by the sea where every child and every fisherman told stories about storms ships gold and long winters".split()
print(" ".join(random.choice(words) for _ in range(500)))')
ours() { # binary label file threads
  "$1" bench --model "$3" --prompt "$prompt" --max-tokens 64 --runs 3 --threads "$4" 2>&1 |
    awk -v r="$round" -v l="$2" -v f="$3" -v t="$4" '
      /^conditions:/ { match($0, /prompt [0-9]+ tok/); p = substr($0, RSTART + 7, RLENGTH - 11) }
      /^prefill tok\/s/ { pp = $3 " (" $4 "-" $5 ")" }
      /^decode tok\/s/ { tg = $3 " (" $4 "-" $5 ")" }
      END { print "round " r ": " l " " f " threads " t " prompt " p " prefill " pp " decode " tg }'
}
for round in $(seq "$rounds"); do
  for f in ${FILES:-target/real/smollm2-f32.gguf target/real/smollm2-q8.gguf $src $gemma}; do
    for t in $threads; do
      "$bench" -m "$f" -p 512 -n 0 -t "$t" -r 3 -o csv 2>/dev/null | awk -F, -v r="$round" -v f="$f" -v t="$t" \
        'NR > 1 { gsub(/"/, ""); print "round " r ": llama.cpp " f " threads " t " pp512 " $(NF-1) " +- " $NF }'
      "$bench" -m "$f" -p 0 -n 64 -d 530 -t "$t" -r 3 -o csv 2>/dev/null | awk -F, -v r="$round" -v f="$f" -v t="$t" \
        'NR > 1 { gsub(/"/, ""); print "round " r ": llama.cpp " f " threads " t " tg64@d530 " $(NF-1) " +- " $NF }'
      ours target/release/tokenometer tokenometer "$f" "$t"
      [ -z "${BEFORE:-}" ] || ours "$BEFORE" before "$f" "$t"
    done
  done
done
