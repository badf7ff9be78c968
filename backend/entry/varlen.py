"""FlashAttention-2 varlen from torch itself for packed rows, where the flash-attn package is absent.

torch >= 2.10 ships FlashAttention-2's variable-length kernels behind
``torch.nn.attention.varlen.varlen_attn`` (forward and backward, a custom op that compiles). A
packed micro-step is one sequence of several documents; given each document's bounds
(``cu_seqlens``) the kernel attends within each document only, the same attention as
flex_attention's document mask (backend/entry/packing.py) and as flash-attn's varlen path, without
flex's compile (docs/performance.md, 2026-12-08: flex's backward took 88 ms of a 0.94 s
LoRA step at 6.74B).

How it is wired:
- ``register(transformers)`` adds the attention function under ``NAME`` (transformers'
  AttentionInterface; no mask function is registered, so transformers builds no mask for it);
- the packed collator (``collate_fn(cap)``) adds ``cu_seq_lens_q/k`` and ``max_length_q/k`` to each
  micro-batch: transformers passes these through the model to every attention call, so the
  document bounds are found once per micro-step on the host, not per layer on the GPU;
- ``max_length`` is a constant (``model_max_length``: no conversation is longer), so a compiled
  layer never recompiles on it; a row's pad filler, which can be longer, is cut into segments of at
  most that length (it attends only to itself, and its labels are ignored);
- ``usable(torch)`` runs the kernel once on the GPU against SDPA, forward and backward, before a
  run relies on it; any failure keeps flex_attention.

The default for packed rows where it passes that check (CUDA sm80+, torch >= 2.10): measured on
an H100 at 6.74B LoRA (2026-12-09) it ran 17,657 real tokens/s against flex_attention's
17,631-17,833 on the same settings, the same peak memory, and its first compiled step took
14.4 s cold against flex's 51.7 s (no flex compile inside the layer graph).
``TRAINWIZ_PACKED_ATTENTION=flex`` (a run's launch.env) keeps flex_attention.
"""

from __future__ import annotations

import inspect
import itertools
import os
from typing import Any

NAME = "trainwiz_varlen"
ENV = "TRAINWIZ_PACKED_ATTENTION"
_STATE: dict[str, Any] = {}


FLEX_WORDS = ("flex", "flex_attention", "off")


def wanted() -> bool:
    """Packed rows try torch's varlen attention unless the run's environment says flex
    (``TRAINWIZ_PACKED_ATTENTION=flex``): measured on an H100 it trains at flex_attention's rate
    and memory and its first compiled step is 3.6x sooner (docs/performance.md, 2026-12-09)."""
    return os.environ.get(ENV, "").strip().lower() not in FLEX_WORDS


def asked() -> bool:
    """The run's environment names varlen itself (then a fallback to flex is worth a line even
    where the reason is plain, such as no CUDA)."""
    return os.environ.get(ENV, "").strip().lower() in ("varlen", "torch_varlen", NAME)


def _causal_kwargs(fn: Any) -> dict[str, Any]:
    """torch 2.10 takes ``is_causal``; later releases ``window_size=(-1, 0)`` for causal."""
    params = inspect.signature(fn).parameters
    if "is_causal" in params:
        return {"is_causal": True}
    if "window_size" in params:
        return {"window_size": (-1, 0)}
    raise TypeError("varlen_attn takes neither is_causal nor window_size")


def kernel(torch: Any) -> Any:
    """torch's varlen_attn with causal masking bound, or None where this torch has none."""
    if "fn" in _STATE:
        return _STATE["fn"]
    try:
        from torch.nn.attention.varlen import varlen_attn

        causal = _causal_kwargs(varlen_attn)
    except (ImportError, AttributeError, TypeError):
        _STATE["fn"] = None
        return None

    def fn(q: Any, k: Any, v: Any, cu: Any, max_len: int, scale: float | None) -> Any:
        return varlen_attn(q, k, v, cu, cu, max_len, max_len, scale=scale, **causal)

    _STATE["fn"] = fn
    return fn


