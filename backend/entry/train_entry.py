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

import atexit
import dataclasses
import inspect
import json
import math
import os
import re
import sys
import tempfile
import time

import importgc  # before torch: the cyclic GC is paused while the training stack imports
import kernels
import lora
import packing
import realtokens
import regional
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
import chat_masks  # the run's chat template and exact loss masks (template_choice.py decides)
import checkpoints  # docs/checkpoints.md
import ending
import evalsplit
import guards
import memlimit  # TRAINWIZ_TRAIN_AS_HEADROOM_MB: a real host OOM on a small machine (tests)
import ranks
import stepprofile  # TRAINWIZ_PROFILE_STEPS: where a step's time goes (benchmarks)
import tbreport
import template_choice
import varlen  # torch's own FlashAttention-2 varlen for packed rows (no flash-attn package)

importgc.imported()

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
            # In the run dir when there is one, and removed at exit: never a /tmp/tmp*.json left.
            folder = os.environ.get("TRAINWIZ_RUN_DIR") or None
            with tempfile.NamedTemporaryFile(
                "w", prefix=".fsdp-config-", suffix=".json", dir=folder, delete=False
            ) as handle:
                handle.write(raw)
            atexit.register(_remove_quietly, handle.name)
            raw = handle.name
        argv += ["--fsdp_config", raw]


def _remove_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


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
            try:  # imported here: whether flash-attn loads at all is the question asked
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


def run_mean_loss(log_history, hf_train_loss, global_step, resumed_from):
    """The run's mean train loss after a resume. HF's ``train_loss`` is this attempt's loss sum
    divided by *all* the run's steps; the steps before the checkpoint are in the restored
    log_history (each logged loss covering the steps since the previous log)."""
    if not resumed_from or not global_step:
        return hf_train_loss
    before, covered, previous = 0.0, 0, 0
    for entry in log_history:
        step, loss = entry.get("step"), entry.get("loss")
        if not isinstance(loss, (int, float)) or not isinstance(step, int) or step <= previous:
            continue
        if step > resumed_from or not math.isfinite(loss):
            continue
        before += loss * (step - previous)
        covered += step - previous
        previous = step
    if not covered:  # no history of the earlier steps: nothing better to say
        return hf_train_loss
    before += before / covered * (resumed_from - covered)  # logs not on the checkpoint's step
    return (before + hf_train_loss * global_step) / global_step


def make_trainer_class(counter, resumed_from=None):
    class CountingTrainer(transformers.Trainer):
        def training_step(self, model, inputs, *args, **kwargs):
            counter.add(inputs)
            return super().training_step(model, inputs, *args, **kwargs)

        def log(self, logs, *args, **kwargs):
            if "train_loss" in logs and resumed_from:  # the end line: the run's mean, not HF's
                logs["train_loss"] = run_mean_loss(
                    self.state.log_history, logs["train_loss"], self.state.global_step,
                    resumed_from,
                )  # fmt: skip
            return super().log(logs, *args, **kwargs)

        def _load_optimizer_and_scheduler(self, checkpoint):
            # Adam's state must exist to be loaded (docs/checkpoints.md)
            if checkpoint and self.is_fsdp_enabled and checkpoints.has_fsdp_optimizer(checkpoint):
                checkpoints.prime_optimizer_state(self.optimizer, torch)
            return super()._load_optimizer_and_scheduler(checkpoint)

    return CountingTrainer


def save_model(trainer, training_args):
    """FSDP: full state dict gathered on CPU by rank 0. Otherwise a plain save_model (FastChat's
    trainer_save_model_safe raises KeyError: None on a model that FSDP did not wrap)."""
    # Deferred: torch.distributed.fsdp loads the distributed stack, which only a save needs.
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


