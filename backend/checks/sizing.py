"""How big the model is, before anything is downloaded: from the files, else from the preset.

Disk and RAM checks need the parameter count P. Weights already on disk are the truth; else a
tiny spec is counted exactly, and a Hub repo name such as ``vicuna-13b-v1.3`` gives 13e9.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from backend.i18n import _
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
