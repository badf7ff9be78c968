"""LoRA and QLoRA for the trainwiz entry: FastChat's ``train_lora.py`` semantics, self-contained.

FastChat's own module imports deepspeed at import time (and ``transformers.deepspeed``, which
newer transformers moved to ``transformers.integrations``), so it cannot be imported where
deepspeed is absent; this sibling reproduces its flow instead: the same ``LoraArguments`` (names
and defaults), ``LoraConfig(task_type="CAUSAL_LM")`` on the loaded model, QLoRA as a 4-bit nf4
base with double quantisation and ``prepare_model_for_kbit_training``, and a save of the adapter
only (``get_peft_state_maybe_zero_3``; under ZeRO-3 the consolidated 16-bit state dict).

The hook in ``train_entry.main()``: ``pop_lora_args`` before parsing, ``load_kwargs`` into
``from_pretrained``, ``wrap`` after loading, ``save_adapter`` instead of the full save.
"""

from __future__ import annotations

import dataclasses
import os
import typing

import torch
import transformers

LORA_FLAG_PREFIXES = ("--lora_", "--q_lora")


@dataclasses.dataclass
class LoraArguments:
    """FastChat's LoraArguments, field for field (fastchat/train/train_lora.py)."""

    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    lora_target_modules: typing.List[str] = dataclasses.field(  # noqa: UP006 (HfArgumentParser)
        default_factory=lambda: ["q_proj", "v_proj"]
    )
    lora_weight_path: str = ""
    lora_bias: str = "none"
    q_lora: bool = False


def log(*args):
    if int(os.environ.get("RANK", "0")) == 0:
        print("[trainwiz-entry]", *args, flush=True)


def pop_lora_args(argv):
    """Take FastChat's LoRA flags out of argv; None when there are none (a full fine-tune)."""
    if not any(a.startswith(LORA_FLAG_PREFIXES) for a in argv):
        return None
    parser = transformers.HfArgumentParser(LoraArguments)
    parser.allow_abbrev = False  # never let a LoRA flag swallow a training flag
    (lora_args, rest) = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    argv[:] = rest
    if lora_args.lora_bias not in ("none", "all", "lora_only"):
        raise SystemExit("--lora_bias must be one of none, all, lora_only")
    return lora_args


def adapts_lm_head(lora_args):
    """Whether the adapters include lm_head (kernels.gate keeps Liger's fused loss off then)."""
    return lora_args is not None and "lm_head" in list(lora_args.lora_target_modules)


def require_qlora():
    """QLoRA's 4-bit weights need a CUDA GPU and bitsandbytes; say so before loading anything."""
    if not torch.cuda.is_available():
        raise SystemExit(
            "QLoRA (--q_lora True, training.method: qlora) needs a CUDA GPU: bitsandbytes "
            "4-bit weights do not run on the CPU. Use training.method: lora instead."
        )
    try:
        import bitsandbytes  # noqa: F401
    except Exception as exc:  # ImportError, or its CUDA setup failing at import
        raise SystemExit(
            f"QLoRA needs bitsandbytes, which failed to import ({type(exc).__name__}: {exc}): "
            "pip install bitsandbytes in the training environment "
            "(environment.extra_packages: [bitsandbytes]), or use training.method: lora"
        ) from exc


def compute_dtype(training_args):
    if training_args.fp16:
        return torch.float16
    return torch.bfloat16 if training_args.bf16 else torch.float32


def load_kwargs(lora_args, training_args):
    """Extra ``from_pretrained`` arguments: LoRA's bf16/fp16 base, QLoRA's 4-bit nf4 base."""
    if lora_args is None:
        return {}
    if not lora_args.q_lora:
        # The frozen base in the compute dtype (half of fp32); FastChat's README runs LoRA under
        # DeepSpeed, whose bf16/fp16 engine casts the model the same way. Adapters stay fp32
        # (peft's autocast_adapter_dtype).
        dtype = compute_dtype(training_args)
        return {} if dtype == torch.float32 else {"torch_dtype": dtype}
    require_qlora()
    if training_args.fsdp or is_zero3(training_args):
        log("warning: FSDP and ZeRO-3 are both incompatible with QLoRA (as in FastChat)")
    return {
        "device_map": {"": int(os.environ.get("LOCAL_RANK") or 0)},
        "quantization_config": transformers.BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_use_double_quant=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=compute_dtype(training_args),
        ),
    }