def load_tokenizer(model_args, training_args, config, chat_setting):
    """The tokenizer, the template it trains with (template_choice.py) and how it pads.

    The vicuna path is FastChat's exactly: the slow tokenizer, pad = unk. Every other template
    gets the fast tokenizer (Llama-3 and Qwen ship only ``tokenizer.json``) and a pad token that
    never grows the vocabulary (chat_masks.ensure_pad_token).
    """
    try:
        choice = template_choice.decide(chat_setting, model_args.model_name_or_path)
    except template_choice.TemplateError as exc:
        raise SystemExit(str(exc)) from None

    def load(fast):
        return transformers.AutoTokenizer.from_pretrained(
            model_args.model_name_or_path,
            cache_dir=training_args.cache_dir,
            model_max_length=training_args.model_max_length,
            padding_side=model_args.padding_side,
            use_fast=fast,
            trust_remote_code=model_args.trust_remote_code,
        )

    tokenizer = load(not choice.is_vicuna and choice.template != "auto")
    if choice.template == "auto":  # not a local directory (a Hub id): decide on what loaded
        own = getattr(tokenizer, "chat_template", None)
        kind = getattr(config, "model_type", None)
        spm = getattr(tokenizer, "sp_model", None) is not None  # Llama-1/2 sentencepiece
        choice = template_choice.decide_from(chat_setting, own, kind, True, sentencepiece=spm)
        if not choice.is_vicuna:
            tokenizer = load(True)
    if choice.is_vicuna:
        if tokenizer.pad_token != tokenizer.unk_token:
            tokenizer.pad_token = tokenizer.unk_token
        return tokenizer, choice, None
    return tokenizer, choice, chat_masks.ensure_pad_token(tokenizer)


def make_data(tokenizer, data_args, training_args, pack, choice):
    """FastChat's data module on the vicuna path, else the template's exact masks; packed or not."""
    if choice.is_vicuna:
        if pack.enabled:
            return packing.make_data_module(tokenizer, data_args, training_args, pack)
        return make_supervised_data_module(tokenizer=tokenizer, data_args=data_args)
    if pack.enabled:
        renderer = chat_masks.renderer_for(choice.template, tokenizer)
        max_length = int(training_args.model_max_length)

        def examples_of(path):
            masked = chat_masks.masked_file(path, renderer, tokenizer, max_length)
            return [(torch.tensor(i), torch.tensor(lab)) for i, lab in masked.examples]

        return packing.make_data_module(tokenizer, data_args, training_args, pack, examples_of)
    return chat_masks.make_data_module(tokenizer, data_args, training_args, choice.template)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    requested = pop_option(argv, "attn_implementation") or "auto"
    pack = packing.pop_options(argv, pop_option)
    lora_args = lora.pop_lora_args(argv)  # None: full fine-tune (LoRA/QLoRA: lora.py)
    layer_opts = regional.pop_options(argv, pop_option)  # regional compile, selective recompute
    save_minutes, eval_split = pop_option(argv, "save_minutes"), pop_option(argv, "eval_split")
    chat_setting = pop_option(argv, "chat_template") or "auto"
    if not template_choice.valid_setting(chat_setting):
        raise SystemExit(f"--{template_choice.setting_error(chat_setting)}")
    no_fsdp = ranks.without_fsdp_on_cpu(argv, torch)  # the plan's note: DDP on the CPU
    if no_fsdp:
        log(f"no FSDP on the CPU (plain DDP, every process holds the whole model): "
            f"{' '.join(no_fsdp)} not applied")  # fmt: skip
    adapt_argv(argv)
    active_kernels = kernels.gate(argv, pop_option, TrainingArguments, torch,
                                  lm_head_adapter=lora.adapts_lm_head(lora_args))  # fmt: skip
    added = ranks.device_args(argv, TrainingArguments, torch)  # CPU: use_cpu, else 1 copy each
    parser = transformers.HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    ending.on_sigterm()
    ending.finish(  # the process group ends cleanly on success, failure and stop (ending.py)
        lambda: train_ranks(model_args, data_args, training_args, requested, pack, lora_args,
                            save_minutes, eval_split, active_kernels, added, layer_opts,
                            chat_setting),
        torch,
        ranks.rank(),
    )  # fmt: skip


