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

The chat keeps the conversation, so a reply sees the turns before it, in the format the run
trained with (``--template``, the run's metrics ``start`` line's ``chat_template``):

- ``vicuna`` (the default, and every run from before that field): FastChat's vicuna
  conversation and slow tokenizer, exactly as FastChat's train.py formats the training data;
- ``model``: the tokenizer's own Jinja template (``apply_chat_template`` with the generation
  prompt), the fast tokenizer;
- any other name: that FastChat conversation template, the fast tokenizer.

The last two render and tokenize as the training entry's ``chat_masks.py`` does (BOS exactly
once) and stop at the template's end-of-turn token as well as at the end-of-text one.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
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
ENTRY = Path(__file__).resolve().parents[1] / "entry"  # the training entry's own modules
CONSOLIDATE = ENTRY / "consolidate.py"
VICUNA = "vicuna"
PROBE = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]


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


def import_stack() -> None:
    """torch and transformers imported up front with the cyclic GC paused, as the training entry
    does (backend/entry/importgc.py: a few hundred thousand import-time objects the collector
    would scan again and again for nothing); what the chat or export makes is collected as usual."""
    importgc = entry_module("importgc")  # importing it pauses the collector
    import torch  # noqa: F401
    import transformers  # noqa: F401

    importgc.imported()


def entry_module(name: str) -> Any:
    """One of the training entry's modules (``chat_masks``, ``template_choice``): the chat
    renders, tokenizes and stops as training masked."""
    if str(ENTRY) not in sys.path:
        sys.path.insert(0, str(ENTRY))
    return importlib.import_module(name)


def tokenizer_dir(model_dir: str, adapter: str | None = None) -> str:
    """The tokenizer's folder: the one a LoRA run saved beside its adapter, else the model's."""
    return adapter if adapter and Path(adapter, "tokenizer_config.json").is_file() else model_dir


def own_template(*folders: str | None) -> str | None:
    """The first of these folders' tokenizer chat template (as transformers would load it)."""
    choice = entry_module("template_choice")
    for folder in folders:
        found = choice.model_chat_template(folder) if folder else None
        if found:
            return str(found)
    return None


def load(
    model_dir: str, device: str, adapter: str | None = None, fast: bool = False
) -> tuple[Any, Any]:
    """The model and tokenizer; with ``adapter`` (a LoRA run's adapter folder) the base
    ``model_dir`` with the adapter on top, the tokenizer the run saved beside its adapter.
    ``fast``: the fast tokenizer (the training entry's for every template but vicuna)."""
    import torch
    import transformers

    dtype = torch.float32
    if device == "cuda":
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    words = tokenizer_dir(model_dir, adapter)
    tokenizer = transformers.AutoTokenizer.from_pretrained(words, use_fast=fast)
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


class VicunaChat:
    """FastChat's vicuna conversation, tokenized as FastChat's train.py does (unchanged)."""

    def __init__(self, tokenizer: Any, template: str) -> None:
        from fastchat.model.model_adapter import get_conversation_template  # as train.py

        self.tokenizer = tokenizer
        self.conv = get_conversation_template(template)
        self.name = str(self.conv.name)
        self.stop_ids = None  # generate's own (the model's generation config)

    def prompt(self, text: str) -> tuple[str, list[int]]:
        self.conv.append_message(self.conv.roles[0], text)
        self.conv.append_message(self.conv.roles[1], None)
        rendered = self.conv.get_prompt()
        return rendered, list(self.tokenizer(rendered).input_ids)

    def reply(self, reply: str) -> str:
        for stop in (self.conv.sep2, self.conv.stop_str):
            if isinstance(stop, str) and stop and stop in reply:
                reply = reply.split(stop, 1)[0].strip()
        self.conv.update_last_message(reply)
        return reply


class TemplateChat:
    """The run's template as the training entry renders it (``chat_masks``): the tokenizer's
    own (``model``) or a FastChat conversation template by name; the BOS rule of training, and
    generation stops at the end-of-text token or the template's end-of-turn token."""

    def __init__(self, tokenizer: Any, template: str) -> None:
        self.masks = entry_module("chat_masks")
        self.tokenizer = tokenizer
        self.renderer = self.masks.renderer_for(template, tokenizer)
        self.name = template
        self.messages: list[dict[str, str]] = []
        self.stops: list[str] = []
        ids = [tokenizer.eos_token_id, end_of_turn_id(self.masks, self.renderer, tokenizer)]
        if template != "model":
            from fastchat.conversation import get_conv_template  # as chat_masks renders

            conv = get_conv_template(template)
            self.stops = [s for s in (conv.sep2, conv.stop_str) if isinstance(s, str) and s]
            ids += list(conv.stop_token_ids or [])
        # A FastChat template names its family's ids: only those this vocabulary has.
        known = [int(i) for i in ids if i is not None and 0 <= int(i) < len(tokenizer)]
        self.stop_ids = list(dict.fromkeys(known)) or None

    def prompt(self, text: str) -> tuple[str, list[int]]:
        self.messages.append({"role": "user", "content": text})
        rendered = self.renderer.render(self.messages, True)
        return rendered, self.masks.Encoder(self.tokenizer, rendered)(rendered)

    def reply(self, reply: str) -> str:
        for stop in self.stops:
            if stop.strip() and stop in reply:
                reply = reply.split(stop, 1)[0].strip()
        self.messages.append({"role": "assistant", "content": reply})
        return reply


