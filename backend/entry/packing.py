"""Padding-free packing for the trainwiz entry: whole conversations in rows of a token budget.

FastChat pads every conversation to ``model_max_length``; on conversation data most of that
compute is padding (docs/performance.md). With ``--packing True`` the entry instead:

1. runs FastChat's own ``preprocess`` on each conversation (its template, its truncation at
   ``model_max_length``, its masking, its "tokenization mismatch" rule) and strips the padding;
2. packs the conversations whole into rows of ``--pack_tokens`` tokens (best-fit decreasing;
   a conversation never splits across rows: the budget must be >= model_max_length, so a
   conversation longer than the row is truncated exactly as FastChat truncates it unpacked);
3. gives each conversation position ids that restart at 0, and joins a micro-batch's rows into
   one sequence, so attention sees batch 1 with several documents: flash-attn's varlen kernel
   reads ``cu_seqlens`` from the position ids, and flex_attention gets a document mask that
   skips the empty blocks. The dense masked SDPA path is never chosen on a GPU.

The tail of a row that no conversation fits is filled with pad tokens (labels ignored,
positions restarting), so every row has the same shape and flex compiles once.

Imports torch and fastchat lazily: the packing arithmetic (``pack_lengths``) is the same one
the planner uses to predict row fill, and the wizard process must never import torch.
"""

from __future__ import annotations

import bisect
import itertools
import os
from dataclasses import dataclass
from typing import Any

IGNORE_INDEX = -100  # FastChat's IGNORE_TOKEN_ID (LabelSmoother.ignore_index)
PREPROCESS_CHUNK = 64  # conversations per FastChat preprocess call (it pads each to max length)


@dataclass
class PackOptions:
    enabled: bool = False
    pack_tokens: int | None = None  # None: model_max_length
    # each micro-batch also carries its document bounds (cu_seq_lens_q/k, max_length_q/k) for
    # torch's varlen attention (varlen.py); set by the entry once that attention is chosen
    attention_bounds: bool = False


def _truthy(text: str | None) -> bool:
    return str(text).strip().lower() in ("1", "true", "yes", "on")


def pop_options(argv: list[str], pop_option: Any) -> PackOptions:
    """Remove the entry-only packing flags from argv (FastChat's parser would reject them)."""
    enabled = pop_option(argv, "packing")
    tokens = pop_option(argv, "pack_tokens")
    return PackOptions(enabled=_truthy(enabled), pack_tokens=int(tokens) if tokens else None)


def log(*args: Any) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print("[trainwiz-entry] packing:", *args, flush=True)


# ---------------------------------------------------------------- arithmetic (no torch)


def pack_lengths(lengths: list[int], budget: int) -> list[list[int]]:
    """Indexes of ``lengths`` grouped into rows of at most ``budget`` tokens (best-fit decreasing).

    Longest first, each into the fullest row that still has room (bisect over the rows' free
    space), else a new row. Lengths above the budget are an error: the caller truncates first.
    """
    if budget <= 0:
        raise ValueError("pack budget must be positive")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    rows: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (free tokens, row index), sorted
    for i in order:
        size = lengths[i]
        if size > budget:
            raise ValueError(f"conversation {i} has {size} tokens, more than the row ({budget})")
        if size <= 0:
            continue
        at = bisect.bisect_left(free, (size, -1))
        if at < len(free):
            room, row = free.pop(at)
            rows[row].append(i)
            bisect.insort(free, (room - size, row))
        else:
            rows.append([i])
            bisect.insort(free, (budget - size, len(rows) - 1))
    return rows


def row_fill(lengths: list[int], budget: int) -> tuple[int, float]:
    """(rows, mean fill) when ``lengths`` (already truncated) are packed into ``budget`` rows."""
    rows = pack_lengths(lengths, budget)
    if not rows:
        return 0, 0.0
    return len(rows), sum(lengths) / (len(rows) * budget)


# ---------------------------------------------------------------- data (torch, fastchat)


def preprocess_each(sources: list[list[dict[str, str]]], tokenizer: Any) -> list[tuple[Any, Any]]:
    """(input_ids, labels) per conversation, exactly as FastChat's preprocess makes them, unpadded.

    A conversation whose labels are all ignored (FastChat's tokenization mismatch, or nothing
    to learn) is dropped: padded it trains on nothing, packed it would only cost compute.
    """
    from fastchat.train.train import preprocess

    out: list[tuple[Any, Any]] = []
    for start in range(0, len(sources), PREPROCESS_CHUNK):
        batch = preprocess(sources[start : start + PREPROCESS_CHUNK], tokenizer)
        for ids, labels, mask in zip(
            batch["input_ids"], batch["labels"], batch["attention_mask"], strict=True
        ):
            real = mask.nonzero()
            if real.numel() == 0:
                continue
            n = int(real.max()) + 1  # right padding: the conversation ends at its last real token
            labels = labels[:n].clone()
            if bool((labels == IGNORE_INDEX).all()):
                continue
            labels[0] = IGNORE_INDEX  # never learn a row's previous document -> this one's BOS
            out.append((ids[:n].clone(), labels))
    return out


