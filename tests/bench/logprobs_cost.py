#!/usr/bin/env python3
"""What keeping each generated token's log probability and 5 alternatives costs a decode step
(the page keeps them in every run, for the token inspector): `generate` without and with
`--logprobs 5`, interleaved A B A B on one machine, the same greedy text, one thread by default.

    python3 tests/bench/logprobs_cost.py [--rounds 5] [--threads 1] [--max-tokens 128] [--backend cpu] MODEL...

Prints each model's median decode ms a token either way and their ratio (docs/measurements.md)."""
import argparse
import json
import statistics
import subprocess

parser = argparse.ArgumentParser()
parser.add_argument("models", nargs="+")
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--max-tokens", type=int, default=128)
parser.add_argument("--backend", default="cpu", help="cpu or wgpu (lavapipe here: its ratio says nothing of a real GPU)")
parser.add_argument("--binary", default="target/release/tokenometer")
args = parser.parse_args()


def decode_ms_a_token(model, extra):
    out = subprocess.run(
        [args.binary, "generate", "--model", model, "--prompt", "Tell me a long story about a dragon.",
         "--max-tokens", str(args.max_tokens), "--threads", str(args.threads), "--backend", args.backend, "--json", *extra],
        check=True, capture_output=True, text=True).stdout
    report = json.loads(out.strip().splitlines()[-1])["report"]
    return 1000.0 / report["decode_tps"]


for model in args.models:
    plain, kept = [], []
    for _ in range(args.rounds):
        plain.append(decode_ms_a_token(model, []))
        kept.append(decode_ms_a_token(model, ["--logprobs", "5"]))
    ratios = [k / p for p, k in zip(plain, kept)]
    print(f"{model} on {args.backend}: decode ms a token, median of {args.rounds}, {args.threads} thread(s): "
          f"without {statistics.median(plain):.3f}, with top 5 kept {statistics.median(kept):.3f}; "
          f"with/without per round {' '.join(f'{r:.3f}' for r in ratios)} "
          f"(median {statistics.median(ratios):.3f})")
