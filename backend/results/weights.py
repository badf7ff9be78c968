"""Which weights of a run to load: the final model, or one complete checkpoint.

Shared by chat and export, so both accept the same ``--checkpoint N`` and refuse the same way.
A checkpoint of an FSDP run holds its weights only as DCP shards (``pytorch_model_fsdp_0/``):
it is loaded through a consolidation (``backend/entry/consolidate.py``, run by the results
worker in the training environment) with the run's base model for config and tokenizer.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from backend.entry.checkpoints import MARKER, is_complete
from backend.entry.consolidate import is_sharded, sharded_problem
from backend.errors import BadInput
from backend.i18n import _
from backend.images.ready import training_bin
from backend.preset.runpreset import run_preset
from backend.preset.schema import map_container_path
from backend.results import adapters
from backend.rundir import RunDir
from backend.runs.resume import checkpoints, output_dir

WORKER = Path(__file__).resolve().with_name("worker.py")
_WEIGHT_GLOBS = ("model.safetensors", "model-*.safetensors", "pytorch_model*.bin")


def has_weights(path: Path) -> bool:
    """A folder from_pretrained can load: config.json and full (not FSDP-sharded) weights."""
    return (path / "config.json").is_file() and any(
        any(path.glob(pattern)) for pattern in _WEIGHT_GLOBS
    )


@dataclass(frozen=True)
class Weights:
    """What chat and export load: ``path`` as it is, or, with ``base`` (the folder with the
    run's config.json and tokenizer), the FSDP-sharded checkpoint ``path`` consolidated."""

    path: Path
    base: Path | None = None
    # A LoRA/QLoRA run: ``path`` is the adapter folder, loaded on top of this base model.
    adapter_base: Path | None = None

    @property
    def sharded(self) -> bool:
        return self.base is not None

    def worker_args(self) -> list[str]:
        """The results worker's arguments naming these weights."""
        if self.adapter_base is not None:
            return ["--model", str(self.adapter_base), "--adapter", str(self.path)]
        base = ["--base", str(self.base)] if self.base is not None else []
        return ["--model", str(self.path), *base]


def base_model_dir(run_dir: Path) -> Path | None:
    """The model the run started from (its ``--model_name_or_path``), as a host path; None when
    only the container sees it or it is gone."""
    spec = RunDir(run_dir).launch_spec()  # a copied run dir's paths are its own
    argv = list((spec.get("train") or {}).get("argv") or [])
    argv += list((spec.get("docker") or {}).get("command") or [])
    for step in spec.get("exec") or []:
        argv += list(step.get("argv") or [])
    if "--model_name_or_path" not in argv[:-1]:
        return None
    path = str(argv[argv.index("--model_name_or_path") + 1])
    if spec.get("runner") == "docker":
        try:
            preset = run_preset(run_dir)
        except Exception:
            return None
        path = map_container_path(path, preset.container.volumes, preset.launch.workdir)
    found = Path(path)
    return found if (found / "config.json").is_file() else None


def _sharded(run_dir: Path, path: Path) -> Weights:
    """Weights for a sharded checkpoint, refused (nothing started) when it is incomplete or the
    run's config and tokenizer are not readable here."""
    problem = sharded_problem(path)
    if problem:
        raise BadInput(
            _(
                "{problem}: choose another checkpoint (trainwiz runs lists the complete ones)"
            ).format(problem=problem)
        )
    out = output_dir(run_dir)
    base = base_model_dir(run_dir)
    if base is None and out is not None and (out / "config.json").is_file():
        base = out  # the final model's folder has the same config and tokenizer
    if base is None:
        raise BadInput(
            _(
                "{path} holds FSDP-sharded weights; consolidating them needs the run's base model "
                "(config.json, tokenizer), which is not readable on this host"
            ).format(path=path)
        )
    return Weights(path, base)


def weights(run_dir: Path, checkpoint: int | None = None) -> Weights:
    """The weights to load: ``checkpoint-N`` when asked, else the final model, else the newest
    complete checkpoint (full weights, or FSDP-sharded and consolidated)."""
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
        listed = ", ".join(str(s) for s in steps) or "none"
        if checkpoint < 0:  # never a folder name to look up: checkpoint--1 is no step's
            raise BadInput(
                _(
                    "--checkpoint {n}: give the step of one of the run's checkpoints "
                    "(complete ones: {listed})"
                ).format(n=checkpoint, listed=listed)
            )
        lora = _adapter(run_dir, out, checkpoint) if path.is_dir() else None
        if lora is not None:
            return lora
        if not path.is_dir():
            raise BadInput(
                _(
                    "--checkpoint {checkpoint}: run {name} has no complete checkpoint-{checkpoint} "
                    "(complete ones: {listed})"
                ).format(checkpoint=checkpoint, name=run_dir.name, listed=listed)
            )
        if not is_complete(path) and checkpoint not in steps:
            raise BadInput(
                _(
                    "--checkpoint {n}: {path} is incomplete: no {marker} (its save was cut off; "
                    "complete ones: {listed})"
                ).format(n=checkpoint, path=path, marker=MARKER, listed=listed)
            )
        if has_weights(path):
            return Weights(path)
        if is_sharded(path):
            return _sharded(run_dir, path)
        raise BadInput(
            _("--checkpoint {n}: {path} holds no model weights").format(n=checkpoint, path=path)
        )
    adapter = _adapter(run_dir, out, checkpoint)
    if adapter is not None:
        return adapter
    if has_weights(out):
        return Weights(out)
    for _step, path in reversed(checkpoints(run_dir)):
        if has_weights(path):
            return Weights(path)
        if is_sharded(path) and sharded_problem(path) is None:
            return _sharded(run_dir, path)
    raise BadInput(
        _(
            "run {name}: no saved model in {out} and no complete checkpoint: "
            "let the run finish (or resume it: trainwiz resume)"
        ).format(name=run_dir.name, out=out)
    )


def _adapter(run_dir: Path, out: Path, checkpoint: int | None) -> Weights | None:
    """A LoRA/QLoRA run's adapter (final, or ``checkpoint-N``'s) on its base model; None for a
    full fine-tune. A missing base is refused here, before any worker starts."""
    try:
        preset = run_preset(run_dir)
    except Exception:
        return None
    if not adapters.is_adapter_run(preset):
        return None
    saved = adapters.has_adapter(out) or any(
        adapters.has_adapter(path) for _step, path in checkpoints(run_dir)
    )
    if checkpoint is None and not saved:
        return None  # nothing saved yet: the caller's "no saved model" says so
    adapter = adapters.adapter_dir(run_dir, checkpoint)
    return Weights(adapter, adapter_base=adapters.base_model_dir(adapter, preset))


def model_dir(run_dir: Path, checkpoint: int | None = None) -> Path:
    """The folder (or sharded checkpoint) :func:`weights` picks."""
    return weights(run_dir, checkpoint).path


def umask() -> int:
    """The process's umask, read without changing it (``os.umask`` must set one to read it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def uniform_modes(folder: Path) -> None:
    """Give an export's files one mode, 0644 under the usual umask (0666 less the user's
    umask; folders 0777 less it): copies keep their checkpoint's modes (0600 from a trainer's
    umask, 0755 from a tool), and an export is meant to be shared."""
    mask = umask()
    os.chmod(folder, 0o777 & ~mask)
    for path in folder.rglob("*"):
        if path.is_symlink():
            continue
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def worker_python(run_dir: Path) -> str:
    """The training side's python (the preset's venv; else this interpreter's environment)."""
    try:
        preset = run_preset(run_dir)
    except Exception:
        return sys.executable
    return str(training_bin(preset, "python"))
