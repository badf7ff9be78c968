#!/usr/bin/env python
"""A random-weight model of today's real chat-model shapes, with that family's tokenizer.

For the GPU benchmark of today's families (benchmarks/device/families.sh, docs/performance.md):

- ``qwen3b``: Qwen2.5-3B's shape (Qwen2Config: hidden 2048, intermediate 11008, 36 layers,
  16 heads, 2 key/value heads, vocab 151,936, tied embeddings, rope_theta 1e6);
- ``llama3b``: Llama-3.2-3B's shape (LlamaConfig: hidden 3072, intermediate 8192, 28 layers,
  24 heads, 8 key/value heads, vocab 128,256, tied embeddings, rope_theta 5e5, llama3 rope
  scaling).

The tokenizer is the one trainwiz's tiny-model maker builds for the qwen2 / llama3 family
(``backend/model/_make_tiny.py``, imported from there: byte-level BPE trained on the data, the
family's split regex, special tokens, BOS/pad rules and chat template), ~8000 tokens. The config's
vocabulary stays the real one, larger than the tokenizer's (as Qwen's own config is larger than
its tokenizer): the logits, which dominate memory at these vocabularies, have the real width.
Weights are made on the GPU in bf16 (seconds; the CPU when there is none).

    python benchmarks/family_make_model.py {qwen3b|llama3b} DATA.json OUT_DIR

``FAMILY_TINY=1`` keeps the family and the real vocabulary but makes a 2-layer, 64-wide model
(a CPU check of this script before a device call).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

TOKENIZER_VOCAB = 8000
TRAIN_RECORDS = 300  # the conversations the tokenizer is trained on (as perf_make_model.py)

SHAPES = {
    "qwen3b": {"family": "qwen2", "hidden_size": 2048, "intermediate_size": 11008,
               "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 2,
               "vocab_size": 151936, "max_position_embeddings": 32768},
    "llama3b": {"family": "llama3", "hidden_size": 3072, "intermediate_size": 8192,
                "num_hidden_layers": 28, "num_attention_heads": 24, "num_key_value_heads": 8,
                "vocab_size": 128256, "max_position_embeddings": 131072},
}  # fmt: skip
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2}  # fmt: skip


def _tiny_module():
    """backend/model/_make_tiny.py as a module (a script of its own: the wizard never imports
    it, so it is loaded from its file)."""
    path = Path(__file__).resolve().parents[1] / "backend" / "model" / "_make_tiny.py"
    spec = importlib.util.spec_from_file_location("_make_tiny", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config(name: str, shape: dict, ids: dict):
    import transformers

    common = {k: v for k, v in shape.items() if k != "family"}
    common.update(bos_token_id=ids["bos"], eos_token_id=ids["eos"], pad_token_id=ids["pad"],
                  tie_word_embeddings=True, rms_norm_eps=1e-6)  # fmt: skip
    if name == "qwen3b":
        config = transformers.Qwen2Config(
            **common, rope_theta=1000000.0, use_sliding_window=False, hidden_act="silu",
            max_window_layers=shape["num_hidden_layers"], attention_dropout=0.0,
        )  # fmt: skip
        config.sliding_window = shape["max_position_embeddings"]  # named, unused (as Qwen2.5's)
        return config
    common["rms_norm_eps"] = 1e-5
    return transformers.LlamaConfig(
        **common, rope_theta=500000.0, hidden_act="silu", attention_bias=False, mlp_bias=False,
        head_dim=shape["hidden_size"] // shape["num_attention_heads"],
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    )  # fmt: skip


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[1] not in SHAPES:
        raise SystemExit(f"usage: {sys.argv[0]} {{{'|'.join(SHAPES)}}} DATA.json OUT_DIR")
    name, data, out = sys.argv[1:4]
    import torch
    from transformers import AutoModelForCausalLM

    shape = dict(SHAPES[name])
    if os.environ.get("FAMILY_TINY"):
        shape.update(TINY)
    tiny = _tiny_module()
    f = tiny.FAMILIES[shape["family"]]
    os.makedirs(out, exist_ok=True)

    with open(data, encoding="utf-8") as fh:
        records = json.load(fh)[:TRAIN_RECORDS]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as sub:
        json.dump(records, sub)
    try:
        texts = list(tiny._family_texts(sub.name, f))
    finally:
        os.remove(sub.name)
    tok = tiny._byte_level_tokenizer(f, texts, TOKENIZER_VOCAB)
    special, stops = tiny.save_family_tokenizer(tok, f, shape["max_position_embeddings"], out)
    config = _config(name, shape, special)
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = stops if len(stops) > 1 else stops[0]
    model.save_pretrained(out, safe_serialization=True)
    print(json.dumps({
        "dir": out, "shape": name, "family": shape["family"], "device": device,
        "n_params": sum(p.numel() for p in model.parameters()),
        "tokenizer_tokens": tok.get_vocab_size(with_added_tokens=True),
        "config_vocab": config.vocab_size, "tied": model.config.tie_word_embeddings,
        "special_ids": special,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
