#!/usr/bin/env python
"""Consolidate an FSDP SHARDED_STATE_DICT checkpoint into a folder ``from_pretrained`` loads.

FSDP runs checkpoint sharded (docs/checkpoints.md): accelerate's ``save_fsdp_model`` writes
``checkpoint-N/pytorch_model_fsdp_0/`` in torch.distributed.checkpoint (DCP) format, the state
dict saved as ``{"model": model.state_dict()}``, so every key is ``model.<HF key>`` (FSDP strips
its own wrapper names for SHARDED_STATE_DICT; ``_fsdp_wrapped_module.``,
``_checkpoint_wrapped_module.`` and ``_orig_mod.`` are removed here all the same, for FSDP
versions and activation checkpointing that leave them in). The checkpoint has no config.json nor
tokenizer (the Trainer writes those only for full weights), so the run's base model gives both.

Self-contained like the training entry (a sibling of ``train_entry.py``; run with the training
side's python by the results worker, never imported with torch by the wizard):

    python consolidate.py --checkpoint CKPT --base BASE_DIR --out OUT_DIR

The model is built from the base's config on the meta device, materialised empty on the CPU in
the checkpoint's dtype, and filled in place by ``torch.distributed.checkpoint.load`` without a
process group (DCP then reads every shard in this one process); every parameter and persistent
buffer must come from the checkpoint, or nothing is written. ``save_pretrained`` writes
safetensors, the base's tokenizer is copied, and one JSON line goes to stdout (``{"ok": true,
"out_dir", "tensors", "n_params", "dtype"}``). Exit 2: the checkpoint is incomplete or not a DCP
model checkpoint (the reason names it on stderr); exit 1: anything else.

The part above the torch section imports only the standard library, so the wizard shares the
same "can this be consolidated" check (``backend.entry.consolidate.sharded_problem``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

if __package__:  # imported by the wizard, as backend.entry.consolidate
    from .checkpoints import MARKER, complete_checkpoints
else:  # run as a script: the siblings are top-level modules (its folder is first on sys.path)
    from checkpoints import MARKER, complete_checkpoints  # type: ignore[import-not-found,no-redef]

MODEL_SHARDS = "pytorch_model_fsdp_0"  # accelerate's FSDP_MODEL_NAME + model index 0
METADATA = ".metadata"
_TOP_KEY = "model."  # accelerate saves {"model": state_dict}
_WRAPPERS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
_TOKENIZER_FILES = (
    "tokenizer.model",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "generation_config.json",
)


class Incomplete(Exception):
    """The checkpoint cannot be consolidated as it is on disk (exit 2)."""


def is_sharded(checkpoint: Path) -> bool:
    """An FSDP SHARDED_STATE_DICT checkpoint (its weights only as DCP shards)."""
    return (checkpoint / MODEL_SHARDS).is_dir()


def sharded_problem(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be consolidated (None: it can), from the files alone: the same
    completeness rule as resume (``complete_checkpoints``), then DCP's metadata file, which
    ``dcp.save`` writes last, after every rank's shard."""
    done = {path.resolve() for _, path in complete_checkpoints(checkpoint.parent)}
    if checkpoint.resolve() not in done:
        return (
            f"{checkpoint} is incomplete: no {MARKER} (its save was cut off before every rank "
            "had written its shard)"
        )
    if not (checkpoint / MODEL_SHARDS / METADATA).is_file():
        return (
            f"{checkpoint} is incomplete: {MODEL_SHARDS}/{METADATA} is missing (DCP writes it "
            "last, after every shard)"
        )
    return None


def hf_key(stored: str, path: tuple[str, ...] | None = None) -> str:
    """The Hugging Face state-dict key of a DCP key: without accelerate's top-level ``model``
    entry and without wrapper module names."""
    key = ".".join(path[1:]) if path and len(path) > 1 and path[0] == "model" else stored
    if key == stored and key.startswith(_TOP_KEY):
        key = key[len(_TOP_KEY) :]
    for wrapper in _WRAPPERS:
        key = key.replace(wrapper, "")
    return key.removeprefix("module.")  # DDP


