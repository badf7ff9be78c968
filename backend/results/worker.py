#!/usr/bin/env python
"""trainwiz results worker: chat with a trained model, or export it as safetensors.

Run by ``trainwiz chat``/``trainwiz export`` with the training side's python (the wizard never
imports torch), so like the training entry it imports only the standard library, torch,
transformers and fastchat. It speaks JSON lines on stdout (one object per line; anything else on
stdout would be a bug, library chatter goes to stderr):

    chat:   stdin  {"prompt": "..."} per line  ->  stdout {"ready": ...} once, then {"reply": ...}
    export: stdout {"ok": true, "files": [...], "n_params": N}

With ``--base DIR`` the ``--model`` folder is an FSDP-sharded checkpoint: the worker first runs
the entry's ``consolidate.py`` (a subprocess of this python, so the shards' memory is freed before
the model loads) into a temporary folder under ``--work`` (never inside the checkpoint), loads
that, and removes it when done; ``ready``/``ok`` then carry ``"consolidated": true``.

The chat keeps the conversation (FastChat's template, ``vicuna`` by default: what FastChat's
train.py formats the training data with), so a reply sees the turns before it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

OUT = sys.stdout
CONSOLIDATE = Path(__file__).resolve().parents[1] / "entry" / "consolidate.py"


def emit(record: dict[str, Any]) -> None:
    OUT.write(json.dumps(record) + "\n")
    OUT.flush()


def pick_device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible to torch")
    return requested


def load(model_dir: str, device: str, adapter: str | None = None) -> tuple[Any, Any]:
    """The model and tokenizer; with ``adapter`` (a LoRA run's adapter folder) the base
    ``model_dir`` with the adapter on top, the tokenizer the run saved beside its adapter."""
    import torch
    import transformers

    dtype = torch.float32
    if device == "cuda":
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    words = adapter if adapter and Path(adapter, "tokenizer_config.json").is_file() else model_dir
    tokenizer = transformers.AutoTokenizer.from_pretrained(words, use_fast=False)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)  # type: ignore[assignment]
    model.to(device)  # type: ignore[arg-type]
    model.eval()
    return model, tokenizer


@contextlib.contextmanager
def model_folder(args: argparse.Namespace) -> Iterator[tuple[str, bool]]:
    """(folder to load, consolidated?): ``--model`` as it is, or its consolidation (``--base``)
    in a temporary folder that is removed afterwards."""
    if not args.base:
        yield args.model, False
        return
    tmp = tempfile.mkdtemp(prefix=".trainwiz-consolidated-", dir=args.work or None)
    try:
        argv = [sys.executable, str(CONSOLIDATE), "--checkpoint", args.model]
        argv += ["--base", args.base, "--out", tmp]
        proc = subprocess.run(argv, stdout=subprocess.PIPE, text=True)  # stderr: the worker's
        if proc.returncode != 0:
            raise SystemExit(proc.returncode)  # consolidate.py said why on stderr
        print(f"consolidated {args.model}: {proc.stdout.strip()}", file=sys.stderr)
        yield tmp, True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def chat(args: argparse.Namespace) -> None:
    with model_folder(args) as (folder, consolidated):
        _chat(args, folder, consolidated)


def _chat(args: argparse.Namespace, folder: str, consolidated: bool) -> None:
    import torch
    from fastchat.model.model_adapter import get_conversation_template  # as train.py

    device = pick_device(args.device)
    model, tokenizer = load(folder, device, args.adapter)
    conv = get_conversation_template(args.template)
    ready = {"ready": True, "device": device, "template": conv.name, "model": args.model}
    if args.adapter:
        ready["adapter"] = args.adapter
    emit({**ready, "consolidated": consolidated})
    for line in sys.stdin:
        if not line.strip():
            continue
        prompt = json.loads(line).get("prompt", "")
        conv.append_message(conv.roles[0], prompt)
        conv.append_message(conv.roles[1], None)
        inputs = tokenizer(conv.get_prompt(), return_tensors="pt").to(device)
        with torch.no_grad():
            output = model.generate(
                **inputs,
                max_new_tokens=args.max_new_tokens,
                min_new_tokens=1,
                do_sample=args.temperature > 0,
                temperature=args.temperature if args.temperature > 0 else None,
                top_p=None,
                top_k=None,
                pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
            )
        new = output[0][inputs["input_ids"].shape[1] :]
        reply = tokenizer.decode(new, skip_special_tokens=True).strip()
        for stop in (conv.sep2, conv.stop_str):
            if isinstance(stop, str) and stop and stop in reply:
                reply = reply.split(stop, 1)[0].strip()
        conv.update_last_message(reply)
        emit({"reply": reply, "new_tokens": int(new.shape[0])})


def export(args: argparse.Namespace) -> None:
    with model_folder(args) as (folder, consolidated):
        _export(args, folder, consolidated)


def _export(args: argparse.Namespace, folder: str, consolidated: bool) -> None:
    import transformers

    model, tokenizer = load(folder, "cpu")
    model.config.use_cache = True
    model.save_pretrained(args.to, safe_serialization=True)
    tokenizer.save_pretrained(args.to)
    # The proof that the export is usable: it loads back the way users will load it.
    again = transformers.AutoModelForCausalLM.from_pretrained(args.to)
    n_params = sum(p.numel() for p in again.parameters())
    files = sorted(os.listdir(args.to))
    emit({"ok": True, "files": files, "n_params": n_params, "consolidated": consolidated})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="trainwiz-results-worker")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("chat")
    c.add_argument("--model", required=True)
    c.add_argument("--template", default="vicuna", help="as FastChat's train.py: 'vicuna'")
    c.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    c.add_argument("--max-new-tokens", type=int, default=128)
    c.add_argument("--temperature", type=float, default=0.0)
    c.add_argument("--adapter", help="a LoRA adapter folder, loaded on top of --model (the base)")
    e = sub.add_parser("export")
    e.add_argument("--model", required=True)
    e.add_argument("--to", required=True)
    for p in (c, e):
        p.add_argument("--base", help="--model is FSDP-sharded: config + tokenizer from here")
        p.add_argument("--work", help="where the consolidation's temporary folder goes")
    args = parser.parse_args(argv)
    sys.stdout = sys.stderr  # library chatter goes to stderr: stdout (OUT) is the JSON channel
    try:
        (chat if args.command == "chat" else export)(args)
    except Exception as exc:  # a model that does not load: say so on the channel, then go
        traceback.print_exc(file=sys.stderr)
        emit({"error": f"{type(exc).__name__}: {exc}"})
        sys.stderr.flush()
        # A library thread (a hub lookup, a conversion) must not keep a failed worker alive:
        # the caller would wait for an answer that never comes.
        os._exit(1)
    finally:
        sys.stdout = OUT


if __name__ == "__main__":
    main()
