#!/usr/bin/env bash
# Two builds of the CLI on the CPU at all of a machine's cores, interleaved (OLD, BIN, OLD, BIN...):
# decode of 128 tokens after bench's default prompt, and prefill of a long prompt (500 random words
# of a fixed list, seeded), on SmolLM2-135M's shape with seeded random weights (`synth`, as
# tests/bench/gpu.sh makes it: decode and prefill cost depends on shapes, not values). For hosts
# with more cores than the project's 2 (a lent device machine), where a change to how work is split
# over threads may behave otherwise. Needs target/e2e/smollm2-vocab.gguf.
# Usage: OLD=old-binary [BIN=new-binary] [ROUNDS=3] [QUANTS="stored q4"] tests/bench/cpu_before_after.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/tokenometer}
OLD=${OLD:?OLD= the build to compare against}
T=${T:-target/gpu}
mkdir -p "$T"
M=$T/smollm2-135m-synth-q8_0.gguf
[ -f "$M" ] || "$BIN" synth --shape smollm2-135M --q8 --vocab target/e2e/smollm2-vocab.gguf --out "$M" || exit 1
grep -m1 "model name" /proc/cpuinfo; nproc
words=(the dragon learned to read books in the village by the sea where every child and every
  fisherman told stories about storms ships gold and long winters)
RANDOM=1
long=''  # in this shell, not a subshell: bash re-seeds RANDOM in each subshell
for _ in $(seq 500); do long+="${words[RANDOM % ${#words[@]}]} "; done
figure() { # label, bench args...: the medians (min, max) of the figures asked for
  local label=$1; shift
  echo "$label: $(timeout 240 "$@" 2>&1 | awk '/^conditions/ {match($0, /on cpu \[[^]]*\]/);
    c = substr($0, RSTART, RLENGTH); match($0, /prompt [0-9]+ tok/); p = substr($0, RSTART, RLENGTH)}
    /^(TTFT ms|prefill tok|decode tok)/ {printf "%s %s %s (%s-%s); ", $1, $2, $3, $4, $5}
    END {print c ", " p}')"
}
for round in $(seq "${ROUNDS:-3}"); do
  for q in ${QUANTS:-stored q4}; do
    for b in "$OLD" "$BIN"; do
      figure "round $round $q decode $b" "$b" bench --model "$M" --quant "$q" --runs 3 --max-tokens 128
      figure "round $round $q prefill $b" "$b" bench --model "$M" --quant "$q" --runs 3 --max-tokens 8 \
        --prompt "$long"
    done
  done
done
