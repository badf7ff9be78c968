"""Create a tiny random-weight Llama with a sentencepiece tokenizer (run by the training python).

Self-contained on purpose: the wizard never imports torch/transformers, so trainwiz runs this file
with the training environment's interpreter. Usage: python _make_tiny.py SPEC_JSON
where SPEC_JSON = {"dir", "data", "spec": TinyModelSpec fields}. Prints one JSON line at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator

MARKER = "trainwiz-tiny.json"  # written into every model this script makes
SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)


def _texts(data_path: str) -> Iterator[str]:
    """Each conversation as FastChat's vicuna_v1.1 prompt, so the template's words get pieces."""
    with open(data_path, encoding="utf-8") as fh:
        records = json.load(fh)
    for record in records:
        parts = [SYSTEM]
        for turn in record.get("conversations", []):
            value = turn.get("value")
            if isinstance(value, str) and value.strip():
                role = "USER" if turn.get("from") == "human" else "ASSISTANT"
                parts.append(role + ": " + value.replace("\n", " "))
        yield " ".join(parts)


def main() -> None:
    job = json.loads(sys.argv[1])
    spec, target = job["spec"], job["dir"]
    import sentencepiece as spm
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaTokenizer

    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".tiny-", dir=parent)
    try:
        corpus = os.path.join(work, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as fh:
            for text in _texts(job["data"]):
                fh.write(text + "\n")
        prefix = os.path.join(work, "sp")
        spm.SentencePieceTrainer.train(
            input=corpus,
            model_prefix=prefix,
            vocab_size=spec["vocab_size"],
            model_type="bpe",
            character_coverage=1.0,
            hard_vocab_limit=False,
            byte_fallback=True,  # as Llama: no <unk>, which FastChat's pad=unk would miscount
            split_digits=True,
            normalization_rule_name="identity",
            remove_extra_whitespaces=False,
            allow_whitespace_only_pieces=True,
            unk_id=0,
            bos_id=1,
            eos_id=2,
            pad_id=-1,
            num_threads=1,
            minloglevel=2,
        )
        out = os.path.join(work, "model")
        tokenizer = LlamaTokenizer(vocab_file=prefix + ".model", legacy=True)
        tokenizer.model_max_length = spec["max_position_embeddings"]
        tokenizer.save_pretrained(out)
        torch.manual_seed(spec["seed"])
        config = LlamaConfig(
            vocab_size=spec["vocab_size"],
            hidden_size=spec["hidden_size"],
            intermediate_size=spec["intermediate_size"],
            num_hidden_layers=spec["num_hidden_layers"],
            num_attention_heads=spec["num_attention_heads"],
            num_key_value_heads=spec.get("num_key_value_heads") or spec["num_attention_heads"],
            max_position_embeddings=spec["max_position_embeddings"],
            bos_token_id=1,
            eos_token_id=2,
            tie_word_embeddings=False,
            torch_dtype="float32",
        )
        model = LlamaForCausalLM(config)
        model.save_pretrained(out, safe_serialization=True)
        with open(os.path.join(out, MARKER), "w", encoding="utf-8") as fh:
            files = sorted({*os.listdir(out), MARKER})
            json.dump(
                {
                    "spec": spec,
                    "tokenizer_pieces": tokenizer.sp_model.get_piece_size(),
                    "files": files,
                },
                fh,
            )
        if os.path.islink(target):
            raise SystemExit(f"{target}: is a symlink: refusing to replace it")
        if os.path.isdir(target):
            # Only what trainwiz made (its marker inside) or an empty dir is ever replaced.
            if os.listdir(target) and not os.path.isfile(os.path.join(target, MARKER)):
                raise SystemExit(f"{target}: not empty and not made by trainwiz: refusing")
            allowed = job.get("replaceable")
            extra = [] if allowed is None else sorted(set(os.listdir(target)) - set(allowed))
            if os.listdir(target) and extra:
                raise SystemExit(f"{target}: holds files trainwiz did not make ({extra}): refusing")
            shutil.rmtree(target)
        os.replace(out, target)
        n_params = sum(p.numel() for p in model.parameters())
        print(json.dumps({"ok": True, "dir": target, "n_params": n_params}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
