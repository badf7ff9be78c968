#!/usr/bin/env python
"""trainwiz training entry: FastChat's supervised fine-tune plus metrics and version shims.

Copied into each run directory and started by torchrun, so it must stay self-contained: it
imports only the standard library, torch, transformers and fastchat. FastChat's own argument
dataclasses and data code are used unchanged, so every flag means what it means in FastChat's
``train.py``; what this file adds is the attention choice, compatibility with transformers
4.31 - 4.57, a save that works with and without FSDP, and one JSON metrics line per optimizer
step (written by rank 0 to ``$TRAINWIZ_METRICS``, flushed line by line).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
import pathlib
import re
import sys
import tempfile
import time
import traceback

import kernels
import lora
import packing
import realtokens
import torch
import transformers
from fastchat.train import train as fastchat_train
from fastchat.train.train import (
    DataArguments,
    ModelArguments,
    TrainingArguments,
    make_supervised_data_module,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # siblings, as under torchrun
import guards

ATTN_CHOICES = ("auto", "flash_attention_2", "sdpa", "eager")

# Dense bf16 peak per GPU, matched on the name torch reports. Order matters: "H100 PCIe" first.
PEAK_FLOPS = (
    (("H100", "PCIE"), 756e12),
    (("H200",), 989e12),
    (("H100",), 989e12),
    (("H800",), 989e12),
    (("A100",), 312e12),
    (("A800",), 312e12),
)


def version_tuple(text):
    parts = [int(p) for p in re.findall(r"\d+", text)[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


TF_VERSION = version_tuple(transformers.__version__)
TORCH_VER = version_tuple(torch.__version__)


def log(*args):
    if int(os.environ.get("RANK", "0")) == 0:
        print("[trainwiz-entry]", *args, flush=True)


# ---------------------------------------------------------------- command line


def pop_option(argv, name):
    """Remove ``--name value`` / ``--name=value`` from argv; return the value (or None)."""
    value = None
    out = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == f"--{name}":
            if i + 1 >= len(argv):
                raise SystemExit(f"--{name} needs a value")
            value = argv[i + 1]
            skip = True
        elif arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
        else:
            out.append(arg)
    argv[:] = out
    return value


def adapt_argv(argv):
    """Rename flags to what the installed transformers accepts (FastChat's flags stay valid)."""
    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    renames = {}
    if "eval_strategy" in fields and "evaluation_strategy" not in fields:
        renames["evaluation_strategy"] = "eval_strategy"
    if "evaluation_strategy" in fields and "eval_strategy" not in fields:
        renames["eval_strategy"] = "evaluation_strategy"
    out = []
    for arg in argv:
        for old, new in renames.items():
            if arg == f"--{old}" or arg.startswith(f"--{old}="):
                arg = arg.replace(f"--{old}", f"--{new}", 1)
        out.append(arg)
    argv[:] = out
    if "fsdp_transformer_layer_cls_to_wrap" not in fields:
        layer = pop_option(argv, "fsdp_transformer_layer_cls_to_wrap")
        if layer:
            config = json.loads(pop_option(argv, "fsdp_config") or "{}")
            config.setdefault("transformer_layer_cls_to_wrap", [layer])
            argv += ["--fsdp_config", json.dumps(config)]
    raw = pop_option(argv, "fsdp_config")
    if raw is not None:
        if raw.lstrip().startswith("{"):
            # Older versions read fsdp_config only from a file; a file works in every version.
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
                handle.write(raw)
            raw = handle.name
        argv += ["--fsdp_config", raw]


def choose_attention(requested):
    """flash_attention_2 when it imports and every GPU is sm80+, else sdpa (eager before 4.36)."""
    if requested not in ATTN_CHOICES:
        raise SystemExit(f"--attn_implementation must be one of {', '.join(ATTN_CHOICES)}")
    if requested != "auto":
        return requested
    if torch.cuda.is_available():
        capable = all(
            torch.cuda.get_device_capability(i)[0] >= 8 for i in range(torch.cuda.device_count())
        )
        if capable:
            try:
                import flash_attn  # noqa: F401

                return "flash_attention_2"
            except Exception as exc:  # ImportError, or an undefined symbol in a broken build
                log(f"flash_attn unusable ({type(exc).__name__}: {exc}); using sdpa")
    return "sdpa" if TF_VERSION >= (4, 36, 0) else "eager"


def attention_kwargs(attn):
    if TF_VERSION >= (4, 36, 0):
        return {"attn_implementation": attn}
    if attn == "flash_attention_2" and TF_VERSION >= (4, 34, 0):
        return {"use_flash_attention_2": True}
    return {}


# ---------------------------------------------------------------- metrics


def peak_flops_for(name):
    upper = (name or "").upper()
    for keys, flops in PEAK_FLOPS:
        if all(k in upper for k in keys):
            return flops
    return None


def true_numel(param):
    """A parameter's element count as the model defines it: under ZeRO-3 ``numel()`` is this
    rank's partition (0 on one GPU: issue 21 measured MFU 0), and a bitsandbytes 4-bit weight
    packs two values a byte (QLoRA counted 3.5 of 6.7 B); both keep the real shape aside."""
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


def make_trainer_class(counter):
    class CountingTrainer(transformers.Trainer):
        def training_step(self, model, inputs, *args, **kwargs):
            counter.add(inputs)
            return super().training_step(model, inputs, *args, **kwargs)

        def _load_optimizer_and_scheduler(self, checkpoint):
            import checkpoints  # Adam's state must exist to be loaded (docs/checkpoints.md)

            if checkpoint and self.is_fsdp_enabled and checkpoints.has_fsdp_optimizer(checkpoint):
                checkpoints.prime_optimizer_state(self.optimizer, torch)
            return super()._load_optimizer_and_scheduler(checkpoint)

    return CountingTrainer


def dist_ready():
    return torch.distributed.is_available() and torch.distributed.is_initialized()


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


def save_model(trainer, training_args):
    """FSDP: full state dict gathered on CPU by rank 0. Otherwise a plain save_model (FastChat's
    trainer_save_model_safe raises KeyError: None on a model that FSDP did not wrap)."""
    from torch.distributed.fsdp import FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    wrapped = getattr(trainer, "model_wrapped", None) or trainer.model
    fsdp_model = None
    for candidate in (wrapped, trainer.model):
        if isinstance(candidate, FSDP):
            fsdp_model = candidate
            break
    if fsdp_model is not None:
        policy = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
        with FSDP.state_dict_type(fsdp_model, StateDictType.FULL_STATE_DICT, policy):
            trainer.save_model()
    else:
        trainer.save_model()
    return training_args.output_dir


# ---------------------------------------------------------------- main


def trainer_kwargs(tokenizer):
    params = inspect.signature(transformers.Trainer.__init__).parameters
    if "processing_class" in params:
        return {"processing_class": tokenizer}
    return {"tokenizer": tokenizer}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    requested = pop_option(argv, "attn_implementation") or "auto"
    pack = packing.pop_options(argv, pop_option)
    lora_args = lora.pop_lora_args(argv)  # None: full fine-tune (LoRA/QLoRA: lora.py)
    save_minutes, eval_split = pop_option(argv, "save_minutes"), pop_option(argv, "eval_split")
    adapt_argv(argv)
    active_kernels = kernels.gate(argv, pop_option, TrainingArguments, torch)
    parser = transformers.HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    import checkpoints  # siblings (torchrun puts this folder on sys.path); docs/checkpoints.md
    import evalsplit
    import tbreport

    checkpoints.fsdp_state_dict_type(training_args)
    tbreport.configure(training_args, os.environ.get("TRAINWIZ_METRICS"), log)
    if eval_split:
        n_train, n_eval = evalsplit.split_data(data_args, float(eval_split), training_args.seed)
        log(f"eval_split {eval_split}: {n_train} conversations train, {n_eval} held out")
    fastchat_train.local_rank = training_args.local_rank  # FastChat's rank0_print reads it
    attn = choose_attention("auto" if pack.enabled else requested)
    if pack.enabled:
        flash_ok = attn == "flash_attention_2"
        attn = packing.choose_attention(requested, torch.cuda.is_available(), flash_ok, TORCH_VER)
    log(f"transformers {transformers.__version__}, torch {torch.__version__}, attention {attn}")

    config = transformers.AutoConfig.from_pretrained(
        model_args.model_name_or_path,
        cache_dir=training_args.cache_dir,
        trust_remote_code=model_args.trust_remote_code,
    )
    orig_ctx_len = getattr(config, "max_position_embeddings", None)
    if orig_ctx_len and training_args.model_max_length > orig_ctx_len:
        factor = float(math.ceil(training_args.model_max_length / orig_ctx_len))
        config.rope_scaling = {"type": "linear", "factor": factor}
    config.use_cache = False
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_args.model_name_or_path,
        config=config,
        cache_dir=training_args.cache_dir,
        trust_remote_code=model_args.trust_remote_code,
        **attention_kwargs(attn),
        **lora.load_kwargs(lora_args, training_args),
    )
    model = lora.wrap(model, lora_args, training_args)
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        model_args.model_name_or_path,
        cache_dir=training_args.cache_dir,
        model_max_length=training_args.model_max_length,
        padding_side=model_args.padding_side,
        use_fast=False,
        trust_remote_code=model_args.trust_remote_code,
    )
    if tokenizer.pad_token != tokenizer.unk_token:
        tokenizer.pad_token = tokenizer.unk_token
    if pack.enabled:
        data_module = packing.make_data_module(tokenizer, data_args, training_args, pack)
    else:
        data_module = make_supervised_data_module(tokenizer=tokenizer, data_args=data_args)

    n_params, flops_per_token = count_flops_per_token(model, config, training_args.model_max_length)
    gpu_name = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    start_info = {
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "n_params": n_params,
        "flops_per_token": flops_per_token,
        "peak_flops": peak_flops_for(gpu_name) if gpu_name else None,
        "gpu_name": gpu_name,
        "attn_implementation": attn,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "seq_len": training_args.model_max_length,
        "flops_6n": 6 * (n_params - true_numel(model.get_input_embeddings().weight)),
        "packing": pack.pack_tokens or training_args.model_max_length if pack.enabled else None,
        **active_kernels,
    }
    start_info.update(lora.start_fields(model, lora_args, start_info))  # method, LoRA FLOPs
    real = realtokens.per_epoch(data_module["train_dataset"])  # the real-token ETA's total
    start_info.update(real_tokens_per_epoch=real[0], real_tokens_source=real[1])
    resume = checkpoints.resume_point(training_args.output_dir, log)
    start_info["resumed_from"] = int(resume.rsplit("-", 1)[1]) if resume else None
    counter = TokenCounter()
    if pack.enabled:
        counter.nonpad_of = lambda inputs: packing.count_real_tokens(inputs, tokenizer.pad_token_id)
    metrics = MetricsCallback(os.environ.get("TRAINWIZ_METRICS"), counter, start_info)
    attempt = int(os.environ.get("TRAINWIZ_ATTEMPT", "1"))
    saver = checkpoints.make_checkpoint_callback(transformers, torch)(
        training_args, float(save_minutes) if save_minutes else None, attempt
    )
    evals = evalsplit.make_eval_callback(transformers)(metrics.write)
    trainer = make_trainer_class(counter)(
        model=model,
        args=training_args,
        callbacks=[metrics, saver, evals],
        **trainer_kwargs(tokenizer),
        **data_module,
    )
    started = time.time()
    import memlimit  # TRAINWIZ_TRAIN_AS_HEADROOM_MB: a real host OOM on a small machine (tests)

    memlimit.apply(log)
    try:
        if resume:
            log(f"resuming from {resume} (attempt {attempt})")
        result = trainer.train(resume_from_checkpoint=resume)
        if trainer.eval_dataset is not None and evals.last_step != trainer.state.global_step:
            trainer.evaluate()  # the summary's eval loss is the final model's
        model.config.use_cache = True
        trainer.save_state()
        if lora_args is not None:
            saved_to = lora.save_adapter(trainer, lora_args)
        else:
            checkpoints.full_state_dict_for_final_save(trainer)
            saved_to = save_model(trainer, training_args)
    except BaseException as exc:
        metrics.end(
            train_runtime=time.time() - started, saved_to=None, ok=False, **guards.end_fields(exc)
        )
        if isinstance(exc, guards.NonFiniteLoss):
            log(str(exc))  # "[trainwiz-entry] non-finite loss at step N ...": diagnosis loss_nan
            raise SystemExit(guards.EXIT_CODE) from None
        if not isinstance(exc, KeyboardInterrupt):
            traceback.print_exc()
        raise
    losses = {"train_loss": result.training_loss, "eval_loss": evals.last, "best_eval": evals.best}
    metrics.end(train_runtime=time.time() - started, saved_to=saved_to, ok=True, **losses)
    log(f"model saved to {saved_to}")


if __name__ == "__main__":
    main()
