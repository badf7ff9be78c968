"""Per-step metrics of the training entry: FLOPs per token, the token counter and the callback
that writes one JSON line per optimizer step (docs/run-format.md).

A sibling of train_entry.py, copied into each run directory with it; like it, it imports only the
standard library, torch, transformers and its siblings.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time

import guards
import realtokens
import torch
import transformers

# Dense bf16 peak per GPU, matched on the name torch reports. Order matters: "H100 PCIe" first.
PEAK_FLOPS = (
    (("H100", "PCIE"), 756e12),
    (("H200",), 989e12),
    (("H100",), 989e12),
    (("H800",), 989e12),
    (("A100",), 312e12),
    (("A800",), 312e12),
)


def peak_flops_for(name):
    upper = (name or "").upper()
    for keys, flops in PEAK_FLOPS:
        if all(k in upper for k in keys):
            return flops
    return None


def true_numel(param):
    """A parameter's element count as the model defines it: under ZeRO-3 ``numel()`` is this
    rank's partition (0 on one GPU: the ZeRO-3 H200 run measured MFU 0), and a bitsandbytes 4-bit
    weight packs two values a byte (QLoRA counted 3.5 of 6.7 B); both keep the real shape aside."""
    ds_numel = getattr(param, "ds_numel", None)
    if ds_numel:
        return int(ds_numel)
    shape = getattr(getattr(param, "quant_state", None), "shape", None)
    if shape is not None:
        return int(math.prod(shape))
    return param.numel()


def count_flops_per_token(model, config, seq_len):
    """PaLM's 6·N + 12·L·h·s, N without the input embedding (an lm_head tied to it counts)."""
    n_params = sum(true_numel(p) for p in model.parameters())
    embed = model.get_input_embeddings()
    n_embed = true_numel(embed.weight) if embed is not None else 0
    tied = bool(getattr(config, "tie_word_embeddings", False))
    n_compute = n_params - (0 if tied else n_embed)
    layers = getattr(config, "num_hidden_layers", 0)
    hidden = getattr(config, "hidden_size", 0)
    return n_params, 6 * n_compute + 12 * layers * hidden * seq_len


