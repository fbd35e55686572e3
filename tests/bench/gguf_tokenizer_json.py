#!/usr/bin/env python3
"""Write a GGUF's byte-level BPE tokenizer (GPT-2 style: SmolLM2's, Qwen's) as a Hugging Face
tokenizer folder (tokenizer.json, tokenizer_config.json), so that a load tester that wants a
Hugging Face tokenizer (AIPerf) runs with no hub. Reads the file with llama.cpp's own `gguf`
package (PyPI). Usage: gguf_tokenizer_json.py MODEL.gguf OUT_DIR"""
import json
import sys
from pathlib import Path

from gguf import GGUFReader


def field(reader, key):
    f = reader.fields[key]
    if len(f.data) == 1 and f.types[0].name != "ARRAY":
        return f.parts[f.data[0]].tobytes().decode() if f.types[0].name == "STRING" else f.parts[f.data[0]][0]
    return [bytes(f.parts[i]).decode("utf-8") if f.types[-1].name == "STRING" else int(f.parts[i][0]) for i in f.data]


def main(model, out):
    reader = GGUFReader(model)
    if field(reader, "tokenizer.ggml.model") != "gpt2":
        sys.exit("only byte-level BPE (tokenizer.ggml.model = gpt2) vocabularies are written")
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    merges = field(reader, "tokenizer.ggml.merges")
    specials = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                 "normalized": False, "special": True} for i, (t, k) in enumerate(zip(tokens, types)) if k == 3]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": specials,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    eos = tokens[field(reader, "tokenizer.ggml.eos_token_id")]
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos, "model_max_length": 1 << 20}))
    print(f"wrote {out}/tokenizer.json ({len(tokens)} tokens, {len(merges)} merges)")


if __name__ == "__main__":
    main(*sys.argv[1:])
