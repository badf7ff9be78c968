"""How big the model is, before anything is downloaded: from the files, else from the preset.

Disk and RAM checks need the parameter count P. Weights already on disk are the truth; else a
tiny spec is counted exactly, and a Hub repo name such as ``vicuna-13b-v1.3`` gives 13e9.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from backend.i18n import _
from backend.planner import gpu_spec, shape_for_preset
from backend.planner.memory import plan_memory
from backend.planner.methods import adapter_params, method_from_preset, plan_method_memory
from backend.planner.settings import settings_from_preset
from backend.preset.schema import Preset, TinyModelSpec
from backend.units import human  # noqa: F401 (re-exported: the checks print sizes through it)

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_SIZE_IN_NAME = re.compile(r"(?<![0-9a-z])(\d+(?:\.\d+)?)\s*([bm])(?![a-z])", re.IGNORECASE)
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1}


def weights_bytes(model_dir: Path | None) -> int:
    """Bytes of weight files in ``model_dir`` (one format only, safetensors preferred).

    Git-LFS pointer files (a clone without ``git lfs install``) are a few hundred bytes and so
    count as nothing, which is what they are.
    """
    if model_dir is None:
        return 0
    by_suffix: dict[str, int] = {}
    try:  # an unreadable directory (another user's) counts as empty, it does not crash
        for entry in model_dir.iterdir():
            if entry.suffix in _WEIGHT_SUFFIXES and entry.is_file():
                size = entry.stat().st_size
                if size > 1024:
                    by_suffix[entry.suffix] = by_suffix.get(entry.suffix, 0) + size
    except OSError:
        return 0
    if ".safetensors" in by_suffix:
        return by_suffix[".safetensors"]
    return max(by_suffix.values(), default=0)


def tiny_params(spec: TinyModelSpec) -> int:
    """Exact parameter count of the Llama the tiny spec describes (untied embeddings)."""
    h, ffn, layers, vocab = (
        spec.hidden_size,
        spec.intermediate_size,
        spec.num_hidden_layers,
        spec.vocab_size,
    )
    heads = spec.num_attention_heads
    kv_heads = spec.num_key_value_heads or heads
    head_dim = h // heads
    attn = h * h * 2 + 2 * h * kv_heads * head_dim
    per_layer = attn + 3 * h * ffn + 2 * h
    return 2 * vocab * h + layers * per_layer + h


def params_from_name(name: str) -> int | None:
    """'lmsys/vicuna-13b-v1.3' -> 13e9; '...-350m' -> 350e6; None when the name says nothing."""
    matches = list(_SIZE_IN_NAME.finditer(name.rsplit("/", 1)[-1]))
    if not matches:
        return None
    match = matches[-1]
    scale = 1e9 if match.group(2).lower() == "b" else 1e6
    return int(float(match.group(1)) * scale)


def _bytes_per_param(model_dir: Path) -> int:
    config = model_dir / "config.json"
    try:
        dtype = json.loads(config.read_text(encoding="utf-8")).get("torch_dtype", "float16")
    except (OSError, ValueError, AttributeError):
        dtype = "float16"
    return _DTYPE_BYTES.get(str(dtype), 2)


def param_count(preset: Preset, model_dir: Path | None) -> tuple[int | None, str]:
    """(P, where the number came from); P is None when nothing tells."""
    present = weights_bytes(model_dir)
    if present and model_dir is not None:
        per = _bytes_per_param(model_dir)
        return present // per, _("{size} GB of weights in {path}").format(
            size=f"{present / 1e9:.1f}", path=model_dir
        )
    model = preset.model
    if model.source == "tiny" and model.tiny is not None:
        return tiny_params(model.tiny), _("the tiny model spec")
    for name in (model.repo, model.git_url, model.dir):
        if name:
            count = params_from_name(name)
            if count:
                return count, _("the name '{name}'").format(name=name.rsplit("/", 1)[-1])
    return None, _("unknown (no weights on disk and no size in the name)")


def parse_size(text: str) -> int | None:
    """Docker-style sizes: '16g', '512m', '64k', '1024' (bytes)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)b?\s*", text.lower())
    if not match:
        return None
    factor = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}[match.group(2)]
    return int(float(match.group(1)) * factor)


# ---- the planner's numbers, for the disk and RAM checks ------------------------------------
# One estimator: what a checkpoint, the final output and the host's RAM peak weigh comes from
# the planner's own model of the preset's method (LoRA/QLoRA adapters, ZeRO, FSDP), so the
# checks, the memory plan and the Launch step's blockers say the same numbers.
CHECKPOINT_BYTES_PER_TRAINED_PARAM = 12  # fp32 weights + Adam's two moments (sharded or not)
ZERO_CHECKPOINT_EXTRA = 2  # DeepSpeed also writes the bf16 module weights beside its fp32 states
# Host RAM does not depend on which GPU the plan is for; the planner needs one to run.
_HOST_RAM_GPU = "a100-80g"


@dataclass(frozen=True)
class PlannedSizes:
    """Sizes from the planner for a GPU preset (the checks' formulas cover the rest)."""

    trained_params: int  # what the optimizer updates (the adapters for LoRA/QLoRA)
    checkpoint_bytes: int  # one checkpoint-N directory
    final_bytes: int  # what the end of training writes (an adapter, or the full model)
    host_ram_bytes: int  # the planner's host RAM peak on this node
    method: str  # "lora r8", "full", "full zero3 offload-opt"…
    why: str  # how the checkpoint size was reckoned, for the check's detail line


def planned_sizes(preset: Preset) -> PlannedSizes | None:
    """The planner's sizes for ``preset``; None for a CPU preset or an unknown model shape."""

    if preset.launch.device != "cuda":
        return None
    try:
        shape = shape_for_preset(preset)
    except Exception:  # a malformed config.json: the checks fall back to the parameter count
        return None
    if shape is None:
        return None
    settings, method = settings_from_preset(preset), method_from_preset(preset)
    gpu = gpu_spec(_HOST_RAM_GPU)
    total = shape.n_params
    if method.adapters:
        memory = plan_method_memory(shape, settings, method, gpu)
        trained = adapter_params(shape, method)
        checkpoint = CHECKPOINT_BYTES_PER_TRAINED_PARAM * trained
        final = 4 * trained
        why = _(
            "{method} adapters: {trained} M trained params × 12 bytes (fp32 weights + Adam); "
            "the frozen base is not saved"
        ).format(method=method.label(), trained=f"{trained / 1e6:.1f}")
    else:
        memory = (
            plan_method_memory(shape, settings, method, gpu)
            if method.zero_stage
            else plan_memory(shape, settings, gpu)
        )
        trained = total
        per = CHECKPOINT_BYTES_PER_TRAINED_PARAM + (
            ZERO_CHECKPOINT_EXTRA if method.zero_stage else 0
        )
        checkpoint = per * total
        final = 4 * total
        why = _(
            "{method}: {per} bytes × {params} B params (fp32 weights + Adam state; sharded "
            "checkpoints sum to the same)"
        ).format(method=method.label(), per=per, params=f"{total / 1e9:.2f}")
    return PlannedSizes(
        trained_params=trained,
        checkpoint_bytes=checkpoint,
        final_bytes=final,
        host_ram_bytes=memory.host_ram_peak,
        method=method.label(),
        why=why,
    )
