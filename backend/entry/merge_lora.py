#!/usr/bin/env python
"""Merge a LoRA adapter into its base model: a plain Hugging Face model directory comes out.

Self-contained (torch, transformers, peft) and run in the training environment as a
subprocess, never imported by the wizard; ``trainwiz export --merge`` calls it as

    python <run_dir>/entry/merge_lora.py --base BASE_DIR --adapter ADAPTER_DIR --out OUT_DIR

and reads one JSON line from stdout (``{"ok": true, "out_dir": ..., "params": N}``); on a
failure it exits non-zero with the reason on stderr. The base is loaded in its own dtype
(``torch_dtype="auto"``), the adapter's ``B·A·alpha/r`` is added into each target weight by
peft's ``merge_and_unload``, and the tokenizer is taken from the adapter dir when the entry
saved one there, else from the base.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys


def merge_adapter(base_dir, adapter_dir, out_dir):
    """Write base + adapter merged into ``out_dir`` (safetensors); return the parameter count."""
    import transformers
    from peft import PeftModel

    adapter = pathlib.Path(adapter_dir)
    if not (adapter / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{adapter} has no adapter_config.json: not a LoRA adapter dir")
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype="auto")
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out, safe_serialization=True)
    has_tokenizer = any(adapter.glob("tokenizer*"))
    words = str(adapter) if has_tokenizer else base_dir
    # A tokenizer with a chat template (Llama-3, Qwen: often fast-only) keeps it fast; a
    # vicuna-era Llama keeps the slow sentencepiece tokenizer FastChat trained with.
    own = pathlib.Path(words, "chat_template.jinja").is_file() or "chat_template" in (
        pathlib.Path(words, "tokenizer_config.json").read_text(encoding="utf-8")
        if pathlib.Path(words, "tokenizer_config.json").is_file()
        else ""
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(words, use_fast=own)
    tokenizer.save_pretrained(out)
    # The proof that the merge is usable: it loads back the way users will load it, no peft.
    again = transformers.AutoModelForCausalLM.from_pretrained(out)
    return sum(p.numel() for p in again.parameters())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the base model directory")
    parser.add_argument("--adapter", required=True, help="the run's output dir (adapter)")
    parser.add_argument("--out", required=True, help="where the merged model goes")
    args = parser.parse_args(argv)
    try:
        params = merge_adapter(args.base, args.adapter, args.out)
    except Exception as exc:
        print(f"merge failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"ok": True, "out_dir": args.out, "params": params}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
