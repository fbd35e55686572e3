#!/usr/bin/env bash
# Two builds of the CLI on the GPU wgpu finds (here Mesa's lavapipe, natively), interleaved (OLD,
# BIN, OLD, BIN...): decode tok/s (bench: 3 runs after a warm-up), the host's microseconds a
# dispatch and the submits, buffers and bind groups of the timed runs, and the GPU memory the
# model holds, on stories260K f32 (a step of 22 tiny dispatches: host-bound) and on the 2-layer
# SmolLM2-135M Q8_0 of the page's tests (target/e2e/, `make` writes it: more arithmetic), then the
# ratio BIN/OLD of each round's decode. For the issue that put the GPU on burn (OLD= the build of
# 0dfe023, wgpu directly). Nothing else beside the checkout.
# Usage: OLD=old-binary [BIN=new-binary] [ROUNDS=5] [TOKENS=64] tests/bench/gpu_before_after.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/tokenometer}
OLD=${OLD:?OLD= the build to compare against}
S=models/stories260K
SMOL=target/e2e/smollm2-135m-2layers-q8_0.gguf
[ -f "$SMOL" ] || make "$SMOL" >/dev/null || exit 1
grep -m1 "model name" /proc/cpuinfo; nproc
"$BIN" generate --backend wgpu --model $S/stories260K.bin --tokenizer $S/tok512.bin --prompt x \
  --max-tokens 1 2>&1 >/dev/null | grep -m1 -i "wgpu\|adapter" || true
run() { # binary, bench args...: "tps host_us submits buffers bind_groups memory_mb"
  local b=$1; shift
  timeout 600 "$b" bench --backend wgpu --runs 3 --max-tokens "${TOKENS:-64}" "$@" 2>&1 | awk '
    /^decode tok\/s/ {tps = $3}
    /^GPU work/ {for (i = 1; i <= NF; i++) {if ($(i + 1) == "submits,") s = $i; if ($(i + 1) == "buffers") bu = $i;
      if ($(i + 1) == "bind") bg = $i; if ($i == "spent") h = $(i + 1)}}
    /^GPU memory held/ {m = $7}
    END {printf "%s %s %s %s %s %s\n", tps, h, s, bu, bg, (m == "" ? "-" : m)}'
}
for model in stories260K smollm2; do
  case $model in
    stories260K) args=(--model $S/stories260K.bin --tokenizer $S/tok512.bin --quant f32) ;;
    smollm2) args=(--model "$SMOL") ;;
  esac
  echo; echo "== $model: round, build, decode tok/s, host us a dispatch, submits, buffers, bind groups (timed runs), GPU MB held"
  ratios=()
  for round in $(seq "${ROUNDS:-5}"); do
    old=$(run "$OLD" "${args[@]}"); new=$(run "$BIN" "${args[@]}")
    echo "$round old: $old"; echo "$round new: $new"
    ratios+=("$(awk -v a="${old%% *}" -v b="${new%% *}" 'BEGIN {printf "%.3f", b / a}')")
  done
  echo "$model decode new/old by round: ${ratios[*]}"
done
