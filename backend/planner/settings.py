"""The training settings the planner reads, pulled out of a preset into one flat record.

Keeping this separate from the preset lets the tuner try variants cheaply (``replace``) and lets
the calibration benchmark describe its grid in the same terms the planner predicts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from backend.planner.gpu import GpuSpec
from backend.planner.packedattn import FLEX, packed_kernel

FSDP_SHARDING = ("full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2", "no_shard")


@dataclass(frozen=True)
class TrainSettings:
    micro_batch: int = 1
    grad_accum: int = 1
    seq: int = 2048
    nproc: int = 1  # processes (GPUs) per node
    nnodes: int = 1
    fsdp: str = ""  # HF's --fsdp string, e.g. "full_shard auto_wrap offload"
    trainer_gc: bool = False  # TrainingArguments.gradient_checkpointing
    fsdp_ac: bool = False  # fsdp_config.activation_checkpointing
    mixed: bool = True  # bf16 or fp16 (FSDP mixed precision / autocast)
    attn: str = "sdpa"  # "sdpa", "flash_attention_2" or "eager"
    optim: str = "adamw_torch"
    packing: bool = False  # training.packing: rows of pack_tokens, no padding
    pack_tokens: int = 0  # 0: seq
    liger: bool = False  # training.use_liger_kernel
    compile: bool = False  # training.torch_compile
    compile_layers: bool = False  # training.compile_layers: regional torch.compile per layer
    recompute_layers: int = 0  # training.recompute_layers: layers checkpointed (0: see gc)

    @property
    def row(self) -> int:
        """Tokens per sample as the GPU sees them: a packed row, or the padded sequence."""
        return (self.pack_tokens or self.seq) if self.packing else self.seq

    @property
    def tokens_micro(self) -> int:
        return self.micro_batch * self.row

    @property
    def world(self) -> int:
        return self.nproc * self.nnodes

    @property
    def fsdp_tokens(self) -> list[str]:
        return self.fsdp.split()

    @property
    def uses_fsdp(self) -> bool:
        return any(t in FSDP_SHARDING for t in self.fsdp_tokens)

    @property
    def offload(self) -> bool:
        return self.uses_fsdp and "offload" in self.fsdp_tokens

    @property
    def strategy(self) -> str:
        """The sharding FSDP really uses (it falls back to no_shard on a world of one)."""
        if not self.uses_fsdp:
            return "none"
        if self.world == 1:
            return "no_shard"
        for token in FSDP_SHARDING:
            if token in self.fsdp_tokens:
                return token
        return "full_shard"

    @property
    def shard_n(self) -> int:
        """How many GPUs the parameter/grad/optimizer state is divided over."""
        if self.strategy in ("full_shard", "shard_grad_op"):
            return self.world
        if self.strategy.startswith("hybrid"):
            return self.nproc
        return 1

    @property
    def checkpointing(self) -> bool:
        """Any recompute: every layer (Trainer's or FSDP's) or some (recompute_layers)."""
        return self.trainer_gc or self.fsdp_ac or self.recompute_layers > 0

    def recomputed(self, layers: int) -> int:
        """How many of the model's ``layers`` are checkpointed."""
        if self.trainer_gc or self.fsdp_ac:
            return layers
        return min(self.recompute_layers, layers)

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.grad_accum * self.world

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.row

    def with_(self, **changes: Any) -> TrainSettings:
        return replace(self, **changes)

    def label(self) -> str:
        """Short description used in tables: ``b4 ga2 gc offload 2gpu``."""
        parts = [f"b{self.micro_batch}", f"ga{self.grad_accum}"]
        if self.trainer_gc:
            parts.append("gc")
        if self.fsdp_ac:
            parts.append("fsdp-ac")
        if self.recompute_layers and not (self.trainer_gc or self.fsdp_ac):
            parts.append(f"rc{self.recompute_layers}")
        if self.offload:
            parts.append("offload")
        if self.packing:
            parts.append(f"packed{self.row}")
        if self.liger:
            parts.append("liger")
        if "fused" in self.optim:
            parts.append("fused-adamw")
        if self.compile:
            parts.append("compile")
        if self.compile_layers:
            parts.append("compile-layers")
        parts.append(f"{self.world}gpu")
        return " ".join(parts)


def settings_from_preset(preset: Any, gpu: GpuSpec | None = None) -> TrainSettings:
    """The planner's view of a preset's training and launch sections; with ``gpu``, packed rows
    get the attention the entry would run there (backend/planner/packedattn.py)."""
    tr = preset.training
    attn = tr.attn_implementation
    if tr.packing:
        # Packed rows run flash-attn's or torch's varlen kernels or flex_attention (the entry
        # never picks the dense masked path on a GPU); none keeps an s x s tensor. Without the
        # GPU, plan for flex, the slowest to start.
        attn = packed_kernel(preset, gpu) if gpu is not None else FLEX
    elif attn == "auto":
        # The trainwiz entry picks flash-attn when importable, else SDPA; plan for SDPA, the
        # conservative case: it falls back to the s x s math kernel when head_dim % 8 != 0.
        attn = "sdpa"
    fsdp_ac = bool((tr.fsdp_config or {}).get("activation_checkpointing", False))
    return TrainSettings(
        micro_batch=tr.per_device_train_batch_size,
        grad_accum=tr.gradient_accumulation_steps,
        seq=tr.model_max_length,
        nproc=preset.launch.nproc_per_node,
        nnodes=preset.launch.nnodes,
        fsdp=tr.fsdp or "",
        trainer_gc=tr.gradient_checkpointing,
        fsdp_ac=fsdp_ac,
        mixed=bool(tr.bf16 or tr.fp16),
        attn=attn,
        optim=tr.optim,
        packing=tr.packing,
        pack_tokens=tr.pack_tokens or 0,
        liger=tr.use_liger_kernel,
        compile=tr.torch_compile,
        compile_layers=tr.compile_layers,
        recompute_layers=tr.recompute_layers or 0,
    )
