#!/usr/bin/env python3
"""Write small valid seed inputs for each fuzz target into fuzz/seeds/<target>/ (stdlib only).

The seeds are committed (fuzz/seeds/): `make fuzz` and `make test`'s time-boxed run start every
target from them; run this again after changing it and commit what it writes.

Small seeds let libFuzzer mutate around the real formats' structure quickly: a llama2.c checkpoint
of dim 8, a llama2.c tokenizer.bin with 3 specials, 256 byte tokens and a few merges, a
tokenizer.json, and a Hugging Face config.json + NUL + model.safetensors pair.
"""
import json
import os
import struct
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")


def put(target, name, data):
    folder = os.path.join(root, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def floats(n, scale=0.01):
    return struct.pack(f"<{n}f", *[((i * 7) % 13 - 6) * scale for i in range(n)])


# llama2.c: dim 8, hidden 16, 1 layer, 2 heads, 2 kv heads, vocab 16 (shared), seq_len 8.
d, h, l, heads, kv_heads, v, s = 8, 16, 1, 2, 2, 16, 8
kv = kv_heads * (d // heads)
count = v * d + l * (2 * d + 2 * d * d + 2 * kv * d + 3 * h * d) + d
put("llama2c", "tiny.bin", struct.pack("<7i", d, h, l, heads, kv_heads, v, s) + floats(count))
put("llama2c_sized", "tiny.bin", struct.pack("<7i", d, h, l, heads, kv_heads, v, s) + floats(64))
with_rope = count + s * (d // heads)
put("llama2c", "tiny-rope.bin", struct.pack("<7i", d, h, l, heads, kv_heads, v, s) + floats(with_rope))
separate = count + v * d
put("llama2c", "tiny-classifier.bin", struct.pack("<7i", d, h, l, heads, kv_heads, -v, s) + floats(separate))

# tokenizer.bin: max_token_length, then (score, len, bytes) per id.
pieces = [b"<unk>", b"<s>", b"</s>"] + [b"<0x%02X>" % i for i in range(256)]
pieces += [b" a", b" t", b"he", b" the", b"Once", b" upon"]
out = struct.pack("<i", max(len(p) for p in pieces))
for i, p in enumerate(pieces):
    out += struct.pack("<fi", -float(i), len(p)) + p
put("tokenizer_bin", "tiny.bin", out)

# tokenizer.json: a BPE with byte fallback, like Llama's.
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
for i in range(256):
    vocab["<0x%02X>" % i] = 3 + i
for piece in ["▁", "a", "t", "h", "e", "▁t", "he", "▁the"]:
    vocab.setdefault(piece, len(vocab))
tokenizer = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": 1, "content": "<s>", "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True}],
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": None, "post_processor": None,
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}]},
    "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
              "vocab": vocab, "merges": [["▁", "t"], ["h", "e"], ["▁t", "he"]]},
}
put("tokenizer_json", "tiny.json", json.dumps(tokenizer).encode())

# Hugging Face: config.json, a NUL, then model.safetensors.
config = {"model_type": "llama", "hidden_size": d, "intermediate_size": h, "num_hidden_layers": 1,
          "num_attention_heads": heads, "num_key_value_heads": kv_heads, "vocab_size": v,
          "max_position_embeddings": s, "tie_word_embeddings": True}
shapes = {"model.embed_tokens.weight": [v, d], "model.norm.weight": [d]}
p = "model.layers.0"
shapes.update({
    f"{p}.self_attn.q_proj.weight": [d, d], f"{p}.self_attn.k_proj.weight": [kv, d],
    f"{p}.self_attn.v_proj.weight": [kv, d], f"{p}.self_attn.o_proj.weight": [d, d],
    f"{p}.mlp.gate_proj.weight": [h, d], f"{p}.mlp.up_proj.weight": [h, d],
    f"{p}.mlp.down_proj.weight": [d, h], f"{p}.input_layernorm.weight": [d],
    f"{p}.post_attention_layernorm.weight": [d],
})
header, body = {}, b""
for name, shape in shapes.items():
    n = 1
    for x in shape:
        n *= x
    data = floats(n)
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(body), len(body) + len(data)]}
    body += data
