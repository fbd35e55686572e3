#!/usr/bin/env bash
# Speculative decoding natively, interleaved round by round: plain decoding, prompt lookup, and
# SmolLM2's own Q4_1 file drafting, on SmolLM2 Q8_0 (`tokenometer convert`), with a grounded prompt
# (copy a given paragraph) and a creative one. Each round, each mode: `bench --runs 3` (medians).
# Needs `make models` and `cargo build --release`.
# Usage: [THREADS=N] [MAX_TOKENS=96] tests/bench/speculate.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
threads=${THREADS:-1}
max=${MAX_TOKENS:-96}
src=models/cache/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf
model=target/real/smollm2-q8.gguf
mkdir -p target/real
[ -f $model ] || target/release/tokenometer convert --model $src --to q8 --out $model
paragraph="The lighthouse keeper climbed the narrow stairs every evening at dusk. He trimmed the wick, polished the great lens, and watched the ships pass safely beyond the rocks. In forty years he never missed a single night, not even during the storm that took the old pier."
grounded="Repeat this paragraph exactly: $paragraph"
creative="Write a short story about a dragon who learns to read."
for round in $(seq "$rounds"); do
  for kind in grounded creative; do
    prompt=$([ $kind = grounded ] && echo "$grounded" || echo "$creative")
    for mode in plain lookup draft; do
      case $mode in
        plain) spec=() ;;
        lookup) spec=(--speculate lookup) ;;
        draft) spec=(--speculate "draft:$src") ;;
      esac
      target/release/tokenometer bench --model $model --prompt "$prompt" --max-tokens "$max" --runs 3 \
        --threads "$threads" "${spec[@]}" 2>&1 | awk -v r="$round" -v k="$kind" -v m="$mode" \
        '/^decode tok\/s|^acceptance|^passes/ {print "round " r " " k " " m ": " $0}'
    done
  done
done
