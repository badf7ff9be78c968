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
from stepmetrics import (
    MetricsCallback,
    TokenCounter,
    count_flops_per_token,
    peak_flops_for,
    true_numel,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # siblings, as under torchrun
import guards

ATTN_CHOICES = ("auto", "flash_attention_2", "sdpa", "eager")


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