header_bytes = json.dumps(header).encode()
safetensors = struct.pack("<Q", len(header_bytes)) + header_bytes + body
put("huggingface", "tiny", json.dumps(config).encode() + b"\0" + safetensors)


# GGUF v3, llama architecture: the same tiny shape with F32 norms, Q8_0 and Q4_0 matrices, and the
# SentencePiece vocabulary above inside.
def gguf_string(text):
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def gguf_kv(key, kind, payload):
    return gguf_string(key) + struct.pack("<I", kind) + payload


def q8_0(n):
    return b"".join(struct.pack("<e", 0.01) + bytes((i * 5) % 256 for i in range(32)) for _ in range(n // 32))


def q4_0(n):
    return b"".join(struct.pack("<e", 0.01) + bytes((i * 7) % 256 for i in range(16)) for _ in range(n // 32))


def gguf_file(kvs, tensors):
    """A GGUF v3 file of metadata `kvs` and `tensors` (name, dims, type, data), aligned to 32."""
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    offset, body = 0, b""
    for name, dims, kind, data in tensors:
        header += gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", x) for x in dims)
        header += struct.pack("<IQ", kind, offset)
        padded = data + b"\0" * (-len(data) % 32)
        body += padded
        offset += len(padded)
    header += b"\0" * (-len(header) % 32)
    return header + body


def blocks(kind, n):
    """`n` values of GGUF type `kind` as blocks with small finite f16 scales and patterned bytes."""
    size, per, halves = {3: (20, 32, [0, 2]), 6: (22, 32, [0]), 7: (24, 32, [0, 2]), 10: (84, 256, [80, 82]),
                         11: (110, 256, [108]), 12: (144, 256, [0, 2]), 13: (176, 256, [0, 2]),
                         14: (210, 256, [208])}[kind]
    block = bytearray((i * 11 + kind) % 256 for i in range(size))
    for at in halves:
        block[at:at + 2] = struct.pack("<e", 0.01)
    return bytes(block) * (n // per)


def typed_gguf(tokenizer_kvs, vocab_size, dim, kinds):
    """A one-layer llama GGUF of width `dim` whose seven matrices take the types `kinds` in turn."""
    kvs = [
        gguf_kv("general.architecture", 8, gguf_string("llama")),
        gguf_kv("llama.embedding_length", 4, struct.pack("<I", dim)),
        gguf_kv("llama.feed_forward_length", 4, struct.pack("<I", dim)),
        gguf_kv("llama.block_count", 4, struct.pack("<I", 1)),
        gguf_kv("llama.attention.head_count", 4, struct.pack("<I", 4)),
        gguf_kv("llama.attention.head_count_kv", 4, struct.pack("<I", 4)),
        gguf_kv("llama.context_length", 4, struct.pack("<I", 16)),
    ] + tokenizer_kvs
    names = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
    tensors = [("token_embd.weight", [dim, vocab_size], kinds[0], blocks(kinds[0], dim * vocab_size)),
               ("output_norm.weight", [dim], 0, floats(dim)), ("blk.0.attn_norm.weight", [dim], 0, floats(dim)),
               ("blk.0.ffn_norm.weight", [dim], 0, floats(dim))]
    for i, name in enumerate(names):
        kind = kinds[(i + 1) % len(kinds)]
        tensors.append((f"blk.0.{name}.weight", [dim, dim], kind, blocks(kind, dim * dim)))
    return gguf_file(kvs, tensors)


def tiny_gguf(tokenizer_kvs, vocab_size):
    """A one-layer llama GGUF of F32, Q8_0 and Q4_0 tensors carrying `tokenizer_kvs`."""
    kvs = [
        gguf_kv("general.architecture", 8, gguf_string("llama")),
        gguf_kv("llama.embedding_length", 4, struct.pack("<I", 32)),
        gguf_kv("llama.feed_forward_length", 4, struct.pack("<I", 64)),
        gguf_kv("llama.block_count", 4, struct.pack("<I", 1)),
        gguf_kv("llama.attention.head_count", 4, struct.pack("<I", 4)),
        gguf_kv("llama.attention.head_count_kv", 4, struct.pack("<I", 2)),
        gguf_kv("llama.context_length", 4, struct.pack("<I", 16)),
        gguf_kv("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
    ] + tokenizer_kvs
    gd, gh, gkv, gv = 32, 64, 16, vocab_size
    tensors = [("token_embd.weight", [gd, gv], 8, q8_0(gd * gv)), ("output_norm.weight", [gd], 0, floats(gd))]
    tensors += [
        ("blk.0.attn_norm.weight", [gd], 0, floats(gd)), ("blk.0.ffn_norm.weight", [gd], 0, floats(gd)),
        ("blk.0.attn_q.weight", [gd, gd], 8, q8_0(gd * gd)), ("blk.0.attn_k.weight", [gd, gkv], 2, q4_0(gd * gkv)),
        ("blk.0.attn_v.weight", [gd, gkv], 2, q4_0(gd * gkv)), ("blk.0.attn_output.weight", [gd, gd], 0, floats(gd * gd)),
        ("blk.0.ffn_gate.weight", [gd, gh], 8, q8_0(gd * gh)), ("blk.0.ffn_up.weight", [gd, gh], 8, q8_0(gd * gh)),
        ("blk.0.ffn_down.weight", [gh, gd], 2, q4_0(gd * gh)),
    ]
    return gguf_file(kvs, tensors)


def string_array(items):
    return struct.pack("<IQ", 8, len(items)) + b"".join(gguf_string(t) for t in items)


# A SentencePiece vocabulary (tokenizer.ggml.model "llama").
tokens = [p.decode("latin-1").replace(" ", "\u2581") for p in pieces]
put("gguf", "tiny.gguf", tiny_gguf([
    gguf_kv("tokenizer.ggml.model", 8, gguf_string("llama")),
    gguf_kv("tokenizer.ggml.tokens", 9, string_array(tokens)),
    gguf_kv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, len(tokens)) + b"".join(struct.pack("<f", -i) for i in range(len(tokens)))),
], len(tokens)))

# A byte-level BPE vocabulary ("gpt2", SmolLM2's split rules): GPT-2's 256 byte characters, a few
# merges, ChatML's markers as control tokens, and a ChatML template.
printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
byte_chars = {b: chr(b) for b in printable}
byte_chars.update({b: chr(256 + n) for n, b in enumerate(b for b in range(256) if b not in byte_chars)})
bpe = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [byte_chars[b] for b in range(256)] + ["\u0120t", "he", "\u0120the"]
merges = ["\u0120 t", "h e", "\u0120t he"]
types = [3, 3, 3] + [1] * (len(bpe) - 3)
put("gguf", "tiny-bpe.gguf", tiny_gguf([
    gguf_kv("tokenizer.ggml.model", 8, gguf_string("gpt2")),
    gguf_kv("tokenizer.ggml.pre", 8, gguf_string("smollm")),
    gguf_kv("tokenizer.ggml.tokens", 9, string_array(bpe)),
    gguf_kv("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, len(types)) + b"".join(struct.pack("<i", t) for t in types)),
    gguf_kv("tokenizer.ggml.merges", 9, string_array(merges)),
    gguf_kv("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 1)),
    gguf_kv("tokenizer.ggml.eos_token_id", 4, struct.pack("<I", 2)),
    gguf_kv("tokenizer.chat_template", 8, gguf_string("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}")),
], len(bpe)))
# Every other block type: Q4_1, Q5_0, Q5_1 in a width of 32; the K-quants in a width of 256.
spm = [
    gguf_kv("tokenizer.ggml.model", 8, gguf_string("llama")),
    gguf_kv("tokenizer.ggml.tokens", 9, string_array(tokens)),
    gguf_kv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, len(tokens)) + b"".join(struct.pack("<f", -i) for i in range(len(tokens)))),
]
put("gguf", "tiny-q4_1-q5.gguf", typed_gguf(spm, len(tokens), 32, [3, 6, 7]))
put("gguf", "tiny-k-quants.gguf", typed_gguf(spm, len(tokens), 256, [10, 11, 12, 13, 14]))

# Hostile files that once loaded or were misnamed (tests/gguf.rs has each as a case): a tensor
# named twice, two tensors over the same bytes, a big-endian header, a huge architecture name.
row = floats(32)
twice = [("token_embd.weight", [32, 1], 0, row), ("token_embd.weight", [32, 1], 0, row)]
put("gguf", "hostile-twice.gguf", gguf_file([gguf_kv("general.architecture", 8, gguf_string("llama"))], twice))
overlap = gguf_file([gguf_kv("general.architecture", 8, gguf_string("llama"))],
                    [("token_embd.weight", [32, 2], 0, floats(64)), ("output.weight", [32, 1], 0, row)])
at = overlap.rfind(struct.pack("<Q", 256))
put("gguf", "hostile-overlap.gguf", overlap[:at] + struct.pack("<Q", 128) + overlap[at + 8:])
put("gguf", "hostile-big-endian.gguf", b"GGUF" + struct.pack(">IQQ", 3, 0, 0))
put("gguf", "hostile-long-arch.gguf", gguf_file([gguf_kv("general.architecture", 8, gguf_string("x" * 4096))], []))
# A Q8_0 block whose f16 scale is NaN (tests/gguf.rs: a NaN or an infinity in a weight is refused).
put("gguf", "hostile-nan-scale.gguf", gguf_file([gguf_kv("general.architecture", 8, gguf_string("llama"))],
                                               [("token_embd.weight", [32, 1], 8, struct.pack("<H", 0x7E00) + bytes(32))]))

# The SSE parser (fuzz_targets/sse.rs: the first byte picks where the reads are cut): an OpenAI
# stream as servers send it, with a keep-alive comment, CRLF line ends, an event name, an id and
# retry, a data field over two lines, and a stream cut in the middle of an event.
chunk = {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Once"}, "finish_reason": None}]}
last = {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}}
stream = (": keep-alive\n\n" + "data: " + json.dumps(chunk) + "\n\n" + "data: " + json.dumps(last) + "\n\n" + "data: [DONE]\n\n")
put("sse", "openai-stream", bytes([40]) + stream.encode())
put("sse", "crlf-and-fields", bytes([7]) + b"event: message\r\nid: 7\r\nretry: 1000\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n:ping\r\n\r\n")
put("sse", "cut-mid-event", bytes([3]) + b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"cho")

# serve's request types (fuzz_targets/requests.rs): a chat request and a completion request with
# every field tokenometer takes, and one with the fields it refuses by name.
chat = {"model": "smollm2", "messages": [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "max_tokens": 16, "max_completion_tokens": 16, "temperature": 0.7, "top_p": 0.9, "seed": 7,
        "stop": ["\n\n", "User:"], "stream": True, "stream_options": {"include_usage": True},
        "logprobs": True, "top_logprobs": 5, "n": 1, "user": "u"}
put("requests", "chat.json", json.dumps(chat).encode())
completion = {"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0,
              "stop": "The end", "stream": False, "logprobs": 3, "echo": False}
put("requests", "completion.json", json.dumps(completion).encode())
put("requests", "refused.json", json.dumps({"model": "m", "prompt": ["a", "b"], "n": 2, "best_of": 3,
    "logit_bias": {"50256": -100}, "tools": [], "response_format": {"type": "json_object"}}).encode())
print(f"seeds written under {root}", file=sys.stderr)