def segments(position_ids: list[int], cap: int) -> tuple[list[int], int]:
    """Cumulative document bounds of one packed sequence from its restarting position ids, each
    segment cut to at most ``cap`` tokens, and the longest segment (at most ``cap``).

    Only a row's pad filler can be longer than ``cap`` (conversations are truncated at
    model_max_length before packing); cutting it changes nothing that is learned.
    """
    bounds = [i for i, p in enumerate(position_ids) if p == 0] or [0]
    if bounds[0] != 0:
        bounds.insert(0, 0)
    bounds.append(len(position_ids))
    cu = [0]
    longest = 0
    for a, b in itertools.pairwise(bounds):
        while b - a > cap:
            cu.append(a + cap)
            a += cap
            longest = cap
        if b > a:
            cu.append(b)
            longest = max(longest, b - a)
    return cu, longest


def add_bounds(batch: dict[str, Any], cap: int, torch: Any) -> dict[str, Any]:
    """The micro-batch (one joined sequence) with its document bounds for the attention call."""
    pos = batch["position_ids"].reshape(-1).tolist()
    cu, _longest = segments(pos, cap)
    bounds = torch.tensor(cu, dtype=torch.int32)
    batch.update(cu_seq_lens_q=bounds, cu_seq_lens_k=bounds, max_length_q=cap, max_length_k=cap)
    return batch


def attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
              dropout: float = 0.0, scaling: float | None = None, **kwargs: Any) -> tuple[Any, None]:  # fmt: skip
    """transformers' attention interface: (batch 1, heads, tokens, dim) in, (1, tokens, heads,
    dim) out, attending within the documents that ``cu_seq_lens_q`` bounds."""
    import torch

    cu = kwargs.get("cu_seq_lens_q")
    if cu is None or query.shape[0] != 1:
        raise RuntimeError(
            f"{NAME} needs a packed micro-batch (batch 1) with cu_seq_lens_q from the packed "
            "collator"
        )
    heads, kv_heads = query.shape[1], key.shape[1]
    q = query[0].transpose(0, 1)
    k = key[0].transpose(0, 1)
    v = value[0].transpose(0, 1)
    if kv_heads != heads:  # grouped-query attention: repeat the shared key/value heads
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
    cu = cu.to(device=q.device, dtype=torch.int32)
    half = half_dtype(torch, query, module)
    if half is not None:  # FlashAttention takes fp16/bf16 only; the layer gets its dtype back
        q, k, v = q.to(half), k.to(half), v.to(half)
    out = kernel(torch)(q.contiguous(), k.contiguous(), v.contiguous(), cu,
                        int(kwargs.get("max_length_q") or q.shape[0]), scaling)  # fmt: skip
    return out.to(query.dtype).unsqueeze(0), None


def half_dtype(torch: Any, query: Any, module: Any) -> Any:
    """The 16-bit dtype to run the kernel in when ``query`` is not 16-bit, else None.

    QLoRA's k-bit preparation keeps the norms (and PEFT the adapters) in float32, so the
    projections hand float32 queries to the attention even under bf16 autocast, which does not
    reach a custom op: FlashAttention refused them ("only support fp16 and bf16", measured on an
    H100 at 6.74B QLoRA, eleventh session). As transformers' own flash-attention path does: the
    autocast dtype, else the projection's 16-bit weight dtype, else bfloat16 (varlen runs on
    sm80+ only, where the entry trains bf16)."""
    if query.dtype in (torch.float16, torch.bfloat16):
        return None
    device = query.device.type
    try:
        if torch.is_autocast_enabled(device):
            return torch.get_autocast_dtype(device)
    except (TypeError, AttributeError):  # a torch without the per-device forms
        pass
    weight = getattr(getattr(module, "q_proj", None), "weight", None)
    dtype = getattr(weight, "dtype", None)
    if dtype in (torch.float16, torch.bfloat16):
        return dtype
    return torch.bfloat16


