"""Where a LoRA/QLoRA run's adapter is and which base model it needs: read by the export
(``merge``) and by chat/serve (``weights``), so it sits below both.
"""

from __future__ import annotations

import json
from pathlib import Path

from backend.errors import BadInput
from backend.preset.schema import Preset, map_container_path
from backend.runs.resume import checkpoints, output_dir

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


def is_adapter_run(preset: Preset) -> bool:
    return preset.training.method in ("lora", "qlora")


def has_adapter(path: Path) -> bool:
    return (path / "adapter_config.json").is_file() and any(
        (path / name).is_file() for name in ADAPTER_FILES[1:]
    )


def adapter_dir(run_dir: Path, checkpoint: int | None) -> Path:
    """The run's final adapter, its ``checkpoint-N`` one, or the newest checkpoint's."""
    out = output_dir(run_dir)
    if out is None:
        raise BadInput(f"run {run_dir.name}: its output_dir is only visible inside the container")
    if checkpoint is not None:
        path = out / f"checkpoint-{checkpoint}"
        if not has_adapter(path):
            listed = ", ".join(str(s) for s, p in checkpoints(run_dir) if has_adapter(p))
            raise BadInput(
                f"--checkpoint {checkpoint}: run {run_dir.name} has no LoRA adapter in {path} "
                f"(checkpoints with one: {listed or 'none'})"
            )
        return path
    if has_adapter(out):
        return out
    for _step, path in reversed(checkpoints(run_dir)):
        if has_adapter(path):
            return path
    raise BadInput(
        f"run {run_dir.name}: no LoRA adapter (adapter_config.json) in {out} or its checkpoints: "
        "let the run finish (or resume it: trainwiz resume)"
    )


def base_model_dir(adapter: Path, preset: Preset) -> Path:
    """The base the adapter was trained on, as a host path (from adapter_config.json)."""
    config = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
    seen = str(config.get("base_model_name_or_path") or preset.model_path_for_trainer())
    if preset.launch.runner == "docker":
        seen = map_container_path(seen, preset.container.volumes, preset.launch.workdir)
    base = Path(seen)
    if not (base / "config.json").is_file():
        raise BadInput(
            f"--merge: the adapter's base model {seen} (adapter_config.json "
            "base_model_name_or_path) has no config.json on this host: fetch the model again "
            "(trainwiz replay PRESET --until model) or export without --merge"
        )
    return base
