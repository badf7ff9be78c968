"""Make a ~1.3B random-weight Llama (bf16 safetensors, sharded) and validate it with trainwiz.

For the lead's H200 run: it stands in for downloaded weights (no network there), and proves that
``trainwiz model validate`` reports the right parameter count on a real-size sharded model.
Shape: hidden 2048, 24 layers, 16 heads, ffn 5504, vocab 32000 (the planner's 1B reference).

Run from the repo root (PYTHONPATH must hold transformers, torch, sentencepiece, pydantic):
    PYTHONPATH=/tmp/site:. python3 benchmarks/gpu_make_model.py --dir /tmp/llama-1b
Writes $OUT/gpu_make_model.json (torch's parameter count, trainwiz's report, timings) and
$OUT/gpu_make_model_validate.txt (the CLI-style summary).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPE = {
    "hidden_size": 2048,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "intermediate_size": 5504,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
}


def make_tokenizer(target: Path) -> str:
    """A sentencepiece tokenizer trained on the bundled conversations (no network)."""
    import sentencepiece as spm

    data = json.loads((ROOT / "presets" / "data" / "sample_conversations.json").read_text())
    work = Path(tempfile.mkdtemp())
    corpus = work / "corpus.txt"
    corpus.write_text(
        "\n".join(t["value"] for r in data for t in r["conversations"]), encoding="utf-8"
    )
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(work / "sp"), vocab_size=4000, model_type="bpe",
        hard_vocab_limit=False, byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        minloglevel=2,
    )  # fmt: skip
    shutil.copy(work / "sp.model", target / "tokenizer.model")
    config = {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>", "model_max_length": 2048, "legacy": True}  # fmt: skip
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    shutil.rmtree(work)
    return "sentencepiece"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", default="/tmp/llama-1b")
    parser.add_argument("--shard", default="1GB", help="max_shard_size for save_pretrained")
    args = parser.parse_args()
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    target = Path(args.dir)
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    t0 = time.time()
    config = LlamaConfig(**SHAPE, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    n_torch = sum(p.numel() for p in model.parameters())
    t1 = time.time()
    model.save_pretrained(str(target), safe_serialization=True, max_shard_size=args.shard)
    make_tokenizer(target)
    t2 = time.time()
    del model

    from backend.model.validate import validate_model_dir

    report = validate_model_dir(target)
    t3 = time.time()
    result = {
        "dir": str(target),
        "device": device,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "n_params_torch": n_torch,
        "n_params_trainwiz": report.n_params,
        "n_params_from_config": report.n_params_from_config,
        "match": report.n_params == n_torch == report.n_params_from_config,
        "dtype": report.dtype,
        "shards": len(report.shards),
        "weights_bytes": report.weights_bytes,
        "ok": report.ok,
        "problems": report.problems,
        "warnings": report.warnings,
        "seconds": {"build": round(t1 - t0, 1), "save": round(t2 - t1, 1),
                    "validate": round(t3 - t2, 3)},
    }  # fmt: skip
    (out / "gpu_make_model.json").write_text(json.dumps(result, indent=2))
    (out / "gpu_make_model_validate.txt").write_text(report.model_dump_json(indent=2))
    print(json.dumps(result, indent=2))
    return 0 if result["match"] and report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