# The bounds ride in the model's keyword arguments to every attention call; transformers' own
# loss takes and ignores them, but Liger's fused linear cross-entropy (``use_liger_kernel``) passes
# its keyword arguments on to a kernel that accepts none of these: TypeError on the first step
# (measured on an H100, 2026-12-09).
BOUNDS_KEYS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")


def register(transformers: Any) -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, attention)
    keep_bounds_out_of_liger_loss()


def keep_bounds_out_of_liger_loss() -> bool:
    """Wrap Liger's loss entry so the document bounds stop at the attention; False where
    liger_kernel (or that function of it) is not there."""
    try:
        import liger_kernel.transformers.model.loss_utils as loss_utils
    except Exception:  # not installed, or no GPU stack for its import: Liger stays off anyway
        return False
    original = getattr(loss_utils, "fixed_fused_linear_cross_entropy", None)
    if original is None:
        return False
    if getattr(original, "_trainwiz_no_bounds", False):
        return True

    def without_bounds(*args: Any, **kwargs: Any) -> Any:
        for key in BOUNDS_KEYS:
            kwargs.pop(key, None)
        return original(*args, **kwargs)

    without_bounds._trainwiz_no_bounds = True  # type: ignore[attr-defined]
    loss_utils.fixed_fused_linear_cross_entropy = without_bounds
    return True


def usable(
    torch: Any, transformers_version: tuple[int, ...], compiled: bool = False
) -> tuple[bool, str]:
    """(True, "") when varlen_attn runs here and agrees with SDPA per document, forward and
    backward, and (``compiled``: regional compile is on) also under torch.compile with two
    different document counts (the bounds' length is dynamic); else (False, why)."""
    if not torch.cuda.is_available():
        return False, "no CUDA"
    if transformers_version < (4, 48, 0):
        return False, "transformers < 4.48 has no attention interface"
    if any(torch.cuda.get_device_capability(i)[0] < 8 for i in range(torch.cuda.device_count())):
        return False, "a GPU below sm80"
    fn = kernel(torch)
    if fn is None:
        return False, f"torch {torch.__version__} has no torch.nn.attention.varlen.varlen_attn"
    try:
        ok, why = _self_check(torch, fn)
        if ok and compiled:
            ok, why = _self_check(torch, torch.compile(fn))
            ok, why = _self_check(torch, torch.compile(fn), [300, 70]) if ok else (ok, why)
        return ok, why
    except Exception as exc:  # a kernel missing from this build, an API that moved
        return False, f"varlen_attn failed its check ({type(exc).__name__}: {str(exc)[:200]})"


def _self_check(torch: Any, fn: Any, lengths: list[int] | None = None) -> tuple[bool, str]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    lengths, heads, dim = lengths or [37, 128, 5, 200], 4, 128
    total = sum(lengths)
    shape = (total, heads, dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen)
               .requires_grad_() for _ in range(3))  # fmt: skip
    cu = torch.tensor([0, *itertools.accumulate(lengths)], device="cuda", dtype=torch.int32)
    out = fn(q, k, v, cu, max(lengths), None)
    grad = torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad)
    ref_parts = []
    a = 0
    qr, kr, vr = (t.detach().float().requires_grad_() for t in (q, k, v))
    for n in lengths:
        part = torch.nn.functional.scaled_dot_product_attention(
            qr[a : a + n].transpose(0, 1), kr[a : a + n].transpose(0, 1),
            vr[a : a + n].transpose(0, 1), is_causal=True)  # fmt: skip
        ref_parts.append(part.transpose(0, 1))
        a += n
    ref = torch.cat(ref_parts)
    rq, rk, rv = torch.autograd.grad(ref, (qr, kr, vr), grad.float())
    for name, got, want in (("out", out, ref), ("dq", dq, rq), ("dk", dk, rk), ("dv", dv, rv)):
        err = (got.float() - want).abs().max().item()
        scale = want.abs().max().item() or 1.0
        if not err <= 0.05 * scale:
            return False, f"varlen_attn disagrees with SDPA ({name}: max error {err:.3g})"
    return True, ""
