#!/usr/bin/env python3
"""What a long prompt joining costs the users already decoding, against a running server.

Usage: tests/bench/long_prompt_joins.py PORT [WORDS]

Three short chat requests stream (greedy, 400 tokens each, `ignore_eos`). 1.5 s later a prompt
of WORDS words (default 1500, about 1,500 tokens) joins, asking for 8 tokens. The script prints
the long request's TTFT and `timings`, and each short stream's largest and median gap between
content chunks after the long request was sent. Only 127.0.0.1 is contacted. Never part of
`make test`. docs/measurements.md has its figures ("One prompt a step").
"""

import http.client
import json
import sys
import threading
import time

PORT = int(sys.argv[1])
WORDS = int(sys.argv[2]) if len(sys.argv) > 2 else 1500
VOCAB = "the dragon learned to read books in the village by the sea where every child told stories"


def model_id():
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    c.request("GET", "/v1/models")
    return json.load(c.getresponse())["data"][0]["id"]


def stream(model, prompt, max_tokens, out, name):
    """Send one streamed chat request; keep when it was sent, each content chunk's arrival, and
    the last chunk's `timings`."""
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=300)
    body = json.dumps({
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
        "temperature": 0,
        "ignore_eos": True,
    })
    sent = time.time()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    chunks, timings = [], None
    for line in c.getresponse():
        if not line.startswith(b"data: {"):
            continue
        chunk = json.loads(line[6:])
        if chunk.get("timings"):
            timings = chunk["timings"]
        for choice in chunk.get("choices", []):
            if choice.get("delta", {}).get("content"):
                chunks.append(time.time())
    out[name] = (sent, chunks, timings)


def main():
    model = model_id()
    words = VOCAB.split()
    long_prompt = " ".join(words[i % len(words)] for i in range(WORDS))
    out = {}
    short = [
        threading.Thread(target=stream, args=(model, f"Tell me a story about cat number {i}", 400, out, i))
        for i in range(3)
    ]
    for t in short:
        t.start()
    time.sleep(1.5)
    joining = threading.Thread(target=stream, args=(model, long_prompt, 8, out, "long"))
    joining.start()
    for t in short + [joining]:
        t.join()
    sent, chunks, timings = out["long"]
    print(f"long prompt: TTFT {1000 * (chunks[0] - sent):.0f} ms, "
          f"prompt_n {timings['prompt_n']}, prompt_ms {timings['prompt_ms']:.0f}")
    for i in range(3):
        gaps = sorted(b - a for a, b in zip(out[i][1], out[i][1][1:]) if b > sent)
        print(f"short stream {i}: after the long prompt was sent, largest gap {1000 * gaps[-1]:.0f} ms, "
              f"median {1000 * gaps[len(gaps) // 2]:.0f} ms")


main()
