"""Eval for the entry: a held-out split of the training data, and eval lines in metrics.jsonl.

A sibling of ``train_entry.py`` (imported there as ``evalsplit``). ``training.eval_split`` holds
out a fraction of ``data_path``: the same conversations for the same seed and file, on every rank
and every attempt of a run (a resumed run evaluates on what the first attempt held out). Each
rank writes its own copy of the two files into a private temp folder, so no rank waits for or
races another.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
from typing import Any


def held_out_indices(n: int, fraction: float, seed: int) -> list[int]:
    """Which of ``n`` conversations are held out: at least one, never all (deterministic)."""
    if n < 2:
        raise SystemExit(f"--eval_split needs at least 2 conversations in data_path, found {n}")
    k = min(n - 1, max(1, round(n * fraction)))
    return sorted(random.Random(seed).sample(range(n), k))


def split_data(data_args: Any, fraction: float, seed: int) -> tuple[int, int]:
    """Point ``data_args`` at train/eval files split from data_path; return (n_train, n_eval)."""
    with open(data_args.data_path, encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, list):
        raise SystemExit(f"--eval_split: {data_args.data_path} is not a JSON list of conversations")
    held = set(held_out_indices(len(data), fraction, seed))
    train = [item for i, item in enumerate(data) if i not in held]
    evals = [item for i, item in enumerate(data) if i in held]
    folder = tempfile.mkdtemp(prefix=f"trainwiz-split-r{os.environ.get('RANK', '0')}-")
    for name, part in (("train.json", train), ("eval.json", evals)):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
            json.dump(part, handle)
    data_args.data_path = os.path.join(folder, "train.json")
    data_args.eval_data_path = os.path.join(folder, "eval.json")
    return len(train), len(evals)


def make_eval_callback(transformers: Any) -> Any:
    """The callback class, built here so that this module imports without transformers."""

    class EvalLines(transformers.TrainerCallback):
        """One ``kind: eval`` line per evaluation (rank 0 writes through the metrics writer)."""

        def __init__(self, write: Any) -> None:
            self.write = write
            self.best: float | None = None
            self.last: float | None = None
            self.last_step: int | None = None

        def on_evaluate(self, args: Any, state: Any, control: Any, metrics: Any = None, **kw: Any):
            metrics = metrics or {}
            loss = metrics.get("eval_loss")
            if loss is None:
                return
            self.last, self.last_step = float(loss), int(state.global_step)
            self.best = self.last if self.best is None else min(self.best, self.last)
            self.write(
                {
                    "kind": "eval",
                    "step": int(state.global_step),
                    "eval_loss": self.last,
                    "eval_runtime": metrics.get("eval_runtime"),
                    "eval_samples_per_s": metrics.get("eval_samples_per_second"),
                    "time": time.time(),
                }
            )

    return EvalLines