def train_ranks(model_args, data_args, training_args, requested, pack, lora_args,
                save_minutes, eval_split, active_kernels, added, layer_opts=(False, None),
                chat_setting="auto"):  # fmt: skip
    """Everything after the arguments: the model, the data, the trainer, the save."""
    checkpoints.fsdp_state_dict_type(training_args)
    if added:
        log(f"device arguments added: {' '.join(added)}")
    try:
        parallel = ranks.trainer_world(training_args, torch)  # the trainer's, not the plan's
    except ranks.WorldSizeMismatch as exc:
        log(str(exc))
        MetricsCallback(os.environ.get("TRAINWIZ_METRICS"), TokenCounter(), {}).end(
            train_runtime=0.0, saved_to=None, ok=False, error=str(exc), reason=ranks.REASON
        )
        ranks.meet_before_refusing(torch)
        raise SystemExit(ranks.EXIT_CODE) from None
    log(
        f"world size {parallel['world_size']} ({parallel['parallel_mode']}, "
        f"backend {parallel['dist_backend']})"
    )
    tbreport.configure(training_args, os.environ.get("TRAINWIZ_METRICS"), log)
    if eval_split:
        n_train, n_eval = evalsplit.split_data(data_args, float(eval_split), training_args.seed)
        log(f"eval_split {eval_split}: {n_train} conversations train, {n_eval} held out")
    fastchat_train.local_rank = training_args.local_rank  # FastChat's rank0_print reads it
    attn = choose_attention("auto" if pack.enabled else requested)
    if pack.enabled:
        flash_ok = attn == "flash_attention_2"
        attn = packing.choose_attention(requested, torch.cuda.is_available(), flash_ok, TORCH_VER)
        if attn == "flex_attention" and requested == "auto" and varlen.wanted():
            ok, why = varlen.usable(torch, TF_VERSION, compiled=bool(layer_opts[0]))
            if ok:
                varlen.register(transformers)
                attn, pack.attention_bounds = varlen.NAME, True
            elif why != "no CUDA" or varlen.asked():
                log(f"torch varlen attention not used ({why}): flex_attention")
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
    # The data before the model: a template that cannot mask the data is refused before minutes
    # of loading weights and before any GPU time.
    tokenizer, choice, pad_note = load_tokenizer(model_args, training_args, config, chat_setting)
    log(
        f"chat template {choice.template} ({choice.reason})"
        + (f"; pad {pad_note}" if pad_note else "")
    )
    try:
        data_module = make_data(tokenizer, data_args, training_args, pack, choice)
    except chat_masks.MostlyUnmaskable as exc:
        log(str(exc.code))
        MetricsCallback(os.environ.get("TRAINWIZ_METRICS"), TokenCounter(), {}).end(
            train_runtime=0.0, saved_to=None, ok=False, error=str(exc.code), reason="unmaskable"
        )
        raise SystemExit(5) from None

    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_args.model_name_or_path,
        config=config,
        cache_dir=training_args.cache_dir,
        trust_remote_code=model_args.trust_remote_code,
        **attention_kwargs(attn),
        **lora.load_kwargs(lora_args, training_args),
    )
    model = lora.wrap(model, lora_args, training_args)
    active_kernels = {
        **active_kernels,
        **regional.apply(
            model, torch, compile_layers=layer_opts[0], recompute_layers=layer_opts[1],
            gradient_checkpointing=bool(training_args.gradient_checkpointing),
        ),
    }  # fmt: skip

    n_params, flops_per_token = count_flops_per_token(model, config, training_args.model_max_length)
    gpu_name = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    start_info = {
        **parallel,  # world_size as the trainer uses it, and how (parallel_mode, backend)
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
        "chat_template": choice.template,
        "chat_template_reason": choice.reason,
        "pad_token": pad_note,
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
    samples = ranks.wrap_train_dataset(data_module, torch)  # ranks/rank<R>.samples
    callbacks = [metrics, saver, evals, ranks.make_start_callback(transformers, samples)]
    profiler = stepprofile.make_callback(transformers, os.environ.get("TRAINWIZ_RUN_DIR"))
    if profiler is not None:
        callbacks.append(profiler)
    trainer = make_trainer_class(counter, start_info["resumed_from"])(
        model=model,
        args=training_args,
        callbacks=callbacks,
        **trainer_kwargs(tokenizer),
        **data_module,
    )
    started = time.time()
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
        ranks.write_rank_record(trainer, parallel, samples, torch, ok=False)
        metrics.end(
            train_runtime=time.time() - started, saved_to=None, ok=False, **guards.end_fields(exc)
        )
        if isinstance(exc, guards.NonFiniteLoss):
            log(str(exc))  # "[trainwiz-entry] non-finite loss at step N ...": diagnosis loss_nan
            raise SystemExit(guards.EXIT_CODE) from None
        raise  # ending.finish prints the traceback (once) and ends the rank
    ranks.write_rank_record(trainer, parallel, samples, torch, ok=True)
    train_loss = result.metrics.get("train_loss", result.training_loss)  # log() corrected it
    losses = {"train_loss": train_loss, "eval_loss": evals.last, "best_eval": evals.best}
    metrics.end(train_runtime=time.time() - started, saved_to=saved_to, ok=True, **losses)
    log(f"model saved to {saved_to}")


if __name__ == "__main__":
    main()
