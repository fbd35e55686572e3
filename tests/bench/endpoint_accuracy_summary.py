#!/usr/bin/env python3
"""Summarise tests/bench/endpoint_accuracy.sh: per level and round, our TTFT p50, per-user decode
tok/s p50 and aggregate tok/s beside AIPerf's on the same server and load, and beside the server's
own timings (llama.cpp's predicted_per_second counts the first token: n over the span; the meter
and AIPerf count the n - 1 after it, so it is scaled by (n - 1) / n). Usage: summary.py OUT OSL"""
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from serve_aiperf_summary import server_timings  # noqa: E402


def main(out, osl):
    out, osl = Path(out), int(osl)
    rows = []
    for ours in sorted(out.glob("ours-c*-r*.json")):
        c, r = ours.stem.split("-")[1:]
        level = json.loads(ours.read_text())[0]
        aiperf_dir = out / f"aiperf-{c}-{r}"
        d = json.loads((aiperf_dir / "profile_export_aiperf.json").read_text())
        rates, _ = server_timings(aiperf_dir / "profile_export_raw.jsonl")
        server_ours = level.get("server_tps_p50")
        rows.append({
            "users": int(c[1:]), "round": int(r[1:]),
            "ttft": (level["ttft_ms_p50"], d["time_to_first_token"]["p50"]),
            "per_user": (level["per_user_tps_p50"], d["output_token_throughput_per_user"]["p50"]),
            "aggregate": (level["aggregate_tps"], d["output_token_throughput"]["avg"]),
            "server": (server_ours * (osl - 1) / osl if server_ours else None,
                       statistics.median(rates) if rates else None),
            "requests": (level["requests"], d["request_count"]["avg"]),
            "failed": level["requests"] - level["requests_completed"],
            "counts": level["conditions"]["token_counts"],
        })
    f = lambda v: "-" if v is None else f"{v:.1f}"
    ratio = lambda a, b: "-" if not a or not b else f"{a / b:.3f}"
    print("| users | round | TTFT p50 ms: ours / AIPerf (ratio) | per-user tok/s p50: ours / AIPerf / server's (ours over server's) | aggregate tok/s: ours / AIPerf (ratio) | requests: ours / AIPerf | counts |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in sorted(rows, key=lambda r: (r["users"], r["round"])):
        t, p, a, s, q = row["ttft"], row["per_user"], row["aggregate"], row["server"], row["requests"]
        print(f"| {row['users']} | {row['round']} | {f(t[0])} / {f(t[1])} ({ratio(*t)}) | "
              f"{f(p[0])} / {f(p[1])} / {f(s[0])} ({ratio(p[0], s[0])}) | {f(a[0])} / {f(a[1])} ({ratio(*a)}) | "
              f"{q[0]:.0f} ({row['failed']} failed) / {q[1]:.0f} | {row['counts']} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
