"""How many real (non-pad) tokens the run will train on: the ETA's numerator (docs/monitor.md).

A sibling of ``train_entry.py``. The ``start`` line gets:

- ``real_tokens_per_epoch``: the data's non-pad tokens per epoch, counted the way the step lines
  count ``tokens_nonpad`` (attention-mask ones when FastChat pads, conversation tokens when
  packed). Eager FastChat data and packed rows are counted exactly; lazy_preprocess data is
  tokenized on a sample of at most ``SAMPLE`` conversations and scaled (``real_tokens_source``
  says which: "counted" or "sampled N of M").
- ``steps_per_epoch``: optimizer steps per epoch (the Trainer's own arithmetic, from the train
  dataloader's length on this rank and the gradient accumulation).
- ``real_tokens_total``: per epoch x the epochs the run's ``max_steps`` cover.

The monitor's ETA is then real tokens left / recent real tokens/s.
"""

import math
import os

SAMPLE = 512


def _padded_counted(dataset):
    mask = getattr(dataset, "attention_mask", None)
    if mask is not None:
        return int(mask.sum().item()), "counted"
    return None


def _packed_counted(dataset):
    rows = getattr(dataset, "rows", None)
    if isinstance(rows, list) and rows and "real_tokens" in rows[0]:
        return sum(int(r["real_tokens"]) for r in rows), "counted"
    return None


def _lengths_counted(dataset):
    lengths = getattr(dataset, "lengths", None)  # chat_masks.ChatDataset: unpadded rows
    if isinstance(lengths, list):
        return sum(int(n) for n in lengths), "counted"
    return None


def _lazy_sampled(dataset):
    raw = getattr(dataset, "raw_data", None)
    tokenizer = getattr(dataset, "tokenizer", None)
    if raw is None or tokenizer is None or len(raw) == 0:
        return None
    from fastchat.train.train import preprocess

    n = len(raw)
    if n <= SAMPLE:
        pick = list(range(n))
    else:
        pick = [round(i * (n - 1) / (SAMPLE - 1)) for i in range(SAMPLE)]
    counted = 0
    for start in range(0, len(pick), 64):
        chunk = [raw[i]["conversations"] for i in pick[start : start + 64]]
        counted += int(preprocess(chunk, tokenizer)["attention_mask"].sum().item())
    if len(pick) == n:
        return counted, "counted"
    return round(counted * n / len(pick)), f"sampled {len(pick)} of {n}"


def per_epoch(dataset):
    """(real tokens per epoch, how it was found) or (None, why not); rank 0 only (it writes)."""
    if int(os.environ.get("RANK", "0")) != 0:
        return None, "not rank 0"
    for way in (_packed_counted, _padded_counted, _lengths_counted, _lazy_sampled):
        try:
            found = way(dataset)
        except Exception as exc:  # an unknown dataset type: no real-token ETA, never a crash
            return None, f"{type(exc).__name__}: {exc}"
        if found is not None:
            return found
    return None, "unknown dataset type"


def run_fields(real_per_epoch, source, train_dataloader, grad_accum, max_steps):
    """The start line's fields, once the Trainer knows its dataloader and max_steps."""
    if real_per_epoch is None:
        return {"real_tokens_per_epoch": None, "real_tokens_source": source}
    try:
        batches = len(train_dataloader)
    except TypeError:  # an iterable dataset has no length
        return {"real_tokens_per_epoch": real_per_epoch, "real_tokens_source": source}
    steps = max(batches // grad_accum + int(batches % grad_accum > 0), 1)
    total = real_per_epoch * (max_steps / steps) if max_steps else None
    return {
        "real_tokens_per_epoch": int(real_per_epoch),
        "real_tokens_source": source,
        "steps_per_epoch": steps,
        "real_tokens_total": math.ceil(total) if total else None,
    }
