"""LoRA's dropout with its mask kept as bits, for compiled layers.

PEFT computes ``base(x) + B(A(dropout(x))) * s`` for each adapted projection, and q, k and v each
draw their own mask over the same ``x``. The weight gradient of ``A`` needs the dropped input, so
autograd keeps it: one more copy of the layer input per adapter. Under regional compile inductor
keeps a bf16-sized tensor per adapter (6.74B LoRA, rows of 8192 on one H100: 8 GiB more at
dropout 0.05 than at 0), and torch's functionalized RNG, which could draw the masks again in the
backward, changed nothing measurable (benchmarks/device/lora_dropout_masks.py, its first
version: 1.81 GiB kept either way over four layers).

Here dropout and ``A`` are one autograd function: the forward draws the mask, packs it eight
elements to a byte and keeps only the packed mask beside ``x`` (which the adapters share and the
layer keeps anyway: so PEFT's float32 cast of ``x`` before a float32 adapter is turned off, the
matmul running in autocast's dtype as it did); the backward unpacks the mask and rebuilds the
dropped input for ``A``'s gradient.
Inductor fuses the draw, the packing and the scaling into the layer's kernels, and its
partitioner keeps the 1/8-byte mask instead of the copy (measured on a CPU-compiled block in
tests/backend/test_entry_lora_dropout.py). The semantics are PEFT's: an independent mask per
adapter, scaled by 1/(1-p), off in eval mode; the adapter's weights and names are unchanged.

Only compiled layers get it (``regional.apply``), and only where a run's ``launch.env`` asks
(``TRAINWIZ_DROPOUT_MASKS=packed``): its first version, which still kept PEFT's float32 cast of
the input, saved 3.4 of the 8 GiB on one H100 and ran within 2 % of PEFT's speed; this one is not
measured on a GPU yet, so PEFT's dropout stays the default and the planner prices PEFT's
(docs/performance.md "LoRA dropout: the masks kept as bits").
"""

from __future__ import annotations

import os
from typing import Any

import torch

DROPOUT_MASKS_ENV = "TRAINWIZ_DROPOUT_MASKS"


def _shifts(device: Any) -> torch.Tensor:
    return torch.arange(8, device=device, dtype=torch.uint8)


def pack(keep: torch.Tensor) -> torch.Tensor:
    """A bool mask whose last dimension is a multiple of 8, eight elements to a byte."""
    grouped = keep.reshape(*keep.shape[:-1], keep.shape[-1] // 8, 8).to(torch.uint8)
    return (grouped << _shifts(keep.device)).sum(-1, dtype=torch.uint8)


def unpack(packed: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The bool mask ``pack`` was given."""
    bits = (packed.unsqueeze(-1) >> _shifts(packed.device)) & 1
    return bits.reshape(shape).bool()


class DropoutThenLinear(torch.autograd.Function):
    """``linear(dropout(x, p), weight)`` keeping ``x`` and the packed mask, not the dropped copy."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, p: float) -> torch.Tensor:
        device = x.device.type
        if torch.is_autocast_enabled(device):
            mm_dtype = torch.get_autocast_dtype(device)  # the matmul's dtype, as for PEFT's A
        else:
            x = x.to(weight.dtype)  # PEFT's own cast of the input to the adapter's dtype
            mm_dtype = weight.dtype
        keep = torch.rand_like(x, dtype=torch.float32) >= p
        out = torch.nn.functional.linear(x * keep * (1.0 / (1.0 - p)), weight)
        ctx.p, ctx.shape, ctx.mm_dtype = p, keep.shape, mm_dtype
        # x itself (not a cast of it): the tensor the layer already keeps, so nothing new but bits
        ctx.save_for_backward(x, weight, pack(keep))
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight, packed = ctx.saved_tensors
        keep = unpack(packed, ctx.shape)
        scale = 1.0 / (1.0 - ctx.p)
        g = grad.to(ctx.mm_dtype)
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            grad_x = ((g @ weight.to(ctx.mm_dtype)) * keep * scale).to(x.dtype)
        if ctx.needs_input_grad[1]:
            dropped = (x * keep * scale).to(ctx.mm_dtype)
            flat_g = g.reshape(-1, g.shape[-1])
            grad_w = (flat_g.t() @ dropped.reshape(-1, x.shape[-1])).to(weight.dtype)
        return grad_x, grad_w, None


class MaskedDropoutLinear(torch.nn.Linear):
    """PEFT's ``lora_A`` with the adapter's dropout inside (the same weight, the same name)."""

    dropout_p: float = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.dropout_p <= 0:
            if not torch.is_autocast_enabled(x.device.type):
                x = x.to(self.weight.dtype)  # PEFT's cast, turned off in the layer (install)
            return torch.nn.functional.linear(x, self.weight, self.bias)
        return DropoutThenLinear.apply(x, self.weight, self.dropout_p)


def install(model: Any) -> int:
    """Move each LoRA adapter's dropout into its ``A`` (PEFT's dropout becomes an identity).
    Returns how many adapters changed; 0 unless asked (``TRAINWIZ_DROPOUT_MASKS=packed``), or
    where none has dropout, a bias on ``A``, an input width that does not pack into bytes, or a
    variant (DoRA) that reads the dropped input itself."""
    if os.environ.get(DROPOUT_MASKS_ENV, "kept").strip().lower() != "packed":
        return 0
    changed = 0
    for module in model.modules():
        drops = getattr(module, "lora_dropout", None)
        adapters = getattr(module, "lora_A", None)
        if not isinstance(drops, torch.nn.ModuleDict) or not isinstance(
            adapters, torch.nn.ModuleDict
        ):
            continue
        for name, drop in list(drops.items()):
            linear = adapters[name] if name in adapters else None  # noqa: SIM401 (ModuleDict)
            if not (isinstance(drop, torch.nn.Dropout) and drop.p > 0):
                continue
            if type(linear) is not torch.nn.Linear or linear.bias is not None:
                continue
            if name in (getattr(module, "lora_variant", None) or {}):
                continue  # DoRA and the like use the dropped input beyond A: PEFT's own then
            if linear.in_features % 8:
                continue
            linear.__class__ = MaskedDropoutLinear
            linear.dropout_p = float(drop.p)
            drops[name] = torch.nn.Identity()
            # PEFT casts the input to the adapter's dtype (float32) before the adapter: a copy
            # per adapter that would be what the function keeps. Under autocast the function
            # takes the input as it comes and the matmul runs in autocast's dtype, as before.
            module.cast_input_dtype_enabled = False
            changed += 1
    return changed