# ---------------------------------------------------------------- training side (torch)


def _check_shards(shard_dir: Path, metadata: Any) -> None:
    """Every shard file the metadata names is there and long enough (a copy cut short fails
    here, with the file's name, instead of inside DCP's reader)."""
    for info in (metadata.storage_data or {}).values():
        file = shard_dir / str(info.relative_path)
        need = int(info.offset) + int(info.length)
        size = file.stat().st_size if file.is_file() else -1
        if size < need:
            what = "missing" if size < 0 else f"{size} bytes, the metadata needs {need}"
            raise Incomplete(f"{shard_dir.parent} is incomplete: shard {file.name} is {what}")


def consolidate(checkpoint: Path, base: Path, out: Path) -> dict[str, Any]:
    """Write the checkpoint's full model into ``out`` (from_pretrained-loadable)."""
    problem = sharded_problem(checkpoint)
    if problem:
        raise Incomplete(problem)
    import torch
    import torch.distributed.checkpoint as dcp
    import transformers

    shard_dir = checkpoint / MODEL_SHARDS
    reader = dcp.FileSystemReader(str(shard_dir))
    metadata = reader.read_metadata()
    _check_shards(shard_dir, metadata)
    planner_data = metadata.planner_data or {}
    stored: dict[str, tuple[str, Any]] = {}
    for key, meta in metadata.state_dict_metadata.items():
        if hasattr(meta, "size"):  # tensors; bytes entries (none for a model) are skipped
            stored[hf_key(key, planner_data.get(key))] = (key, meta)
    if not stored:
        raise Incomplete(f"{shard_dir}: the DCP metadata lists no tensors")
    dtypes = {meta.properties.dtype for _, meta in stored.values()}
    dtype = torch.float32 if len(dtypes) != 1 else next(iter(dtypes))

    config = transformers.AutoConfig.from_pretrained(base)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.to_empty(device="cpu")
    model.tie_weights()  # to_empty gives tied parameters separate storage again
    expected = model.state_dict()
    missing, aliases = [], set()
    seen: dict[int, str] = {}
    for name, tensor in expected.items():
        if name in stored:
            seen.setdefault(tensor.data_ptr(), name)
        elif tensor.data_ptr() in seen:
            aliases.add(name)  # a tied weight, loaded through the tensor it shares storage with
        else:
            missing.append(name)
    unexpected = sorted(set(stored) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"{shard_dir} does not match the model of {base}: missing {missing[:5]} "
            f"({len(missing)}), unexpected {unexpected[:5]} ({len(unexpected)})"
        )
    for name in stored:
        want = tuple(stored[name][1].size)
        if tuple(expected[name].shape) != want:
            raise ValueError(
                f"{shard_dir}: {name} is {want} there, {tuple(expected[name].shape)} in the model"
            )
    # DCP reads in place into these tensors (the model's own storage), keyed as it stored them.
    targets = {stored[name][0]: expected[name] for name in stored}
    dcp.load(targets, storage_reader=reader)
    model.tie_weights()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for name in _TOKENIZER_FILES:
        if (base / name).is_file() and not (out / name).exists():
            (out / name).write_bytes((base / name).read_bytes())
    return {
        "ok": True,
        "out_dir": str(out),
        "tensors": len(stored),
        "tied": sorted(aliases),
        "n_params": sum(p.numel() for p in model.parameters()),
        "dtype": str(dtype).replace("torch.", ""),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--checkpoint", required=True, help="checkpoint-N with pytorch_model_fsdp_0/"
    )
    parser.add_argument("--base", required=True, help="a model folder with the run's config.json")
    parser.add_argument("--out", required=True, help="where the consolidated model goes")
    args = parser.parse_args(argv)
    stdout, sys.stdout = sys.stdout, sys.stderr  # library chatter to stderr; stdout is JSON
    try:
        record = consolidate(Path(args.checkpoint), Path(args.base), Path(args.out))
    except Incomplete as exc:
        print(f"consolidate: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"consolidate failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        sys.stdout = stdout
    print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
