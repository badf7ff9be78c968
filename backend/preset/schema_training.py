"""Preset sections ``training`` (FastChat's / HF's own flag names; LoRA and ZeRO) and ``mirrors``."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from backend.entry.template_choice import setting_error as template_setting_error
from backend.entry.template_choice import valid_setting as valid_template_setting
from backend.i18n import _
from backend.preset.grammar import (
    MAX_TEXT,
)
from backend.preset.schema_base import BIG, _Strict
from backend.preset.schema_launch import _matches

LORA_BIASES = ("none", "all", "lora_only")


class LoraSettings(_Strict):
    """FastChat's ``train_lora.py`` LoraArguments, same names and defaults (q_lora: method)."""

    lora_r: int = Field(8, ge=1, le=4096, description="adapter rank")
    lora_alpha: int = Field(16, ge=1, description="scale; the update is alpha / r times BA")
    lora_dropout: float = Field(0.05, ge=0, lt=1)
    lora_target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "v_proj"],
        min_length=1,
        description="module names that get adapters (Llama: q_proj k_proj v_proj o_proj ...)",
    )
    lora_weight_path: str = Field("", description="FastChat's flag; unused by its train_lora")
    lora_bias: Literal["none", "all", "lora_only"] = "none"

    @field_validator("lora_target_modules")
    @classmethod
    def _module_names(cls, value: list[str]) -> list[str]:
        for name in value:
            _matches(r"[A-Za-z_][A-Za-z0-9_.]*", name, "a module name like q_proj")
        return value


class ZeroSettings(_Strict):
    """DeepSpeed ZeRO instead of FSDP: trainwiz writes the JSON config into the run dir."""

    stage: Literal[2, 3] = Field(3, description="2: shard optimizer+grads; 3: also the weights")
    offload_optimizer: bool = Field(False, description="Adam states in host RAM (CPU-Adam)")
    offload_param: bool = Field(False, description="stage 3 only: weights in host RAM")

    @model_validator(mode="after")
    def _param_offload_needs_stage3(self) -> ZeroSettings:
        if self.offload_param and self.stage != 3:
            raise ValueError(
                _("offload_param needs stage: 3 (stage 2 keeps every weight on the GPU)")
            )
        return self


