"""Check a model directory without loading its weights.

The planner needs the parameter count and dtype before anything heavy runs, and a user needs to
hear about a missing tokenizer file or a truncated shard before hours of training are queued.
Everything here reads config.json, the shard indexes and the safetensors headers (8-byte length +
JSON); weights are never read, so validating a 26 GB model takes milliseconds.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from backend.errors import BadInput
from backend.i18n import _

# Bytes per element of safetensors dtypes (and torch_dtype names used by config.json).
DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
    "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8,
}  # fmt: skip
TORCH_DTYPE_TO_ST = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64"}
ST_TO_TORCH = {v: k for k, v in TORCH_DTYPE_TO_ST.items()}
MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit for a header


class ConfigSummary(BaseModel):
    architecture: str | None = None
    model_type: str | None = None
    hidden_size: int | None = None
    intermediate_size: int | None = None
    num_hidden_layers: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    vocab_size: int | None = None
    max_position_embeddings: int | None = None
    torch_dtype: str | None = None
    tie_word_embeddings: bool = False


class ShardReport(BaseModel):
    name: str
    size: int | None = Field(None, description="bytes on disk; None when missing")
    expected_size: int | None = Field(None, description="from the safetensors header")
    n_params: int = 0
    ok: bool = True
    problem: str | None = None


class ModelReport(BaseModel):
    """What a model directory holds, as the planner and the wizard need it."""

    path: str
    config: ConfigSummary
    weight_format: str = Field("none", description="safetensors, bin or none")
    shards: list[ShardReport] = Field(default_factory=list)
    weights_bytes: int = 0
    n_params: int | None = None
    n_params_source: str = Field(
        "none", description="safetensors headers, bin size estimate, config"
    )
    n_params_from_config: int | None = None
    dtype: str | None = Field(None, description="torch dtype name of most parameters")
    dtype_counts: dict[str, int] = Field(default_factory=dict)
    tokenizer_files: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def read_safetensors_header(path: Path) -> tuple[dict[str, Any], int]:
    """The tensor table of a safetensors file and the file size it implies (header + data)."""
    with path.open("rb") as fh:
        raw = fh.read(8)
        if len(raw) < 8:
            raise ValueError("shorter than the 8-byte header length")
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER:
            raise ValueError(f"header length {length} is not plausible: not a safetensors file")
        data = fh.read(length)
    if len(data) < length:
        raise ValueError(f"header cut short ({len(data)} of {length} bytes)")
    try:
        header = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"header is not JSON ({str(exc)[:80]})") from None
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object of tensors")
    end = 0
    for key, tensor in header.items():
        if key != "__metadata__":
            end = max(end, _tensor_end(key, tensor))
    return header, 8 + length + end


def _tensor_end(name: str, tensor: Any) -> int:
    """The end offset of one tensor entry, after checking it is a well-formed entry."""
    if not isinstance(tensor, dict):
        raise ValueError(f"tensor {name[:80]!r} is not an object")
    shape, offsets, dtype = tensor.get("shape"), tensor.get("data_offsets"), tensor.get("dtype")
    if not isinstance(shape, list) or not all(_natural(d) for d in shape):
        raise ValueError(f"tensor {name[:80]!r} has shape {str(shape)[:40]}: not natural numbers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_natural, offsets))):
        raise ValueError(f"tensor {name[:80]!r} has bad data_offsets {str(offsets)[:40]}")
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"tensor {name[:80]!r} has unknown dtype {str(dtype)[:20]!r}")
    start, end = offsets
    if end - start != math.prod(shape) * DTYPE_BYTES[dtype]:
        raise ValueError(f"tensor {name[:80]!r}: data_offsets do not match its shape and dtype")
    return int(end)


def _natural(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def summarize_config(config: dict[str, Any]) -> ConfigSummary:
    """The fields the planner reads. config.json may be anything (a hostile or broken file): a
    value of the wrong type or a non-positive size is dropped, never trusted or raised."""
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else None
    heads = config.get("num_attention_heads")
    raw: dict[str, Any] = {
        "architecture": arch,
        "model_type": config.get("model_type"),
        "hidden_size": config.get("hidden_size"),
        "intermediate_size": config.get("intermediate_size"),
        "num_hidden_layers": config.get("num_hidden_layers"),
        "num_attention_heads": heads,
        "num_key_value_heads": config.get("num_key_value_heads") or heads,
        "head_dim": config.get("head_dim"),
        "vocab_size": config.get("vocab_size"),
        "max_position_embeddings": config.get("max_position_embeddings"),
        "torch_dtype": config.get("torch_dtype") or config.get("dtype"),
    }
    clean: dict[str, Any] = {}
    for name, value in raw.items():
        if name in ("architecture", "model_type", "torch_dtype"):
            if isinstance(value, str):
                clean[name] = value[:200]
        elif _natural(value) and 0 < value < 2**40:
            clean[name] = value
    tie = config.get("tie_word_embeddings", False)
    return ConfigSummary(**clean, tie_word_embeddings=tie is True)


def llama_params_from_config(c: ConfigSummary) -> int | None:
    """Parameter count of a Llama-shaped decoder (no biases), for the cross-check."""
    needed = (c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads)
    if None in needed or c.vocab_size is None:
        return None
    h, inter, layers, heads = (int(x) for x in needed)  # type: ignore[arg-type]
    head_dim = c.head_dim or h // heads
    kv = (c.num_key_value_heads or heads) * head_dim
    attn = h * heads * head_dim * 2 + h * kv * 2
    per_layer = attn + 3 * h * inter + 2 * h
    embed = c.vocab_size * h
    return embed + layers * per_layer + h + (0 if c.tie_word_embeddings else embed)


def _tokenizer_check(root: Path, config: ConfigSummary, report: ModelReport) -> None:
    names = ["tokenizer.model", "tokenizer.json", "tokenizer_config.json"]
    names += ["special_tokens_map.json"]
    report.tokenizer_files = [n for n in names if (root / n).is_file()]
    has_sp = "tokenizer.model" in report.tokenizer_files
    if not has_sp and "tokenizer.json" not in report.tokenizer_files:
        report.problems.append(
            "no tokenizer: FastChat loads the slow tokenizer, which needs tokenizer.model "
            "(sentencepiece, Llama) or tokenizer.json; copy them from the model's repo"
        )
    elif not has_sp and config.model_type == "llama":
        report.warnings.append(
            "tokenizer.model is missing: FastChat asks for the slow LlamaTokenizer and "
            "transformers will fall back to the fast one from tokenizer.json"
        )
    if "tokenizer_config.json" not in report.tokenizer_files and report.tokenizer_files:
        report.warnings.append("tokenizer_config.json is missing: special tokens may be wrong")


def _index(root: Path, name: str, report: ModelReport) -> list[str] | None:
    path = root / name
    if not path.is_file():
        return None
    try:
        weight_map = json.loads(path.read_text(encoding="utf-8"))["weight_map"]
        shards = sorted(set(weight_map.values()))
        if not all(isinstance(s, str) for s in shards):
            raise TypeError("shard names are not strings")
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        problem = f"{type(exc).__name__}: {str(exc)[:80]}"
        report.problems.append(f"{name} is not a valid shard index ({problem}): download it again")
        return []
    inside = []
    for shard in shards:
        if _inside(root, shard):
            inside.append(shard)
        else:
            report.problems.append(
                f"{name} lists {shard[:100]!r}, which is outside the model directory: "
                "refused (a shard index names files next to it)"
            )
    return inside


def _inside(root: Path, name: str) -> bool:
    """Is ``name`` a relative path below ``root``? (Lexically: no absolute path, no '..'. A
    symlink the user made inside the dir is theirs, e.g. an HF cache snapshot's blob links.)"""
    parts = Path(name).parts
    return (
        bool(name) and not name.startswith(("/", "~")) and ".." not in parts and "\x00" not in name
    )


def _present_shard(root: Path, name: str, report: ModelReport) -> ShardReport | None:
    """Record the shard; None (with the problem noted) when the index lists a missing file."""
    shard = ShardReport(name=name)
    report.shards.append(shard)
    path = root / name
    if not path.is_file():
        shard.ok, shard.problem = False, "missing"
        report.problems.append(f"{name} is missing (listed in the shard index): fetch again")
        return None
    shard.size = path.stat().st_size
    report.weights_bytes += shard.size
    return shard


def _safetensors_check(root: Path, names: list[str], report: ModelReport) -> None:
    counts: dict[str, int] = {}
    for name in names:
        shard = _present_shard(root, name, report)
        if shard is None:
            continue
        path = root / name
        try:
            header, shard.expected_size = read_safetensors_header(path)
        except (OSError, ValueError) as exc:
            shard.ok, shard.problem = False, str(exc)
            report.problems.append(f"{name}: {exc}: the file is damaged, fetch it again")
            continue
        if shard.size != shard.expected_size:
            shard.ok = False
            shard.problem = f"{shard.size} bytes, header says {shard.expected_size}"
            report.problems.append(
                f"{name} is {shard.size} bytes but its header describes {shard.expected_size}: "
                "the download was cut short; run 'trainwiz model fetch' again to resume it"
            )
        for key, tensor in header.items():
            if key == "__metadata__":
                continue
            n = math.prod(tensor["shape"])  # natural numbers: checked by the header reader
            shard.n_params += n
            counts[tensor["dtype"]] = counts.get(tensor["dtype"], 0) + n
    report.dtype_counts = counts
    report.n_params = sum(counts.values())
    report.n_params_source = "safetensors headers"
    if counts:
        top = max(counts, key=lambda k: counts[k])
        report.dtype = ST_TO_TORCH.get(top, top.lower())


def _bin_check(root: Path, names: list[str], config: ConfigSummary, report: ModelReport) -> None:
    for name in names:
        shard = _present_shard(root, name, report)
        if shard is None:
            continue
        path = root / name
        if not _zip_complete(path):
            shard.ok, shard.problem = False, "no zip end record"
            report.problems.append(
                f"{name} has no zip end record: the download was cut short; fetch it again"
            )
    dtype = config.torch_dtype or "float32"
    per = DTYPE_BYTES.get(TORCH_DTYPE_TO_ST.get(dtype, "F32"), 4)
    report.dtype = dtype
    report.n_params = report.weights_bytes // per
    report.n_params_source = "bin size estimate"
    report.warnings.append(
        f"PyTorch .bin checkpoint: parameter count estimated from file size at {per} bytes "
        f"per parameter ({dtype} per config.json); safetensors would give the exact count"
    )


def _zip_complete(path: Path) -> bool:
    """torch.save files are zips: a complete one ends with an end-of-central-directory record."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        fh.seek(max(0, size - 65557))
        tail = fh.read()
    return b"PK\x05\x06" in tail


def validate_model_dir(path: str | Path) -> ModelReport:
    """Validate a model directory; problems are collected, never raised, except a missing dir."""
    root = Path(path).expanduser()
    if root.exists() and not root.is_dir():
        raise BadInput(
            _("{root} is a file, not a model directory: give the directory holding it").format(
                root=root
            )
        )
    if not root.is_dir():
        raise BadInput(
            _("model directory {root} does not exist: fetch the model or fix model.dir").format(
                root=root
            )
        )
    config_raw, problems = _read_config(root)
    config = summarize_config(config_raw)
    report = ModelReport(path=str(root), config=config, problems=problems)
    report.n_params_from_config = llama_params_from_config(config)
    _tokenizer_check(root, config, report)

    st_index = _index(root, "model.safetensors.index.json", report)
    bin_index = _index(root, "pytorch_model.bin.index.json", report)
    st_files = sorted(p.name for p in root.glob("*.safetensors"))
    bin_files = sorted(p.name for p in root.glob("pytorch_model*.bin"))
    if st_index is not None or st_files:
        report.weight_format = "safetensors"
        _safetensors_check(root, st_index if st_index is not None else st_files, report)
    elif bin_index is not None or bin_files:
        report.weight_format = "bin"
        _bin_check(root, bin_index if bin_index is not None else bin_files, config, report)
    else:
        report.problems.append(
            "no weights (*.safetensors or pytorch_model*.bin): the download is incomplete"
        )
    _cross_check(report)
    return report


def _read_config(root: Path) -> tuple[dict[str, Any], list[str]]:
    """config.json as a dict, or {} with the problem (missing, not JSON, not an object)."""
    try:
        raw = json.loads((root / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}, ["config.json is missing: this is not a Hugging Face model directory"]
    except (ValueError, RecursionError, OSError) as exc:
        return {}, [f"config.json is not valid JSON ({type(exc).__name__}: {str(exc)[:80]})"]
    if not isinstance(raw, dict):
        return {}, ["config.json is not a JSON object: download it again"]
    return raw, []


def _cross_check(report: ModelReport) -> None:
    expected = report.n_params_from_config
    if expected is None or not report.n_params or report.n_params_source != "safetensors headers":
        return
    if report.shards and not all(s.ok for s in report.shards):
        return
    if report.n_params != expected and report.config.model_type == "llama":
        report.warnings.append(
            f"safetensors hold {report.n_params:,} parameters but config.json implies "
            f"{expected:,}: the weights may not belong to this config"
        )