class TokenCounter:
    """Tokens seen by this rank since the last optimizer step (filled by the Trainer subclass)."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.tokens = 0
        self.nonpad = 0
        self.samples = 0

    nonpad_of = None  # packed rows have no attention_mask: packing counts their real tokens

    def add(self, inputs):
        ids = inputs.get("input_ids")
        mask = inputs.get("attention_mask")
        if ids is not None:
            self.tokens += int(ids.numel())
            self.samples += int(ids.shape[0])
        if self.nonpad_of is not None:
            self.nonpad += self.nonpad_of(inputs)
        elif mask is not None:
            self.nonpad += int(mask.sum().item())
        elif ids is not None:
            self.nonpad += int(ids.numel())


def dist_ready():
    return torch.distributed.is_available() and torch.distributed.is_initialized()


PAUSE_ENV = "TRAINWIZ_STEP_PAUSE_S"
PAUSE_FROM_ENV = "TRAINWIZ_STEP_PAUSE_FROM_STEP"


def _env_number(name, default, low, high, example):
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw!r}: give a number, e.g. {example}") from None
    if not (low <= value <= high):
        raise SystemExit(f"{name}={raw!r}: give a number from {low} to {high}")
    return value


def step_pause():
    """(seconds, from_step): idle that long after each optimizer step past ``from_step``.

    ``TRAINWIZ_STEP_PAUSE_S`` (default 0: none) and ``TRAINWIZ_STEP_PAUSE_FROM_STEP`` (default
    0) exist for the test suite: a test that keeps a tiny run alive while it looks at it (a
    stop, an attach, the wizard reopened) would otherwise have that run spin a whole core the
    entire time, on a machine whose other cores run the other tests, while a short run meant to
    finish is not slowed. The pause is left out of every step's measured time. Nobody needs it
    in production.
    """
    pause = _env_number(PAUSE_ENV, 0.0, 0, 60, "0.2")
    return pause, int(_env_number(PAUSE_FROM_ENV, 0, 0, 1e9, "20"))


class MetricsCallback(transformers.TrainerCallback):
    """One ``kind: step`` line per optimizer step; see docs/run-format.md for every field."""

    def __init__(self, path, counter, start_info):
        self.path = path
        self.counter = counter
        self.start_info = start_info
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.handle = None
        self.pending = None
        self.mark = time.perf_counter()
        self.cuda = torch.cuda.is_available()
        self.pause_s, self.pause_from = step_pause()

    def write(self, record):
        if self.rank != 0 or not self.path:
            return
        record.setdefault("attempt", int(os.environ.get("TRAINWIZ_ATTEMPT", "1")))
        if self.handle is None:
            pathlib.Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self.handle = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        guards.append_line(
            self.handle, json.dumps(guards.json_safe(record), allow_nan=False) + "\n"
        )

    def flush_pending(self):
        if self.pending is not None:
            self.write(self.pending)
            self.pending = None

    def device(self):
        if self.cuda:
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def on_train_begin(self, args, state, control, **kwargs):
        info = self.start_info
        if info.get("real_tokens_per_epoch") is not None:  # the real-token ETA's total
            info.update(realtokens.run_fields(info["real_tokens_per_epoch"], info.get(
                "real_tokens_source"), kwargs.get("train_dataloader"),
                args.gradient_accumulation_steps, state.max_steps))  # fmt: skip
        self.write({"kind": "start", "time": time.time(), **self.start_info})
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        self.mark = time.perf_counter()

    def on_step_begin(self, args, state, control, **kwargs):
        self.flush_pending()

    def on_step_end(self, args, state, control, **kwargs):
        if self.cuda:
            torch.cuda.synchronize()
        now = time.perf_counter()
        step_time = max(now - self.mark, 1e-9)
        counts = torch.tensor(
            [self.counter.tokens, self.counter.nonpad, self.counter.samples],
            dtype=torch.float64,
            device=self.device(),
        )
        self.counter.reset()
        mem = torch.tensor(
            [
                torch.cuda.max_memory_allocated() / 2**30 if self.cuda else 0.0,
                torch.cuda.max_memory_reserved() / 2**30 if self.cuda else 0.0,
            ],
            dtype=torch.float64,
            device=self.device(),
        )
        mems = [mem]
        if dist_ready() and self.world > 1:
            torch.distributed.all_reduce(counts)
            mems = [torch.zeros_like(mem) for _ in range(self.world)]
            torch.distributed.all_gather(mems, mem)
        tokens, nonpad, samples = (float(x) for x in counts.tolist())
        tokens_per_s = tokens / step_time
        peak = self.start_info.get("peak_flops")
        mfu = mfu_nonpad = None
        if peak and self.cuda:
            mfu = tokens_per_s / self.world * self.start_info["flops_per_token"] / peak
            mfu_nonpad = nonpad / step_time / self.world * self.start_info["flops_6n"] / peak
        self.pending = {
            "kind": "step",
            "step": int(state.global_step),
            "max_steps": int(state.max_steps),
            "epoch": float(state.epoch or 0.0),
            "loss": None,
            "learning_rate": None,
            "grad_norm": None,
            "step_time_s": step_time,
            "tokens": int(tokens),
            "tokens_nonpad": int(nonpad),
            "samples": int(samples),
            "tokens_per_s": tokens_per_s,
            "tokens_nonpad_per_s": nonpad / step_time,
            "samples_per_s": samples / step_time,
            "mfu": mfu,
            "mfu_nonpad": mfu_nonpad,
            "peak_mem_gib": [round(float(m[0]), 3) for m in mems] if self.cuda else None,
            "peak_reserved_gib": [round(float(m[1]), 3) for m in mems] if self.cuda else None,
            "time": time.time(),
        }
        if self.pause_s and state.global_step > self.pause_from:
            time.sleep(self.pause_s)  # after the step's time was taken: not counted in it
        self.mark = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if self.pending is not None and self.pending["step"] == state.global_step:
            for key in ("loss", "learning_rate", "grad_norm"):
                if logs.get(key) is not None:
                    self.pending[key] = float(logs[key])
            if "loss" in logs:
                self.flush_pending()
        self.mark = time.perf_counter()
        guards.check_logs(logs, state.global_step)

    def on_save(self, args, state, control, **kwargs):
        self.mark = time.perf_counter()  # a checkpoint save is not the next step's time

    def on_evaluate(self, args, state, control, **kwargs):
        self.mark = time.perf_counter()

    def on_train_end(self, args, state, control, **kwargs):
        self.flush_pending()

    def end(self, **fields):
        self.flush_pending()
        self.write({"kind": "end", "time": time.time(), **fields})
        if self.handle is not None:
            os.close(self.handle)
            self.handle = None


# ---------------------------------------------------------------- save