def end_of_turn_id(masks: Any, renderer: Any, tokenizer: Any) -> int | None:
    """The token that ends an assistant turn: the last trained token of a one-turn conversation
    masked as training masks it, when it is a special (or added) token; None when the template
    ends a reply with ordinary text."""
    try:
        ids, labels = masks.mask_conversation(PROBE, renderer, tokenizer)
    except masks.Unmaskable:
        return None
    trained = [i for i, label in zip(ids, labels) if label != masks.IGNORE_INDEX]
    special = {int(i) for i in tokenizer.all_special_ids}
    special |= {int(i) for i in (getattr(tokenizer, "added_tokens_decoder", None) or {})}
    return int(trained[-1]) if trained and int(trained[-1]) in special else None


def _chat(args: argparse.Namespace, folder: str, consolidated: bool) -> None:
    import torch

    device = pick_device(args.device)
    vicuna = args.template == VICUNA
    model, tokenizer = load(folder, device, args.adapter, fast=not vicuna)
    if not vicuna and args.template == "model" and not getattr(tokenizer, "chat_template", None):
        # A consolidation copies the base's tokenizer files, not always its chat_template.jinja.
        tokenizer.chat_template = own_template(args.base, tokenizer_dir(args.model, args.adapter))
        if not tokenizer.chat_template:
            raise SystemExit(f"--template model: {folder} has no chat template")
    chat_: VicunaChat | TemplateChat = (VicunaChat if vicuna else TemplateChat)(
        tokenizer, args.template
    )
    ready = {"ready": True, "device": device, "template": chat_.name, "model": args.model}
    if args.adapter:
        ready["adapter"] = args.adapter
    emit({**ready, "consolidated": consolidated})
    for line in sys.stdin:
        if not line.strip():
            continue
        rendered, ids = chat_.prompt(json.loads(line).get("prompt", ""))
        inputs = torch.tensor([ids], device=device)
        with torch.no_grad():
            output = model.generate(
                input_ids=inputs,
                attention_mask=torch.ones_like(inputs),
                max_new_tokens=args.max_new_tokens,
                min_new_tokens=1,
                do_sample=args.temperature > 0,
                temperature=args.temperature if args.temperature > 0 else None,
                top_p=None,
                top_k=None,
                pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
                **({"eos_token_id": chat_.stop_ids} if chat_.stop_ids else {}),
            )
        new = output[0][len(ids) :]
        reply = chat_.reply(tokenizer.decode(new, skip_special_tokens=True).strip())
        answer = {"reply": reply, "new_tokens": int(new.shape[0]), "prompt_tokens": len(ids)}
        emit({**answer, **({"prompt": rendered} if args.show_prompt else {})})


def export(args: argparse.Namespace) -> None:
    with model_folder(args) as (folder, consolidated):
        _export(args, folder, consolidated)


def _export(args: argparse.Namespace, folder: str, consolidated: bool) -> None:
    import transformers

    # A tokenizer with a chat template is exported with it, through the fast tokenizer (as the
    # training entry loads it for that template); one without stays as FastChat loads it.
    template = own_template(folder, args.base)
    model, tokenizer = load(folder, "cpu", fast=template is not None)
    if template and not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = template  # a consolidation that did not copy it
    model.config.use_cache = True
    model.save_pretrained(args.to, safe_serialization=True)
    tokenizer.save_pretrained(args.to)
    if template and own_template(args.to) is None:
        raise SystemExit(f"the exported tokenizer in {args.to} lost its chat template")
    # The proof that the export is usable: it loads back the way users will load it.
    again = transformers.AutoModelForCausalLM.from_pretrained(args.to)
    n_params = sum(p.numel() for p in again.parameters())
    files = sorted(os.listdir(args.to))
    emit({"ok": True, "files": files, "n_params": n_params, "consolidated": consolidated,
          "chat_template": template is not None})  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="trainwiz-results-worker")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("chat")
    c.add_argument("--model", required=True)
    c.add_argument(
        "--template",
        default=VICUNA,
        help="the run's chat_template: 'vicuna' (FastChat's train.py), 'model' (the "
        "tokenizer's own) or a FastChat conversation template name",
    )
    c.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    c.add_argument("--max-new-tokens", type=int, default=128)
    c.add_argument("--temperature", type=float, default=0.0)
    c.add_argument("--adapter", help="a LoRA adapter folder, loaded on top of --model (the base)")
    c.add_argument(
        "--show-prompt", action="store_true", help="each reply line carries the rendered prompt"
    )
    e = sub.add_parser("export")
    e.add_argument("--model", required=True)
    e.add_argument("--to", required=True)
    for p in (c, e):
        p.add_argument("--base", help="--model is FSDP-sharded: config + tokenizer from here")
        p.add_argument("--work", help="where the consolidation's temporary folder goes")
    args = parser.parse_args(argv)
    sys.stdout = sys.stderr  # library chatter goes to stderr: stdout (OUT) is the JSON channel
    import_stack()
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
