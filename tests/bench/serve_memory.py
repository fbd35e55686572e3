#!/usr/bin/env python3
"""`tokenometer serve`'s resident memory under a room's load, against its `--kv-memory` budget.

Starts the server on a free loopback port (CPU, 1 thread, --parallel 32, the given budget), reads
its resident memory (VmRSS) when loaded, then sends a room: 32 requests at once that each
ask for the whole context (refused: they could never fit the budget) and, after them, N requests at
once that fit two or more at a time, reading its resident memory and /metrics' kv_cache_bytes
every 20 ms while they run, and its resident memory a second after (idle again: the loading's
transient memory is gone by then, so that is the baseline the room's memory is measured over). Prints one line of figures with their conditions.

    python3 tests/bench/serve_memory.py target/debug/tokenometer models/cache/SmolLM2-...gguf 10MB 8
"""
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

binary, model, budget, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


port = free_port()
base = f"http://127.0.0.1:{port}"
server = subprocess.Popen([binary, "serve", "--model", model, "--threads", "1", "--parallel", "32",
                           "--kv-memory", budget, "--port", str(port)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(600):
        try:
            urllib.request.urlopen(base + "/v1/models", timeout=1).read()
            break
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
    idle = status(server.pid, "VmRSS")


    def metric(name):
        text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
        return float(next(l.split()[-1] for l in text.splitlines() if l.startswith(name + "{")))


    def post(max_tokens):
        body = json.dumps({"messages": [{"role": "user", "content": "Count to ten."}], "temperature": 0,
                           "ignore_eos": True, "max_tokens": max_tokens}).encode()
        request = urllib.request.Request(base + "/v1/chat/completions", body, {"Content-Type": "application/json"})
        try:
            return urllib.request.urlopen(request, timeout=600).status
        except urllib.error.HTTPError as e:
            return e.code


    def together(count, max_tokens):
        codes = []
        threads = [threading.Thread(target=lambda: codes.append(post(max_tokens))) for _ in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return codes


    watching, held, resident = True, [], []

    def watch():
        while watching:
            held.append(metric("tokenometer:kv_cache_bytes"))
            resident.append(status(server.pid, "VmRSS"))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    refused = together(32, 100000)
    served = together(n, 60)
    watching = False
    watcher.join()
    time.sleep(1)
    after = status(server.pid, "VmRSS")
    peak = max(resident)
    budget_bytes = metric("tokenometer:kv_cache_positions_budget") * 46080  # SmolLM2-135M: bytes a position
    print(f"budget {budget} ({budget_bytes / 1e6:.1f} MB of positions); 32 whole-context requests: "
          f"{sorted(set(refused))}; {n} requests of 60 tokens: {sorted(set(served))}; resident loaded and idle "
          f"{idle / 1e6:.1f} MB, idle after the room {after / 1e6:.1f} MB, most while it ran {peak / 1e6:.1f} MB "
          f"(+{(peak - after) / 1e6:.1f} MB over idle); "
          f"kv_cache_bytes at most {max(held) / 1e6:.2f} MB over {len(held)} reads")
finally:
    server.terminate()
    server.wait()
