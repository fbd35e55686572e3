#!/usr/bin/env python3
"""Summarise tests/bench/serve_aiperf.sh's AIPerf runs: for each server and concurrency, AIPerf's
aggregate output tok/s, per-user tok/s (its definition: (tokens - 1) over first to last token),
TTFT p50/p99 and errors, beside the servers' own `timings` read from the raw responses (the
chunk that carries them): per-user decode tok/s made from predicted_n and predicted_ms with the
same definition as AIPerf's, and prompt_ms (the prefill, no queueing); and, where the server's
/metrics has a TTFT histogram (ours does, queueing included; llama-server's has none), its mean
over the profiling phase as AIPerf scraped it, beside AIPerf's own TTFT mean. Usage: summary.py
OUT_DIR"""
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def server_timings(raw):
    rates, prompts = [], []
    for line in raw.open():
        record = json.loads(line)
        for response in reversed(record.get("responses", [])):
            found = None
            for packet in response.get("packets", []):
                value = packet.get("value", "")
                if '"timings"' in value:
                    found = json.loads(value)["timings"]
            if found:
                n, ms = found["predicted_n"], found["predicted_ms"]
                if n > 1 and ms > 0:
                    rates.append((n - 1) / ms * 1e3)
                prompts.append(found["prompt_ms"])
                break
    return rates, prompts


def server_ttft_mean_ms(export):
    """The mean of the server's own TTFT histogram (sum / count) over AIPerf's profiling phase."""
    if not export.exists():
        return None
    metrics = json.loads(export.read_text()).get("metrics", {})
    for name, metric in metrics.items():
        if name.endswith("time_to_first_token_seconds") and metric.get("type") == "histogram":
            stats = metric["series"][0]["stats"]
            if stats.get("count"):
                return stats["sum"] / stats["count"] * 1e3
    return None


def main(out):
    out = Path(out)
    rows = defaultdict(list)
    for run in sorted(out.glob("*-c*-r*")):
        if not run.is_dir() or not (run / "profile_export_aiperf.json").exists():
            continue
        server, c, r = run.name.rsplit("-", 2)
        d = json.loads((run / "profile_export_aiperf.json").read_text())
        errors = (d.get("error_request_count") or {}).get("avg", 0) or 0
        rates, prompts = server_timings(run / "profile_export_raw.jsonl")
        row = {
            "aggregate": d["output_token_throughput"]["avg"],
            "per_user_p50": d["output_token_throughput_per_user"]["p50"],
            "ttft_p50": d["time_to_first_token"]["p50"],
            "ttft_p99": d["time_to_first_token"]["p99"],
            "ttft_mean": d["time_to_first_token"]["avg"],
            "server_ttft_mean": server_ttft_mean_ms(run / "server_metrics_export.json"),
            "requests": d["request_count"]["avg"],
            "errors": errors,
            "server_per_user_p50": statistics.median(rates) if rates else None,
            "server_prompt_ms_p50": statistics.median(prompts) if prompts else None,
        }
        rows[(server, int(c[1:]))].append(row)
        fmt = lambda v: "-" if v is None else f"{v:.1f}"
        print(f"{run.name}: aggregate {fmt(row['aggregate'])} tok/s, per-user p50 {fmt(row['per_user_p50'])} "
              f"(server {fmt(row['server_per_user_p50'])}), TTFT p50 {fmt(row['ttft_p50'])} p99 {fmt(row['ttft_p99'])} ms "
              f"(server prompt_ms p50 {fmt(row['server_prompt_ms_p50'])}), TTFT mean {fmt(row['ttft_mean'])} ms "
              f"(server /metrics {fmt(row['server_ttft_mean'])}), {row['requests']:.0f} requests, {errors:.0f} errors")
    print()
    print("| server | users | aggregate tok/s | per-user tok/s p50 (AIPerf) | per-user (server's timings) | TTFT p50 ms | TTFT p99 ms | server prompt_ms p50 | TTFT mean ms (AIPerf) | TTFT mean ms (server's /metrics) | errors |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (server, c), runs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0] != "ours")):
        def cell(key):
            values = [r[key] for r in runs if r[key] is not None]
            return ", ".join(f"{v:.1f}" for v in values) if values else "-"
        errors = sum(r["errors"] for r in runs)
        name = {"ours": "tokenometer serve", "before": "tokenometer serve (before)"}.get(server, "llama-server")
        print(f"| {name} | {c} | {cell('aggregate')} | {cell('per_user_p50')} | {cell('server_per_user_p50')} | "
              f"{cell('ttft_p50')} | {cell('ttft_p99')} | {cell('server_prompt_ms_p50')} | {cell('ttft_mean')} | "
              f"{cell('server_ttft_mean')} | {errors:.0f} |")




def medians(out):
    """Each server's median aggregate tok/s at each level, and the ratios the issue asks for."""
    out = Path(out)
    agg = defaultdict(list)
    for run in sorted(out.glob("*-c*-r*")):
        if run.is_dir() and (run / "profile_export_aiperf.json").exists():
            server, c, _ = run.name.rsplit("-", 2)
            d = json.loads((run / "profile_export_aiperf.json").read_text())
            agg[(server, int(c[1:]))].append(d["output_token_throughput"]["avg"])
    med = {k: statistics.median(v) for k, v in agg.items()}
    print()
    print("| server | users | median aggregate tok/s (rounds) | over its own 1 user | over llama-server's |")
    print("| --- | --- | --- | --- | --- |")
    for (server, c), m in sorted(med.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        one = med.get((server, 1))
        llama = med.get(("llama", c))
        ratio = lambda d: f"{m / d:.2f}x" if d else "-"
        print(f"| {server} | {c} | {m:.1f} ({len(agg[(server, c)])}) | {ratio(one)} | {ratio(llama)} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
    medians(sys.argv[1])
