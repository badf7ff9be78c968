"""Per-layer options for the entry: regional torch.compile and selective activation recompute.

Both act on the decoder layers, the repeated block that holds almost all of a Llama's work:

- ``--compile_layers True`` compiles each decoder layer module (``Module.compile()``). The layers
  share one code object, so inductor compiles one graph and reuses it for every layer: a cold
  start of a few tens of seconds instead of the whole model's minutes (``--torch_compile``), and
  the state dict keeps its names (no ``_orig_mod.`` prefix), so saving and resuming are unchanged.
- ``--recompute_layers N`` checkpoints N of the L decoder layers, spread evenly (the rest keep
  their activations): the memory of full recompute where it is needed, a fraction of its extra
  forward pass. It is the entry's own wrapper (torch.utils.checkpoint, non-reentrant), so it
  works the same on every transformers version the entry supports; with N >= L it is full
  recompute.

With regional compile, Liger (``use_liger_kernel``, applied later by the Trainer) contributes
only its fused linear cross-entropy: its RMSNorm, SwiGLU and RoPE kernels are opaque to inductor,
which fuses those (and PEFT's dropout) into the layer's own kernels. Measured on one H100 (6.74B
LoRA, packed rows of 8192): 17,631 real tokens/s with the loss alone against 16,555 with every
Liger kernel (docs/performance.md "LoRA: Liger under regional compile").

Under regional compile a LoRA run's dropout keeps what its masks made for the backward (8 GiB
more at dropout 0.05 than at 0: 6.74B, rows of 8192, one H100); with
``TRAINWIZ_DROPOUT_MASKS=packed`` in ``launch.env``, ``lora_dropout.install`` makes each adapter's
dropout and ``A`` one function that keeps the mask as bits instead.

Each is gated on what the installed stack can do and turned off with a log line otherwise,
like kernels.py's switches; what stays on joins the metrics' start line.
"""

from __future__ import annotations

import functools
import os
from typing import Any


def log(*args: Any) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print("[trainwiz-entry] layers:", *args, flush=True)


def _truthy(text: str | None) -> bool:
    return text is not None and text.strip().lower() in ("1", "true", "yes", "on")


def pop_options(argv: list[str], pop_option: Any) -> tuple[bool, int | None]:
    """(compile_layers, recompute_layers) from argv; both are the entry's, not HF's."""
    compile_layers = _truthy(pop_option(argv, "compile_layers"))
    raw = pop_option(argv, "recompute_layers")
    if raw is None:
        return compile_layers, None
    try:
        count = int(raw)
    except ValueError:
        raise SystemExit(
            f"--recompute_layers must be a whole number of layers, not {raw!r}"
        ) from None
    if count < 1:
        raise SystemExit(f"--recompute_layers must be at least 1, not {count}")
    return compile_layers, count


def decoder_layers(model: Any, torch: Any) -> list[Any]:
    """The model's decoder layers: the modules whose class the model names as not to be split
    (``_no_split_modules``: LlamaDecoderLayer, ...), else the longest ModuleList. Works through
    PEFT's wrappers, which keep the inner model's modules."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if layers:
        return layers
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


def chosen(n_layers: int, count: int) -> list[int]:
    """Indexes of ``count`` of ``n_layers`` layers, spread evenly (all when count >= n)."""
    count = min(count, n_layers)
    return [i for i in range(n_layers) if (i * count) // n_layers != ((i + 1) * count) // n_layers]


def _checkpointed(forward: Any, checkpoint: Any) -> Any:
    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        # A KV cache would grow again in the recompute (as HF's own checkpointing, drop it:
        # training has no use for one; the entry sets use_cache False anyway).
        for name in ("past_key_values", "past_key_value"):
            if kwargs.get(name) is not None:
                kwargs[name] = None
        if "use_cache" in kwargs:
            kwargs["use_cache"] = False
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return run


def apply(
    model: Any,
    torch: Any,
    *,
    compile_layers: bool,
    recompute_layers: int | None,
    gradient_checkpointing: bool,
) -> dict[str, Any]:
    """Wrap the chosen layers' forward in a checkpoint, then compile every layer (in that
    order, so the compiled graph holds the checkpoint region). Returns what is on."""
    active: dict[str, Any] = {}
    if not compile_layers and recompute_layers is None:
        return active
    layers = decoder_layers(model, torch)
    if not layers:
        log("no decoder layers found: compile_layers and recompute_layers are off")
        return active
    if recompute_layers is not None:
        if gradient_checkpointing:
            log("recompute_layers: gradient_checkpointing already recomputes every layer: off")
        else:
            from torch.utils.checkpoint import checkpoint

            picked = chosen(len(layers), recompute_layers)
            for i in picked:
                layers[i].forward = _checkpointed(layers[i].forward, checkpoint)
            active["recompute_layers"] = len(picked)
            log(f"recompute: {len(picked)} of {len(layers)} decoder layers checkpointed")
    if compile_layers:
        if not hasattr(torch.nn.Module, "compile"):
            log("compile_layers: this torch has no Module.compile (needs torch >= 2.2): off")
        else:
            # One graph for all layers; a generous cache so a second shape (the last, shorter
            # batch) recompiles instead of falling back to eager for the rest of the run.
            dynamo = torch._dynamo.config
            name = "recompile_limit" if hasattr(dynamo, "recompile_limit") else "cache_size_limit"
            setattr(dynamo, name, max(getattr(dynamo, name, 8), 64))
            masked = masked_dropout(model)
            if masked:
                active["dropout_masks_packed"] = masked
            for layer in layers:
                layer.compile()
            active["compile_layers"] = len(layers)
            log(f"compile: {len(layers)} decoder layers compiled (regional torch.compile)")
            if liger_loss_only():
                log("compile: Liger, where on, applies its fused linear cross-entropy only")
    return active


def masked_dropout(model: Any) -> int:
    """How many LoRA adapters now keep their dropout mask as bits (lora_dropout.py), said once."""
    import lora_dropout

    masked = lora_dropout.install(model)
    if masked:
        log(f"compile: {masked} adapters keep their dropout masks as bits, not dropped copies")
    return masked


# Liger's kernels left to inductor under regional compile (its loss stays: no full logits).
LIGER_UNDER_COMPILE = {"rope": False, "swiglu": False, "rms_norm": False, "cross_entropy": False,
                       "fused_linear_cross_entropy": True}  # fmt: skip


def liger_loss_only() -> bool:
    """Make Liger's per-model patch (what the Trainer calls for ``use_liger_kernel``) apply the
    fused linear cross-entropy alone; False where liger_kernel is not installed."""
    import importlib.util

    if importlib.util.find_spec("liger_kernel") is None:
        return False
    try:
        import liger_kernel.transformers.monkey_patch as patch
    except Exception:  # its import needs transformers/triton; the Trainer would fail the same
        return False
    original = patch._apply_liger_kernel_to_instance
    if getattr(original, "_trainwiz_loss_only", False):
        return True

    def loss_only(model: Any, **kwargs: Any) -> Any:
        return original(model=model, **{**kwargs, **LIGER_UNDER_COMPILE})

    loss_only._trainwiz_loss_only = True  # type: ignore[attr-defined]
    patch._apply_liger_kernel_to_instance = loss_only
    return True
