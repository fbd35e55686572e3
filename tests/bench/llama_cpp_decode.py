"""llama.cpp's decode speed on one thread (THREADS=N in the environment: N), the way `tokenometer bench` measures its own: the chat
prompt prefilled, then 64 tokens decoded one at a time; decode tok/s = tokens after the first over
the time from the first to the last. Prints one line per run. For docs/measurements.md, run
interleaved with `tokenometer bench` (tests/bench/native_vs_llama_cpp.sh).

    pip install llama-cpp-python==0.3.36 numpy
    python3 tests/bench/llama_cpp_decode.py MODEL.gguf [RUNS] [RAW_PROMPT]

With RAW_PROMPT (a model without a chat template: Gemma 3 270M), that text with BOS instead.
"""
import os
import sys
import time

import llama_cpp
import numpy as np

PROMPT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
          "<|im_end|>\n<|im_start|>user\nTell me a long story about a dragon who learns to read.<|im_end|>\n<|im_start|>assistant\n")
STEPS = 64

path = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
threads = int(os.environ.get("THREADS", "1"))
llm = llama_cpp.Llama(model_path=path, n_ctx=512, n_threads=threads, n_threads_batch=threads, n_batch=512,
                      logits_all=True, verbose=False)
if len(sys.argv) > 3:
    prompt = llm.tokenize(sys.argv[3].encode(), add_bos=True, special=True)
else:
    prompt = llm.tokenize(PROMPT.encode(), add_bos=False, special=True)
for run in range(runs + 1):
    llm.reset()
    llm.eval(prompt)
    token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    first = time.perf_counter()
    for _ in range(STEPS - 1):
        # Greedy, but never stopping at EOS, so every run decodes the same count.
        llm.eval([token])
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    tps = (STEPS - 1) / (time.perf_counter() - first)
    if run > 0:  # the first run warms up
        print(f"llama.cpp {path} threads {threads} decode {tps:.1f} tok/s")
