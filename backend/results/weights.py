"""Which weights of a run to load: the final model, or one complete checkpoint.

Shared by chat and export, so both accept the same ``--checkpoint N`` and refuse the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path

from backend.entry.checkpoints import is_complete
from backend.errors import BadInput
from backend.i18n import _
from backend.runs.resume import checkpoints, output_dir
from backend.runs.rundir import PRESET

WORKER = Path(__file__).resolve().with_name("worker.py")
_WEIGHT_GLOBS = ("model.safetensors", "model-*.safetensors", "pytorch_model*.bin")


def has_weights(path: Path) -> bool:
    """A folder from_pretrained can load: config.json and full (not FSDP-sharded) weights."""
    return (path / "config.json").is_file() and any(
        any(path.glob(pattern)) for pattern in _WEIGHT_GLOBS
    )


def model_dir(run_dir: Path, checkpoint: int | None = None) -> Path:
    """The folder to load: ``checkpoint-N`` when asked, else the final model, else the newest
    complete checkpoint that holds full weights."""
    out = output_dir(run_dir)
    if out is None:
        raise BadInput(
            _("run {name}: its output_dir is only visible inside the container").format(
                name=run_dir.name
            )
        )
    if checkpoint is not None:
        path = out / f"checkpoint-{checkpoint}"
        steps = [s for s, _path in checkpoints(run_dir)]
        if not path.is_dir() or (not is_complete(path) and checkpoint not in steps):
            listed = ", ".join(str(s) for s in steps) or "none"
            raise BadInput(
                _(
                    "--checkpoint {checkpoint}: run {name} has no complete checkpoint-{checkpoint} "
                    "(complete ones: {listed})"
                ).format(checkpoint=checkpoint, name=run_dir.name, listed=listed)
            )
        if not has_weights(path):
            raise BadInput(
                _(
                    "--checkpoint {checkpoint}: {path} holds FSDP-sharded weights only; chat with or "
                    "export the final model (leave out --checkpoint) once the run has finished"
                ).format(checkpoint=checkpoint, path=path)
            )
        return path
    if has_weights(out):
        return out
    for _step, path in reversed(checkpoints(run_dir)):
        if has_weights(path):
            return path
    raise BadInput(
        _(
            "run {name}: no saved model in {out} and no checkpoint with full weights: let "
            "the run finish (or resume it: trainwiz resume)"
        ).format(name=run_dir.name, out=out)
    )


def worker_python(run_dir: Path) -> str:
    """The training side's python (the preset's venv; else this interpreter's environment)."""
    from backend.preset.loader import load_preset
    from backend.runs.launch import training_bin

    try:
        preset = load_preset(run_dir / PRESET)
    except Exception:
        return sys.executable
    return str(training_bin(preset, "python"))
