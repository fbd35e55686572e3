#!/usr/bin/env bash
# Native wgpu on a real GPU (Vulkan): does it give the CPU's text, and how fast is it, beside the
# CPU on all its cores, on the same machine. Needs a release binary (BIN, default
# target/release/tokenometer) and target/e2e/smollm2-vocab.gguf (`make` writes it for the page
# tests); nothing else beside the checkout.
#  1. stories260K (shipped), greedy, 200 tokens, f32 / Q8_0 / Q4_0: wgpu's text against the CPU's.
#  2. SmolLM2-135M's shape with seeded random weights (`synth`: 30 layers, Q8_0 blocks, SmolLM2's
#     tokenizer): the same check on 64 tokens, then decode speed (bench: 3 runs after a warm-up,
#     128 tokens) on wgpu and on the CPU, stored Q8_0 and re-encoded Q4_0 / f32, and wgpu's
#     aggregate and per-user tok/s by concurrency; prefill of a long prompt on both.
# Random weights cost what real ones do (the same bytes read, the same work); their text means
# nothing, and near-ties between logits may part the two backends' greedy texts late.
# With OLD=another build, that build's wgpu decode against BIN's, interleaved (before/after);
# and the same by concurrency (4 and 16 users); QUICK=1 leaves out the table of wgpu against the CPU.
# Usage: [BIN=...] [OLD=...] [T=folder for the synthesized model] tests/bench/gpu.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/tokenometer}
T=${T:-target/gpu}
mkdir -p "$T"
S=models/stories260K
step() { echo; echo "== $*"; }

same_text() { # what, args...
  local what=$1; shift
  local cpu wgpu
  cpu=$(timeout 300 "$BIN" generate --backend cpu "$@" 2>/dev/null)
  wgpu=$(timeout 300 "$BIN" generate --backend wgpu "$@" 2>"$T/wgpu.err")
  if [ -z "$wgpu" ]; then
    echo "$what: wgpu gave no text: $(tail -3 "$T/wgpu.err")"
  elif [ "$cpu" = "$wgpu" ]; then
    echo "$what: same text on wgpu and cpu (${#cpu} characters)"
  else
    local n=0
    while [ "${cpu:$n:1}" = "${wgpu:$n:1}" ]; do n=$((n + 1)); done
    echo "$what: texts part at character $n of ${#cpu}"
    echo "  cpu:  ${cpu:0:300}"
    echo "  wgpu: ${wgpu:0:300}"
  fi
  grep -m1 -i "adapter\|wgpu" "$T/wgpu.err" || true
}

step "the GPU and the CPU"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
grep -m1 "model name" /proc/cpuinfo; nproc
grep -o -m1 -w "avx512_vnni\|avx_vnni" /proc/cpuinfo | sort -u | tr '\n' ' '; echo

step "stories260K, greedy, 200 tokens"
for q in f32 q8 q4; do
  same_text "stories260K $q" --model $S/stories260K.bin --tokenizer $S/tok512.bin --quant $q \
    --prompt "Once upon a time" --max-tokens 200
done

step "SmolLM2-135M's shape, random weights"
[ -f "$T/smollm2-135m-synth-q8_0.gguf" ] || "$BIN" synth --shape smollm2-135M --q8 \
  --vocab target/e2e/smollm2-vocab.gguf --out "$T/smollm2-135m-synth-q8_0.gguf" || exit 1
M=$T/smollm2-135m-synth-q8_0.gguf
same_text "SmolLM2 shape q8_0, 64 tokens" --model "$M" --raw --prompt "Once upon a time" --max-tokens 64

if [ -n "${OLD:-}" ]; then
  step "before/after on wgpu: OLD=$OLD against $BIN, interleaved, bench 3 runs after a warm-up, 128 tokens"
  for round in 1 2 3; do
    for q in stored f32; do
      for b in "$OLD" "$BIN"; do
        echo "round $round $b $q: $(timeout 120 "$b" bench --model "$M" --backend wgpu --quant $q --runs 3 \
          --max-tokens 128 2>&1 | awk '/^decode tok\/s/ {print "decode tok/s median " $3 " min " $4 " max " $5}')"
      done
    done
  done
  step "before/after on wgpu by concurrency (stored q8_0, 64 tokens each, burst), interleaved"
  echo "columns: users, aggregate tok/s, per-user tok/s p50, min, TTFT p50, p99 (ms)"
  for round in 1 2 3; do
    for b in "$OLD" "$BIN"; do
      echo "-- round $round $b"
      timeout 150 "$b" bench --model "$M" --backend wgpu --max-tokens 64 --concurrency 4,16 2>&1 |
        awk '$1 ~ /^[0-9]+$/ {print $1, $2, $3, $4, $5, $6}'
    done
  done
fi

[ -n "${QUICK:-}" ] || step "decode speed: 3 runs after a warm-up, 128 tokens, bench's default prompt"
[ -n "${QUICK:-}" ] || for q in stored q4 f32; do
  for backend in wgpu cpu; do
    echo "-- $backend, quant $q"
    timeout 240 "$BIN" bench --model "$M" --backend "$backend" --quant "$q" --runs 3 \
      --max-tokens 128 2>&1 | grep -v "^$" | tail -12
  done
done

step "prefill: 500 seeded random words (the tokens printed), 8 tokens out, 3 runs after a warm-up"
words=(the dragon learned to read books in the village by the sea where every child and every
  fisherman told stories about storms ships gold and long winters)
RANDOM=1
long=''  # in this shell, not a subshell: bash re-seeds RANDOM in each subshell
for _ in $(seq 500); do long+="${words[RANDOM % ${#words[@]}]} "; done
for q in stored q4 f32; do
  for backend in wgpu cpu; do
    echo "-- $backend, quant $q: $(timeout 240 "$BIN" bench --model "$M" --backend "$backend" --quant "$q" \
      --runs 3 --max-tokens 8 --prompt "$long" 2>&1 | awk '/^conditions/ {match($0, /prompt [0-9]+ tok/);
      p = substr($0, RSTART, RLENGTH)} /^(TTFT ms|prefill tok)/ {printf "%s %s median %s min %s max %s; ",
      $1, $2, $3, $4, $5} END {print p}')"
  done
done

step "wgpu by concurrency (stored q8_0, 64 tokens each)"
timeout 300 "$BIN" bench --model "$M" --backend wgpu --max-tokens 64 --concurrency 1,4,16,64 2>&1 | tail -12
