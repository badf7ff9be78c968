#!/usr/bin/env python
"""A random-weight Llama of a given shape with a sentencepiece tokenizer trained on the data.

For the real-data benchmarks (docs/performance.md): the weights are made on the GPU in bf16
(seconds, where fp32 on the CPU takes minutes at 7B); the tokenizer (8000 pieces) is trained
on the conversations so that the generator's words are about one token each.

    python benchmarks/perf_make_model.py {3b|7b} DATA.json OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys

SHAPES = {
    "3b": {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
           "num_attention_heads": 24},
    "7b": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
           "num_attention_heads": 32},
}  # fmt: skip


def main() -> None:
    name, data, out = sys.argv[1:4]
    import sentencepiece as spm
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaTokenizer

    os.makedirs(out, exist_ok=True)
    corpus = os.path.join(out, "corpus.txt")
    with open(data, encoding="utf-8") as fh, open(corpus, "w", encoding="utf-8") as sink:
        for rec in json.load(fh)[:300]:
            sink.write(" ".join(t["value"] for t in rec["conversations"]) + "\n")
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=os.path.join(out, "sp"), vocab_size=8000, model_type="bpe",
        byte_fallback=True, hard_vocab_limit=False, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        minloglevel=2, num_threads=8,
    )  # fmt: skip
    LlamaTokenizer(vocab_file=os.path.join(out, "sp.model"), legacy=True).save_pretrained(out)
    os.remove(corpus)
    torch.manual_seed(0)
    config = LlamaConfig(**SHAPES[name], vocab_size=32000, max_position_embeddings=2048,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)  # fmt: skip
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    print(json.dumps({"dir": out, "n_params": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    main()
