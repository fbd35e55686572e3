#!/usr/bin/env bash
# The architectures of loading/arch/ on wgpu against the CPU, on a lent GPU machine: the real shapes
# of Qwen2.5-0.5B, Qwen3-0.6B and Llama-3.2-1B with seeded random weights (`synth --q8`, the real
# vocabularies `make models` fetches into models/cache/gguf-vocab/: a device run carries that
# folder), for each: greedy text on wgpu against the CPU's (32
# tokens, as stored and re-encoded f32), decode (64 tokens) and prefill of 500 seeded words, 3
# runs after a warm-up. Needs a release binary (BIN) and nothing else beside the checkout.
# Usage: [BIN=...] tests/bench/gpu_architectures.sh
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/tokenometer}; T=${T:-target/gpu}; mkdir -p "$T"
words=(the dragon learned to read books in the village by the sea where every child and every fisherman told stories about storms ships gold and long winters)
RANDOM=1; long=""  # in this shell, not a subshell: bash re-seeds RANDOM in each subshell
for _ in $(seq 500); do long+="${words[RANDOM % ${#words[@]}]} "; done
for s in qwen2.5-0.5B:qwen2 qwen3-0.6B:qwen2 llama3.2-1B:llama-bpe; do
  sh=${s%:*}; M=$T/$sh-q8.gguf
  $BIN synth --shape $sh --vocab models/cache/gguf-vocab/ggml-vocab-${s#*:}.gguf --q8 --out $M 2>&1 | tail -1
  for q in stored f32; do
    cpu=$(timeout 120 $BIN generate --backend cpu --model $M --quant $q --raw --prompt "The capital of France is" --max-tokens 32 2>/dev/null)
    gpu=$(timeout 120 $BIN generate --backend wgpu --model $M --quant $q --raw --prompt "The capital of France is" --max-tokens 32 2>/dev/null)
    [ -n "$cpu" ] && [ "$cpu" = "$gpu" ] && echo "$sh $q: same text on wgpu and cpu (${#cpu} chars)" || echo "$sh $q: texts differ: cpu ${cpu:0:80} | wgpu ${gpu:0:80}"
  done
  for b in wgpu cpu; do
    echo "-- $sh $b decode: $(timeout 200 $BIN bench --model $M --backend $b --runs 3 --max-tokens 64 2>&1 | grep -E '^decode tok' )"
    echo "-- $sh $b prefill: $(timeout 200 $BIN bench --model $M --backend $b --runs 3 --max-tokens 8 --prompt "$long" 2>&1 | grep -E '^(conditions|TTFT|prefill tok)' | sed 's/conditions:.*prompt \([0-9]*\) tok.*/prompt \1 tok;/' | tr '\n' ' ')"
  done
done