class TrainingArgs(_Strict):
    """FastChat's ModelArguments + DataArguments + TrainingArguments, by their flag names.

    Declared in the seed's order so the rendered command reads like the seed's.
    """

    model_name_or_path: str | None = Field(
        None, description="as the trainer sees it; None: model.dir (mapped through volumes)"
    )
    data_path: str = Field(..., description="FastChat conversation JSON for training")
    output_dir: str
    bf16: bool = False
    num_train_epochs: float = Field(3.0, gt=0, le=100_000)
    per_device_train_batch_size: int = Field(8, ge=1, le=65536)
    per_device_eval_batch_size: int = Field(8, ge=1, le=65536)
    gradient_accumulation_steps: int = Field(1, ge=1, le=65536)
    eval_strategy: Literal["no", "steps", "epoch"] = Field("no", alias="evaluation_strategy")
    eval_steps: float | None = Field(None, gt=0, le=BIG)
    save_strategy: Literal["no", "steps", "epoch", "best"] = "steps"
    save_steps: float = Field(500, gt=0, le=BIG)
    save_total_limit: int | None = Field(None, ge=1, le=BIG)
    learning_rate: float = Field(5e-5, gt=0, le=10)
    weight_decay: float = Field(0.0, ge=0, le=10)
    warmup_ratio: float = Field(0.0, ge=0, le=1)
    lr_scheduler_type: str = "linear"
    logging_steps: float = Field(500, gt=0, le=BIG)
    fsdp: str = Field("", description="e.g. 'full_shard auto_wrap offload'")
    fsdp_transformer_layer_cls_to_wrap: str | None = None
    tf32: bool | None = None
    model_max_length: int = Field(512, ge=8, le=2**22)
    gradient_checkpointing: bool = False
    lazy_preprocess: bool = False
    # FastChat's own arguments beyond the seed's command.
    eval_data_path: str | None = None
    padding_side: Literal["right", "left"] = "right"
    trust_remote_code: bool = False
    cache_dir: str | None = None
    optim: str = "adamw_torch"
    # Common Hugging Face arguments.
    max_steps: int = Field(-1, ge=-1, le=BIG, description="-1: unset (HF: epochs decide)")
    warmup_steps: int = Field(0, ge=0, le=BIG)
    adam_beta1: float = Field(0.9, ge=0, lt=1)
    adam_beta2: float = Field(0.999, ge=0, lt=1)
    adam_epsilon: float = Field(1e-8, gt=0, le=1)
    max_grad_norm: float = Field(1.0, ge=0, le=1e6)
    fp16: bool = False
    fsdp_config: dict[str, Any] | None = None
    deepspeed: str | None = None
    # Training method and ZeRO (docs/lora.md; rendered by backend/plan/hf_flags.py, not as-is).
    method: Literal["full", "lora", "qlora"] = Field(
        "full", description="full fine-tune, LoRA adapters, or QLoRA (4-bit base, CUDA only)"
    )
    lora: LoraSettings = Field(default_factory=LoraSettings)
    zero: ZeroSettings | None = Field(None, description="DeepSpeed ZeRO; None: FSDP or plain DDP")
    seed: int = Field(42, ge=0, le=2**32 - 1)
    dataloader_num_workers: int = Field(0, ge=0, le=1024)
    report_to: str | None = None
    ddp_timeout: int = Field(1800, gt=0, le=30 * 86400)
    logging_first_step: bool = False
    disable_tqdm: bool | None = None
    # trainwiz entry only (not FastChat flags): attention implementation, time-based checkpoints,
    # a held-out eval split of data_path (docs/checkpoints.md).
    attn_implementation: Literal["auto", "flash_attention_2", "sdpa", "eager"] = "auto"
    # Throughput on real data (docs/performance.md). packing/pack_tokens are the trainwiz entry's
    # (off by default, so the seed stays the seed); the kernel and compile switches are Hugging
    # Face's own flags, which the entry turns off with a log line where the installed stack lacks
    # them.
    packing: bool = Field(
        False,
        description="pack whole conversations into rows of pack_tokens (no padding); trainwiz "
        "entry only",
    )
    pack_tokens: int | None = Field(
        None, ge=8, le=2**22, description="tokens per packed row; None: model_max_length"
    )
    use_liger_kernel: bool = Field(
        False, description="Liger's Triton kernels (RMSNorm, RoPE, SwiGLU, fused linear CE)"
    )
    torch_compile: bool = Field(False, description="torch.compile the model (startup cost)")
    compile_layers: bool = Field(
        False,
        description="torch.compile each decoder layer (regional: one graph, reused by every "
        "layer; a shorter cold start than torch_compile); trainwiz entry only",
    )
    recompute_layers: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="checkpoint this many decoder layers, spread evenly (selective recompute; "
        "the rest keep their activations); None: none, unless gradient_checkpointing; "
        "trainwiz entry only",
    )
    save_minutes: float | None = Field(
        None,
        gt=0,
        le=10080,
        description="also checkpoint when this many minutes passed since the last one",
    )
    eval_split: float | None = Field(
        None,
        gt=0,
        lt=0.5,
        description="hold out this fraction of data_path for eval loss (deterministic by seed)",
    )

    chat_template: str = Field(
        "auto",
        max_length=64,
        description="auto (the tokenizer's own template when it has one, vicuna for a "
        "Llama/Vicuna model without one), vicuna (FastChat's train.py), model (the tokenizer's "
        "own), or a FastChat template name; trainwiz entry only",
    )

    @field_validator("chat_template")
    @classmethod
    def _known_template(cls, value: str) -> str:
        if not valid_template_setting(value):
            raise ValueError(template_setting_error(value))
        return value

    @model_validator(mode="after")
    def _consistent(self) -> TrainingArgs:
        if self.bf16 and self.fp16:
            raise ValueError(_("bf16 and fp16 are both on: choose one (bf16 on Ampere or newer)"))
        if self.pack_tokens is not None and self.pack_tokens < self.model_max_length:
            raise ValueError(
                _(
                    "pack_tokens {pack_tokens} is below model_max_length {model_max_length}: a "
                    "conversation must fit one packed row"
                ).format(pack_tokens=self.pack_tokens, model_max_length=self.model_max_length)
            )
        _method_checks(self)
        _layer_checks(self)
        return self

    @field_validator("fsdp_config")
    @classmethod
    def _fsdp_config(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(json.dumps(value)) > MAX_TEXT:
            raise ValueError(
                _("fsdp_config is larger than {MAX_TEXT} characters as JSON").format(
                    MAX_TEXT=MAX_TEXT
                )
            )
        return value


MirrorProfile = Literal["auto", "cn", "none", "custom"]


class MirrorLists(_Strict):
    """Candidate mirrors by what they serve, in order of preference (a ``custom`` profile)."""

    pypi: list[str] = Field(default_factory=list, description="PEP 503 simple index URLs")
    hub: list[str] = Field(default_factory=list, description="Hugging Face Hub endpoints")
    registry: list[str] = Field(
        default_factory=list,
        description="Docker registries serving Docker Hub images (host[:port], or http://host:port)",
    )
    modelscope: list[str] = Field(default_factory=list, description="ModelScope endpoints")

    @field_validator("pypi", "hub", "modelscope")
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        """Each is probed with a real request: an http(s) URL without spaces, nothing else."""
        for url in value:
            if not re.fullmatch(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[^\s]*)?", url):
                raise ValueError(
                    _("'{url}' is not an http(s) URL like https://mirror.example/simple").format(
                        url=url
                    )
                )
        return value

    @field_validator("registry")
    @classmethod
    def _registries(cls, value: list[str]) -> list[str]:
        for url in value:
            if not re.fullmatch(r"(https?://)?[A-Za-z0-9.-]+(:[0-9]{1,5})?/?", url):
                raise ValueError(
                    _("'{url}' is not a registry like mirror.example:5000").format(url=url)
                )
        return value


class MirrorsConfig(_Strict):
    """Which mirrors the downloads of the chain go through (docs/mirrors.md).

    none: the preset's own URLs as written. cn: the China mirrors (Tsinghua, Aliyun, USTC,
    Douban; hf-mirror.com; registry mirrors). auto: the official endpoints and the China
    mirrors, each probed; the fastest that answers correctly wins. custom: the lists in
    ``custom``, probed the same way. A preset may write just ``mirrors: auto``.
    """

    profile: MirrorProfile = "none"
    custom: MirrorLists | None = None
    probe_timeout_s: float = Field(2.0, gt=0, le=30, description="per candidate")
    probe_budget_s: float = Field(4.0, gt=0, le=60, description="all probes together")
    resolved: dict[str, Any] | None = Field(
        None,
        description="written by trainwiz when it probes: each choice, its reason and every "
        "probe's timing (mirrors.json in a run); a preset carrying it is not probed again",
    )

    @field_validator("resolved")
    @classmethod
    def _resolved_bounded(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """A record trainwiz wrote, but it arrives in presets people pass around: bounded
        like every other text (its URLs end up in the plan)."""
        if value is not None and len(json.dumps(value, default=str)) > MAX_TEXT:
            raise ValueError(
                _("resolved is larger than {MAX_TEXT} characters as JSON").format(MAX_TEXT=MAX_TEXT)
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _profile_shorthand(cls, value: Any) -> Any:
        return {"profile": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _custom_needs_lists(self) -> MirrorsConfig:
        if self.profile == "custom" and self.custom is None:
            raise ValueError(
                _("profile 'custom' needs a 'custom' block with pypi/hub/registry lists")
            )
        return self


def _method_checks(args: TrainingArgs) -> None:
    """LoRA settings without LoRA, and ZeRO next to FSDP or a config path, are contradictions."""
    if args.method == "full" and args.lora != LoraSettings():
        raise ValueError(_("training.lora is set but training.method is 'full': set method: lora"))
    if args.method != "full" and args.fsdp:
        raise ValueError(
            _(
                "training.method '{method}' with training.fsdp: FastChat's LoRA path shards with "
                "DeepSpeed, not FSDP; remove fsdp (use training.zero on several GPUs)"
            ).format(method=args.method)
        )
    if args.zero is not None and args.fsdp:
        raise ValueError(
            _("training.zero and training.fsdp are both set: choose one (remove fsdp)")
        )
    if args.zero is not None and args.deepspeed:
        raise ValueError(
            _(
                "training.zero and training.deepspeed are both set: zero writes the config, "
                "deepspeed points at your own; keep one"
            )
        )


def _layer_checks(args: TrainingArgs) -> None:
    """Regional compile and selective recompute each replace a switch that does the same to
    the whole model: both on at once is a contradiction, not a combination."""
    if args.compile_layers and args.torch_compile:
        raise ValueError(
            _(
                "training.compile_layers and training.torch_compile are both on: compile_layers "
                "compiles each decoder layer, torch_compile the whole model; keep one"
            )
        )
    if args.recompute_layers is not None and args.gradient_checkpointing:
        raise ValueError(
            _(
                "training.recompute_layers and training.gradient_checkpointing are both set: "
                "gradient_checkpointing recomputes every layer; drop one"
            )
        )
    if args.recompute_layers is not None and (args.fsdp_config or {}).get(
        "activation_checkpointing"
    ):
        raise ValueError(
            _(
                "training.recompute_layers and fsdp_config.activation_checkpointing are both "
                "set: FSDP's recomputes every layer; drop one"
            )
        )
