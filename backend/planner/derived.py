"""Values that follow from the training arguments: global batch, steps, warmup, tokens per step.

These are what HF Trainer will compute at start; showing them before launch catches a
``warmup_ratio`` that rounds to zero steps or an epoch that is three steps long.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.i18n import _

# Reading a huge dataset just to count it would stall the form: above this, count is estimated.
MAX_EXACT_BYTES = 256 * 1024 * 1024


@dataclass
class Derived:
    world: int
    global_batch: int
    tokens_per_step: int  # padded: FastChat pads every sample to model_max_length
    dataset_records: int | None
    dataset_note: str
    steps_per_epoch: int | None
    total_steps: int | None
    warmup_steps: int | None


def count_records(path: str | Path) -> tuple[int | None, str]:
    """(records, note) of a FastChat JSON list or a JSONL file; None when unreadable."""
    target = Path(path).expanduser()
    if str(path).startswith("@"):
        return None, _("{path} is resolved at launch").format(path=path)
    try:
        size = target.stat().st_size
    except OSError:
        return None, _("{path}: not readable here (it may exist only on the server)").format(
            path=target
        )
    if size > MAX_EXACT_BYTES:
        return None, _("{path}: {size} MiB, too large to count in the form").format(
            path=target, size=size // (1024 * 1024)
        )
    try:
        text = target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, _("{path}: cannot read ({error})").format(path=target, error=exc)
    try:
        data = json.loads(text)
    except ValueError:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        try:
            for ln in lines:
                json.loads(ln)
        except ValueError:
            return None, _("{path}: neither a JSON list nor JSON lines").format(path=target)
        return len(lines), _("{count} records (JSON lines)").format(count=len(lines))
    if isinstance(data, list):
        return len(data), _("{count} records").format(count=len(data))
    return None, _("{path}: JSON but not a list of conversations").format(path=target)


def derive(training: Any, world: int, records: int | None, note: str = "") -> Derived:
    """HF Trainer's arithmetic (drop_last off: the last partial batch still makes a step)."""
    b = training.per_device_train_batch_size
    ga = training.gradient_accumulation_steps
    global_batch = b * ga * world
    steps_epoch = total = warmup = None
    if records is not None:
        # DistributedSampler pads to ceil(records / world) samples per rank.
        batches_per_rank = math.ceil(math.ceil(records / world) / b)
        steps_epoch = max(batches_per_rank // ga, 1)
    if training.max_steps and training.max_steps > 0:
        total = training.max_steps
    elif steps_epoch is not None:
        total = math.ceil(training.num_train_epochs * steps_epoch)
    if total is not None:
        warmup = (
            training.warmup_steps
            if training.warmup_steps > 0
            else math.ceil(training.warmup_ratio * total)
        )
    return Derived(
        world=world,
        global_batch=global_batch,
        tokens_per_step=global_batch * training.model_max_length,
        dataset_records=records,
        dataset_note=note,
        steps_per_epoch=steps_epoch,
        total_steps=total,
        warmup_steps=warmup,
    )
