"""Which attention a packed row will run on the GPU, as the planner prices it.

The entry decides at run time (backend/entry/train_entry.py, backend/entry/varlen.py):
flash-attn's varlen kernels where the package imports; else torch's own FlashAttention-2 varlen
(``torch.nn.attention.varlen``) where torch >= 2.10, transformers >= 4.48 and every GPU is sm80+,
unless the run's ``launch.env`` says ``TRAINWIZ_PACKED_ATTENTION=flex``; else flex_attention with
a document mask. The planner cannot run the entry's kernel self-check, so it reads the same
conditions from what it can see without importing the training stack: the installed packages'
metadata (host runner) or the container's torch pin or image tag (Docker), the preset's
transformers pin, the GPU's compute capability. What it prices differently: flex compiles a
document-masked kernel before the first step (tens of seconds to minutes, steeply longer with the
row) and builds its block mask on every micro-step; the varlen kernels do neither.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from typing import Any

from backend.entry.varlen import ENV as PACKED_ATTENTION_ENV
from backend.entry.varlen import FLEX_WORDS
from backend.images.cuda_tables import pinned_version, version_tuple
from backend.planner.gpu import GpuSpec

FLEX = "flex_attention"
FLASH = "flash_attention_2"
VARLEN = "varlen"  # torch's own FlashAttention-2 varlen (the entry's ``trainwiz_varlen``)
VARLEN_MIN_TORCH = (2, 10)
VARLEN_MIN_TRANSFORMERS = (4, 48)
VARLEN_MIN_CC = (8, 0)


def major_minor(text: str | None) -> tuple[int, ...] | None:
    """(major, minor) of a version text ('2.11.0+cu130' -> (2, 11)); None when there is none."""
    parts = version_tuple(text)
    return parts[:2] if len(parts) >= 2 else None


def _installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def training_torch(preset: Any) -> tuple[int, ...] | None:
    """The torch the run will train with, as far as the planner can tell without importing it:
    a container's pinned ``torch_spec`` or its image's tag; on the host the installed one."""
    if preset.launch.runner == "docker":
        pinned = pinned_version(preset.environment.torch_spec)
        if pinned:
            return major_minor(pinned)
        # pytorch/pytorch:2.11.0-... names torch; NGC's nvidia/pytorch:25.01 names a release
        tag = re.search(r"(?:^|/)pytorch/pytorch:(\d+\.\d+)", preset.environment.image or "")
        return major_minor(tag.group(1)) if tag else None
    return major_minor(_installed("torch"))


def packed_kernel(
    preset: Any,
    gpu: GpuSpec,
    *,
    flash_attn: bool | None = None,
    torch_version: tuple[int, ...] | None = None,
) -> str:
    """FLASH, VARLEN or FLEX: what the entry would run for this preset's packed rows on ``gpu``.
    ``flash_attn`` None: looked up (never imported); ``torch_version`` None: ``training_torch``."""
    if flash_attn is None:
        flash_attn = importlib.util.find_spec("flash_attn") is not None
    if flash_attn:
        return FLASH
    env = (preset.launch.env or {}).get(PACKED_ATTENTION_ENV, "")
    if str(env).strip().lower() in FLEX_WORDS:
        return FLEX
    torch = torch_version or training_torch(preset)
    pin = major_minor(str(preset.environment.transformers or ""))
    transformers = pin or major_minor(_installed("transformers"))
    ok = (
        torch is not None
        and torch >= VARLEN_MIN_TORCH
        and (transformers is None or transformers >= VARLEN_MIN_TRANSFORMERS)
        and gpu.cc >= VARLEN_MIN_CC
    )
    return VARLEN if ok else FLEX