def wrap(model, lora_args, training_args):
    """The model with LoRA adapters (peft); unchanged when the run is a full fine-tune."""
    if lora_args is None:
        return model
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if lora_args.lora_weight_path:
        log("--lora_weight_path is accepted and not used, as in FastChat's train_lora.py")
    config = LoraConfig(
        r=lora_args.lora_r,
        lora_alpha=lora_args.lora_alpha,
        target_modules=list(lora_args.lora_target_modules),
        lora_dropout=lora_args.lora_dropout,
        bias=lora_args.lora_bias,
        task_type="CAUSAL_LM",
    )
    if lora_args.q_lora:
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=training_args.gradient_checkpointing
        )
    model = get_peft_model(model, config)
    if training_args.gradient_checkpointing:
        model.enable_input_require_grads()
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    log(f"LoRA r={lora_args.lora_r}: {trainable} trainable of {total} parameters")
    return model


def start_fields(model, lora_args, start_info):
    """The metrics start line's method fields; for LoRA the FLOPs a step really does.

    Frozen weights get no weight-gradient matmul, so a token costs 4·N (forward + input
    gradients) instead of 6·N, plus the unchanged attention term: MFU stays honest.
    """
    if lora_args is None:
        return {"method": "full"}
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    seq = start_info["seq_len"]
    config = model.config
    attention = 12 * getattr(config, "num_hidden_layers", 0) * getattr(config, "hidden_size", 0)
    dense = (start_info["flops_per_token"] - attention * seq) / 6
    return {
        "method": "qlora" if lora_args.q_lora else "lora",
        "trainable_params": trainable,
        "lora_r": lora_args.lora_r,
        "flops_per_token": 4 * dense + 6 * trainable + attention * seq,
        # real-token MFU's 6N: frozen weights 4 FLOPs per token, the adapters 6
        "flops_6n": start_info["flops_6n"] * 2 / 3 + 2 * trainable,
    }


# ---------------------------------------------------------------- save


def is_zero3(training_args):
    try:
        from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
    except ImportError:  # transformers < 4.33 kept it in transformers.deepspeed
        try:
            from transformers.deepspeed import is_deepspeed_zero3_enabled
        except ImportError:
            return False
    return bool(training_args.deepspeed) and is_deepspeed_zero3_enabled()


def maybe_zero_3(param):
    """A CPU copy of a parameter, gathered first when ZeRO-3 partitioned it."""
    if hasattr(param, "ds_id"):
        from deepspeed import zero

        with zero.GatheredParameters([param]):
            return param.data.detach().cpu().clone()
    return param.detach().cpu().clone()


def peft_state(named_params, bias):
    """FastChat's get_peft_state_maybe_zero_3: the adapter weights (and biases per ``bias``)."""
    named = list(named_params)
    if bias == "none":
        chosen = {k: t for k, t in named if "lora_" in k}
    elif bias == "all":
        chosen = {k: t for k, t in named if "lora_" in k or "bias" in k}
    elif bias == "lora_only":
        chosen = {k: t for k, t in named if "lora_" in k}
        wanted = {k.split("lora_")[0] + "bias" for k in chosen}
        chosen.update({k: t for k, t in named if k in wanted})
    else:
        raise NotImplementedError(bias)
    return {k: maybe_zero_3(v) for k, v in chosen.items()}


def save_adapter(trainer, lora_args):
    """Save adapter_model.safetensors + adapter_config.json into output_dir (rank 0 writes)."""
    args = trainer.args
    model = trainer.model
    if is_zero3(args):
        # the engine gathers every weight; peft's save_pretrained keeps the adapter's
        state_dict = trainer.model_wrapped._zero3_consolidated_16bit_state_dict()
    else:
        state_dict = peft_state(model.named_parameters(), lora_args.lora_bias)
    if args.local_rank in (0, -1) and int(os.environ.get("RANK", "0")) == 0:
        model.save_pretrained(args.output_dir, state_dict=state_dict)
        tokenizer = getattr(trainer, "processing_class", None) or getattr(
            trainer, "tokenizer", None
        )
        if tokenizer is not None:
            tokenizer.save_pretrained(args.output_dir)  # so a merge needs only base + adapter
    return args.output_dir
