"""Packed-row candidates for tune: row length x rows per micro-step x grad accumulation x
recompute x Liger, holding the preset's real tokens per optimizer step, and the one line that
says what a change does to the global batch (what the learning rate was chosen for).

Kept apart from tune.py's search so each stays small: this module only generates settings and
words; tune.py predicts, filters and ranks them.
"""

from __future__ import annotations

from typing import Any

from backend.planner.packedattn import FLEX
from backend.planner.realdata import LengthDist
from backend.planner.settings import TrainSettings

# Packed row lengths tune tries: model_max_length times these (bounded by memory). Longer rows
# amortise the per-micro-step and per-step costs (measured: 8192-token rows 1.5x the 2048 ones
# at 3.37B) but compile flex for longer; a candidate over the compile budget is dropped.
PACK_MULTIPLES = (1, 2, 4, 8)
ROWS_PER_MICRO_STEP = (1, 2, 4)
# Real tokens per optimizer step may move within this factor of the preset's (whole rows only);
# beyond it only with free_batch (the learning rate was chosen for the preset's batch).
TOKENS_PER_STEP_TOLERANCE = 1.5
FREE_GRAD_ACCUM = (1, 2, 4, 8)
# Selective recompute: this share of the decoder layers checkpointed (tune keeps such a
# candidate only where the same rows without recompute do not fit: tune.py).
RECOMPUTE_SHARES = (0.25, 0.5, 0.75)


def recompute_options(layers: int) -> list[tuple[bool, int]]:
    """(every layer, selected layers) pairs: none, a few selective counts, all."""
    counts = sorted({max(1, round(layers * f)) for f in RECOMPUTE_SHARES} - {layers})
    return [(False, 0), *[(False, n) for n in counts if 0 < n < layers], (True, 0)]


def real_tokens_per_step(s: TrainSettings, dist: LengthDist) -> float:
    """The data's tokens one optimizer step trains on (what the learning rate was chosen for)."""
    if s.packing:
        return s.global_batch * s.row * dist.packed_fill(s.seq, s.row)
    return s.global_batch * dist.mean_tokens(s.seq)


def packed_candidates(
    base: TrainSettings,
    dist: LengthDist,
    *,
    free_batch: bool = False,
    packed_attn: str = FLEX,
    layers: int = 0,
    compile_layers: bool = False,
) -> list[TrainSettings]:
    """Packed variants: row length (model_max_length x 1, 2, 4, 8) x rows per micro-step x
    grad accumulation x recompute (none, selective over ``layers``, all) x Liger x regional
    compile (``compile_layers``: one GPU without FSDP only), fused AdamW, no CPU offload
    (packing exists for speed). Grad accumulation keeps the preset's real tokens per optimizer
    step (whole rows, within TOKENS_PER_STEP_TOLERANCE) unless ``free_batch``. Attention:
    ``packed_attn``, what the entry runs for packed rows (backend/planner/packedattn.py:
    flash-attn's or torch's varlen kernels, else flex_attention; SDPA would take the dense
    masked path over the row)."""
    target = max(real_tokens_per_step(base, dist), 1.0)
    tokens = [t for t in base.fsdp_tokens if t != "offload"]
    fsdp = " ".join(tokens) if base.world > 1 else ""
    attn = packed_attn
    sharded = base.world > 1 and base.uses_fsdp
    # Selective recompute is the entry's own checkpoint wrapper; under FSDP recompute stays
    # FSDP's (every layer), and regional compile is measured without FSDP only.
    recomputes = [(False, 0), (True, 0)] if sharded or layers < 2 else recompute_options(layers)
    compiles = (False, True) if compile_layers and not fsdp else (False,)
    out = []
    for budget in sorted({base.seq * m for m in PACK_MULTIPLES}):
        fill = dist.packed_fill(base.seq, budget)
        for rows in ROWS_PER_MICRO_STEP:
            per_micro = rows * budget * fill * base.world
            if free_batch:
                accums = list(FREE_GRAD_ACCUM)
            else:
                ga = max(1, round(target / per_micro))
                ratio = ga * per_micro / target
                if not 1 / TOKENS_PER_STEP_TOLERANCE <= ratio <= TOKENS_PER_STEP_TOLERANCE:
                    continue  # whole rows cannot keep the preset's tokens per step
                accums = [ga]
            for ga in accums:
                for gc, some in recomputes:
                    for liger in (True, False):
                        for compiled in compiles:
                            out.append(
                                base.with_(
                                    packing=True, pack_tokens=budget, micro_batch=rows,
                                    grad_accum=ga, trainer_gc=gc and not sharded,
                                    fsdp_ac=gc and sharded, fsdp=fsdp, recompute_layers=some,
                                    liger=liger, optim="adamw_torch_fused", attn=attn,
                                    compile=base.compile and not compiled,
                                    compile_layers=compiled,
                                )
                            )  # fmt: skip
    return out


def batch_line(before: Any, after: Any, dist: LengthDist, lr_note: str | None = None) -> str:
    """The global-batch change in the terms the learning rate depends on; ``lr_note``: the
    learning rate the configuration written sets itself (a switch to adapters), said instead
    of advice about it."""
    b, a = before.settings, after.settings
    tb, ta = real_tokens_per_step(b, dist), real_tokens_per_step(a, dist)
    unit = f"rows of {a.row}" if a.packing else "sequences"
    ratio = ta / tb if tb else 1.0
    if lr_note:
        lr = lr_note
    elif abs(ratio - 1) <= 0.1:
        lr = "within 10 %: keep the learning rate"
    else:
        lr = (f"x{ratio:.2f}: re-check the learning rate (AdamW: scale it by about "
              f"sqrt({ratio:.2f}) = {ratio ** 0.5:.2f}, or keep it and accept the change)")  # fmt: skip
    return (f"optimizer step: {a.global_batch} {unit} = ~{ta:,.0f} real tokens "
            f"(was {b.global_batch} x {b.row} padded = ~{tb:,.0f}); {lr}"
            if not b.packing else
            f"optimizer step: {a.global_batch} {unit} = ~{ta:,.0f} real tokens "
            f"(was {b.global_batch} rows of {b.row} = ~{tb:,.0f}); {lr}")  # fmt: skip