def build_rows(examples: list[tuple[Any, Any]], budget: int, pad_id: int) -> list[dict[str, Any]]:
    """Pack unpadded examples into rows of exactly ``budget`` tokens (input_ids, labels, positions)."""
    import torch

    lengths = [int(ids.numel()) for ids, _ in examples]
    rows = []
    for members in pack_lengths(lengths, budget):
        ids = [examples[i][0] for i in members]
        labels = [examples[i][1] for i in members]
        positions = [torch.arange(int(t.numel())) for t in ids]
        used = sum(lengths[i] for i in members)
        if used < budget:
            tail = budget - used
            ids.append(torch.full((tail,), pad_id, dtype=ids[0].dtype))
            labels.append(torch.full((tail,), IGNORE_INDEX, dtype=labels[0].dtype))
            positions.append(torch.arange(tail))
        rows.append(
            {
                "input_ids": torch.cat(ids),
                "labels": torch.cat(labels),
                "position_ids": torch.cat(positions),
                "real_tokens": used,
            }
        )
    return rows


class PackedDataset:
    """Rows of packed conversations (a map-style dataset for HF Trainer)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = self.rows[i]
        return {k: row[k] for k in ("input_ids", "labels", "position_ids")}


def collate(features: list[dict[str, Any]]) -> dict[str, Any]:
    """A micro-batch of rows joined into ONE sequence: attention sees batch 1, many documents.

    Flash-attn's varlen path (transformers detects packing from position ids only at batch 1)
    and flex_attention's document mask both need it; no attention_mask is passed, so
    transformers builds the mask from the restarting position ids.
    """
    import torch

    return {k: torch.cat([f[k] for f in features]).unsqueeze(0) for k in features[0]}


def count_real_tokens(inputs: dict[str, Any], pad_id: int) -> int:
    """Conversation tokens in a packed batch: all but each row's trailing pad filler."""
    ids = inputs.get("input_ids")
    pos = inputs.get("position_ids")
    if ids is None:
        return 0
    if pos is None:
        return int(ids.numel())
    flat_ids, flat_pos = ids.reshape(-1), pos.reshape(-1)
    starts = [*(flat_pos == 0).nonzero().reshape(-1).tolist(), int(flat_ids.numel())]
    real = 0
    for a, b in itertools.pairwise(starts):
        segment = flat_ids[a:b]
        if not bool((segment == pad_id).all()):
            real += b - a
    return real


def load_sources(path: str) -> list[list[dict[str, str]]]:
    import json

    with open(path, encoding="utf-8") as handle:
        return [record["conversations"] for record in json.load(handle)]


def packed_dataset(
    path: str, tokenizer: Any, budget: int, examples_of: Any = None
) -> PackedDataset:
    """``examples_of(path)``: (ids, labels) per conversation from another template (chat_masks);
    None: FastChat's own preprocess."""
    if examples_of is None:
        examples = preprocess_each(load_sources(path), tokenizer)
    else:
        examples = examples_of(path)
    rows = build_rows(examples, budget, int(tokenizer.pad_token_id))
    real = sum(int(r["real_tokens"]) for r in rows)
    fill = real / (len(rows) * budget) if rows else 0.0
    log(
        f"{path}: {len(examples)} conversations, {real} tokens -> {len(rows)} rows of {budget} "
        f"({fill:.1%} filled)"
    )
    return PackedDataset(rows)


def make_data_module(
    tokenizer: Any,
    data_args: Any,
    training_args: Any,
    options: PackOptions,
    examples_of: Any = None,
) -> dict[str, Any]:
    """What FastChat's make_supervised_data_module returns, packed, plus the row collator."""
    max_len = int(training_args.model_max_length)
    budget = int(options.pack_tokens or max_len)
    if budget < max_len:
        raise SystemExit(
            f"--pack_tokens {budget} is below model_max_length {max_len}: a conversation must fit "
            "one row (raise pack_tokens or lower model_max_length)"
        )
    if getattr(data_args, "lazy_preprocess", False):
        log("lazy_preprocess is ignored: rows are packed once, before training starts")
    train = packed_dataset(data_args.data_path, tokenizer, budget, examples_of)
    evaluation = None
    if getattr(data_args, "eval_data_path", None):
        evaluation = packed_dataset(data_args.eval_data_path, tokenizer, budget, examples_of)
    collator = collate
    if options.attention_bounds:
        import torch
        import varlen

        def collator(features: list[dict[str, Any]]) -> dict[str, Any]:
            return varlen.add_bounds(collate(features), max_len, torch)

    return {"train_dataset": train, "eval_dataset": evaluation, "data_collator": collator}


# ---------------------------------------------------------------- attention


def choose_attention(
    requested: str, cuda: bool, flash_usable: bool, torch_version: tuple[int, ...]
) -> str:
    """Attention for packed rows: flash-attn varlen on sm80+ when it imports, else flex_attention.

    ``flash_usable``: flash_attn imports and every GPU is sm80+ (the entry's own check). Never
    SDPA/eager on a GPU when avoidable: with packed position ids they take the dense masked path
    over the whole row (O(row^2), slow). On the CPU flex_attention has no backward (torch 2.13),
    so the CPU (tests, tiny runs) uses SDPA with transformers' block-diagonal mask: the same
    attention. transformers builds flex's document mask from torch 2.6.
    """
    if not cuda:
        return "sdpa"
    if flash_usable and requested != "flex_attention":
        return "flash_attention_2"
    if torch_version < (2, 6, 0):
        log(
            "flash-attn unusable and torch < 2.6 has no flex document mask: SDPA's dense masked "
            "path (slow); install flash-attn or torch >= 2.6"
        )
        return "sdpa"
    if requested not in ("auto", "flex_attention"):
        log(f"attn_implementation {requested} cannot run packed rows fast here: flex_attention")
    return "flex_attention"
