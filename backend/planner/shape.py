"""The model's shape: what the planner needs from a Llama-style ``config.json``.

The planner never loads weights: every memory and FLOP figure follows from a handful of config
fields, so a shape can be read from a downloaded model, a tiny spec, or a known repo's config
before anything is downloaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.errors import BadInput
from backend.i18n import _
from backend.model.placeholders import resolve_placeholders


@dataclass(frozen=True)
class ModelShape:
    """Llama-family dimensions (hidden, layers, heads, kv heads, ffn, vocab) and derived counts."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    max_positions: int = 2048
    tied_embeddings: bool = False
    n_params_reported: int | None = None
    source: str = ""
    head_dim_config: int | None = (
        None  # config.json head_dim where heads x head_dim != hidden (Gemma)
    )

    @property
    def head_dim(self) -> int:
        return self.head_dim_config or self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """One decoder layer: q,o (h x heads·head_dim), k,v (h x kv), gate/up/down (h x f), two
        RMSNorms."""
        h = self.hidden
        return 2 * h * self.q_dim + 2 * h * self.kv_dim + 3 * h * self.ffn + 2 * h

    @property
    def root_params(self) -> int:
        """Everything outside the decoder layers: FSDP's root unit under auto_wrap."""
        emb = self.vocab * self.hidden
        return emb * (1 if self.tied_embeddings else 2) + self.hidden

    @property
    def n_params(self) -> int:
        if self.n_params_reported:
            return self.n_params_reported
        return self.root_params + self.layers * self.layer_params

    @property
    def n_params_no_embedding(self) -> int:
        """Parameters that cost matmul FLOPs (PaLM's convention excludes the input embedding)."""
        return self.n_params - self.vocab * self.hidden

    def flops_per_token(self, seq: int) -> float:
        """Model FLOPs per trained token: 6N + 12·L·h·s (PaLM appendix B; recompute not counted)."""
        return 6.0 * self.n_params_no_embedding + 12.0 * self.layers * self.hidden * seq


def _get(config: dict[str, Any], *names: str) -> Any:
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return None


def shape_from_config(config: dict[str, Any], source: str = "config.json") -> ModelShape:
    """Read a Llama-style config dict; BadInput names the missing key."""
    if isinstance(config.get("text_config"), dict):
        config = {
            **config["text_config"],
            **{k: v for k, v in config.items() if k != "text_config"},
        }
    hidden = _get(config, "hidden_size", "n_embd", "d_model")
    layers = _get(config, "num_hidden_layers", "n_layer", "num_layers")
    heads = _get(config, "num_attention_heads", "n_head")
    vocab = _get(config, "vocab_size")
    missing = [
        name
        for name, value in (
            ("hidden_size", hidden),
            ("num_hidden_layers", layers),
            ("num_attention_heads", heads),
            ("vocab_size", vocab),
        )
        if value is None
    ]
    if missing:
        raise BadInput(
            _("{source}: missing {items}: is this a Llama-style config.json?").format(
                source=source, items=", ".join(missing)
            )
        )
    kv_heads = _get(config, "num_key_value_heads") or heads
    ffn = _get(config, "intermediate_size", "n_inner") or 4 * int(hidden)
    max_pos = _get(config, "max_position_embeddings", "n_positions", "max_sequence_length") or 2048
    return ModelShape(
        hidden=int(hidden),
        layers=int(layers),
        heads=int(heads),
        kv_heads=int(kv_heads),
        ffn=int(ffn),
        vocab=int(vocab),
        max_positions=int(max_pos),
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        source=source,
        head_dim_config=int(config["head_dim"]) if config.get("head_dim") else None,
    )


def shape_from_dir(model_dir: str | Path) -> ModelShape | None:
    """The shape of a model directory, or None when it has no readable config.json yet."""
    path = Path(model_dir).expanduser() / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return shape_from_config(data, source=str(path))


# Shapes of well-known repos, copied from their config.json, so a shipped preset can be planned
# before its model is downloaded. Keys are lower-case repo ids.
_LLAMA7B = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
            "intermediate_size": 11008, "vocab_size": 32000}  # fmt: skip
_LLAMA13B = {"hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 40,
             "intermediate_size": 13824, "vocab_size": 32000}  # fmt: skip
_LLAMA3_8B = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
              "max_position_embeddings": 131072}  # fmt: skip
_QWEN25_7B = {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
              "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
              "max_position_embeddings": 32768}  # fmt: skip
_MISTRAL_7B = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32768,
               "max_position_embeddings": 32768}  # fmt: skip
_GEMMA2_9B = {"hidden_size": 3584, "num_hidden_layers": 42, "num_attention_heads": 16,
              "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336,
              "vocab_size": 256000, "max_position_embeddings": 8192,
              "tie_word_embeddings": True}  # fmt: skip
KNOWN_CONFIGS: dict[str, dict[str, Any]] = {
    "meta-llama/llama-3.1-8b-instruct": _LLAMA3_8B,
    "meta-llama/llama-3.1-8b": _LLAMA3_8B,
    "qwen/qwen2.5-7b-instruct": _QWEN25_7B,
    "qwen/qwen2.5-7b": _QWEN25_7B,
    "mistralai/mistral-7b-instruct-v0.3": _MISTRAL_7B,
    "google/gemma-2-9b-it": _GEMMA2_9B,
    "lmsys/vicuna-7b-v1.3": {**_LLAMA7B, "max_position_embeddings": 2048},
    "lmsys/vicuna-7b-v1.5": {**_LLAMA7B, "max_position_embeddings": 4096},
    "lmsys/vicuna-13b-v1.3": {**_LLAMA13B, "max_position_embeddings": 2048},
    "lmsys/vicuna-13b-v1.5": {**_LLAMA13B, "max_position_embeddings": 4096},
    "meta-llama/llama-2-7b-hf": {**_LLAMA7B, "max_position_embeddings": 4096},
    "meta-llama/llama-2-13b-hf": {**_LLAMA13B, "max_position_embeddings": 4096},
}


def shape_for_preset(preset: Any) -> ModelShape | None:
    """Best available shape for a preset: its model dir, its tiny spec, or a known repo."""
    model = preset.model
    if model.source == "tiny" and model.tiny is not None:
        tiny = model.tiny
        return ModelShape(
            hidden=tiny.hidden_size,
            layers=tiny.num_hidden_layers,
            heads=tiny.num_attention_heads,
            kv_heads=tiny.num_key_value_heads or tiny.num_attention_heads,
            ffn=tiny.intermediate_size,
            vocab=tiny.vocab_size,
            max_positions=tiny.max_position_embeddings,
            source="preset model.tiny",
        )
    if model.dir:
        try:
            found = shape_from_dir(resolve_placeholders(str(model.dir), None))
        except BadInput:  # @run has no meaning before a launch
            found = None
        if found is not None:
            return found
    if model.repo and model.repo.lower() in KNOWN_CONFIGS:
        return shape_from_config(
            KNOWN_CONFIGS[model.repo.lower()], source=f"known config of {model.repo}"
        )
    return None
