"""Checkpoints that resume: completeness marker, rotation, time-based saves, FSDP state dict type.

A sibling of ``train_entry.py`` (copied into each run dir, imported there as ``checkpoints``) and
also importable by the wizard as ``backend.entry.checkpoints``: the part above the training-side
section imports only the standard library, so ``trainwiz resume``/``runs``/``chat`` share the
entry's one definition of "a complete checkpoint" (docs/checkpoints.md).

Complete means: the Hugging Face Trainer finished writing ``checkpoint-N`` (weights, optimizer,
scheduler, RNG, trainer_state.json), every rank got past a barrier, the files were fsynced, and
only then rank 0 wrote ``trainwiz-complete.json`` atomically (temp + rename). A save killed half
way leaves a directory without the marker, which resume skips. The Trainer's own rotation runs
before its ``on_save`` callback, so it could delete the last complete checkpoint while the new
one has no marker yet; the entry therefore switches it off and rotates here, after the marker,
keeping the newest ``save_total_limit`` complete checkpoints.

Complete is not enough to resume: a marked checkpoint can be damaged later (a copy cut short, a
full disk, a file truncated by hand). ``resume_choice`` therefore verifies each candidate from
its files (``checkpoint_problem``: cheap structural checks, no torch) and falls back to the
newest one that passes, naming every newer one it skipped and why. The CLI's resume and the entry
take that one decision, so the attempt starts from the checkpoint the user was told.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__:  # imported by the wizard, as backend.entry.checkpoints
    from .checkpoint_verify import STATE_FILE, checkpoint_problem, link_problem
else:  # the entry's sibling, imported as a top-level module (its folder is on sys.path)
    from checkpoint_verify import (  # type: ignore[import-not-found,no-redef]
        STATE_FILE,
        checkpoint_problem,
        link_problem,
    )

MARKER = "trainwiz-complete.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def _named(root: Path) -> list[tuple[int, Path]]:
    """Every entry of ``root`` named ``checkpoint-N``, symbolic links included, oldest first."""
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _CHECKPOINT.match(child.name)
        if match and (child.is_symlink() or child.is_dir()):
            found.append((int(match.group(1)), child))
    return sorted(found)


def checkpoint_dirs(output_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """``checkpoint-N`` directories of ``output_dir`` as (N, path), oldest step first. A symbolic
    link of that name is none of them: it may lead out of the run (another run's folder, a
    system tree), and nothing here follows it, neither resume nor rotation."""
    return [(s, p) for s, p in _named(Path(output_dir)) if not p.is_symlink()]


def is_complete(path: Path) -> bool:
    return (path / MARKER).is_file()


def read_marker(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def complete_checkpoints(output_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """Complete checkpoints, oldest first. Without any marker in the folder (checkpoints written
    by FastChat's own train.py, or before trainwiz had markers) the Trainer's last file,
    trainer_state.json, is the only evidence there is, so those count."""
    dirs = checkpoint_dirs(output_dir)
    marked = [(step, path) for step, path in dirs if is_complete(path)]
    if marked:
        return marked
    return [(step, path) for step, path in dirs if (path / STATE_FILE).is_file()]


def latest_complete(output_dir: str | os.PathLike[str]) -> Path | None:
    complete = complete_checkpoints(output_dir)
    return complete[-1][1] if complete else None


def incomplete_after(output_dir: str | os.PathLike[str], step: int) -> list[Path]:
    """Checkpoint folders newer than ``step`` that are not complete (a save that was killed)."""
    done = {path for _, path in complete_checkpoints(output_dir)}
    return [path for s, path in checkpoint_dirs(output_dir) if s > step and path not in done]


def write_marker(path: Path, record: dict[str, Any]) -> None:
    """fsync every file of the checkpoint, then the marker by temp file + rename."""
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        try:
            fd = os.open(file, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
    tmp = path / f".{MARKER}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path / MARKER)
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def rotate(output_dir: str | os.PathLike[str], keep: int, protect: str | None = None) -> list[Path]:
    """Delete complete (marked) checkpoints beyond the newest ``keep``; never ``protect`` (the
    best model's checkpoint) and never an unmarked folder (it may not be ours)."""
    marked = [(s, p) for s, p in checkpoint_dirs(output_dir) if is_complete(p)]
    doomed = [p for _, p in marked[: max(0, len(marked) - keep)]]
    removed = []
    for path in doomed:
        if protect and Path(protect).resolve() == path.resolve():
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


# ---------------------------------------------------------------- the checkpoint a resume starts from


@dataclass(frozen=True)
class ResumeChoice:
    """The checkpoint a resume starts from (None: none can) and the newer ones passed over,
    newest first, as (step, path, why)."""

    chosen: tuple[int, Path] | None
    skipped: list[tuple[int, Path, str]]

    def records(self) -> list[dict[str, Any]]:
        """The skipped checkpoints as an attempt's record keeps them (attempts.json)."""
        return [{"step": step, "why": why} for step, _path, why in self.skipped]

    def text(self) -> str:
        return "; ".join(f"checkpoint-{step}: {why}" for step, _path, why in self.skipped)


def resume_choice(output_dir: str | os.PathLike[str]) -> ResumeChoice:
    """The newest complete checkpoint that passes ``checkpoint_problem``, and every newer one
    skipped with its reason (incomplete, damaged, a symbolic link). The one decision of both
    ``trainwiz resume`` (backend/runs/resume.py) and the entry (``resume_point``): without the
    check a damaged newest checkpoint failed every attempt and the next resume chose it again."""
    done = {path for _, path in complete_checkpoints(output_dir)}
    marked = any(is_complete(path) for path in done)
    skipped: list[tuple[int, Path, str]] = []
    for step, path in reversed(_named(Path(output_dir))):
        why = link_problem(path)
        if why is None and path not in done:
            missing = MARKER if marked else STATE_FILE
            why = f"incomplete: no {missing} (its save was cut off), overwritten when reached"
        why = why or checkpoint_problem(path, step)
        if why is None:
            return ResumeChoice((step, path), skipped)
        skipped.append((step, path, why))
    return ResumeChoice(None, skipped)


def resume_point(output_dir: str, log: Any) -> str | None:
    """The checkpoint to resume from (``resume_choice``), naming each newer one it skipped and
    why in train.log, so a fallback to an older checkpoint is never silent."""
    choice = resume_choice(output_dir)
    for _step, path, why in choice.skipped:
        log(f"{path.name} skipped: {why}")
    if choice.chosen is None:
        if choice.skipped:
            log(f"no checkpoint in {output_dir} can be resumed from: from step 0")
        return None
    if choice.skipped:
        log(f"resuming from {choice.chosen[1].name}, the newest that passes the checks")
    return str(choice.chosen[1])


# ---------------------------------------------------------------- training side (torchrun only)


def fsdp_state_dict_type(training_args: Any) -> str | None:
    """FSDP checkpoints are saved SHARDED_STATE_DICT (each rank writes its own shard; nothing is
    gathered onto one host, which is what runs out of host RAM on 13B at save time) unless the
    launch env already names a type. accelerate reads FSDP_STATE_DICT_TYPE when the Trainer
    builds its FSDP plugin, so this runs before the Trainer exists."""
    if not getattr(training_args, "fsdp", None):
        return None
    os.environ.setdefault("FSDP_STATE_DICT_TYPE", "SHARDED_STATE_DICT")
    return os.environ["FSDP_STATE_DICT_TYPE"]


def full_state_dict_for_final_save(trainer: Any) -> None:
    """The final model must load with from_pretrained: switch the plugin to FULL_STATE_DICT
    (gathered to rank 0 on CPU) for the last save only; checkpoints stay sharded."""
    plugin = getattr(getattr(trainer, "accelerator", None), "state", None)
    plugin = getattr(plugin, "fsdp_plugin", None)
    if plugin is None or "FULL_STATE_DICT" in str(plugin.state_dict_type):
        return
    plugin.state_dict_config = None
    plugin.optim_state_dict_config = None
    plugin.set_state_dict_type("FULL_STATE_DICT")


def has_fsdp_optimizer(checkpoint: str | os.PathLike[str]) -> bool:
    """The checkpoint holds an FSDP optimizer (accelerate's sharded folder or full file)."""
    path = Path(checkpoint)
    return any((path / name).exists() for name in ("optimizer_0", "optimizer.bin"))


def prime_optimizer_state(optimizer: Any, torch: Any) -> bool:
    """Create the optimizer's per-parameter state (Adam's moments and step) before an FSDP
    checkpoint's optimizer is loaded into it; return whether it had to.

    Why: accelerate's ``load_fsdp_optimizer`` (1.15) reads a SHARDED_STATE_DICT optimizer with
    ``torch.distributed.checkpoint.load``, which fills only the keys of the template it is given,
    and the template is ``FSDP.optim_state_dict`` of the Trainer's fresh optimizer, whose state is
    empty until its first step. So only the param groups came back: the resumed run restarted
    Adam from zero moments and step 0 (a bias-corrected first step, about lr per weight), which
    is the FSDP resume divergence from the first update after the checkpoint (docs/checkpoints.md).
    Torch's own ``get_optimizer_state_dict`` primes the same way: one step with zero gradients
    and the learning rate set to 0 leaves every weight bit-identical (AdamW's decay is
    ``1 - lr * wd``); the load then overwrites the zeros with the checkpoint's values."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer
    if inner.state:
        return False
    params = [p for group in inner.param_groups for p in group["params"] if p.requires_grad]
    if not params or any(p.grad is not None for p in params):
        return False
    for param in params:
        param.grad = torch.zeros_like(param)
    saved = []
    for group in inner.param_groups:
        saved.append(group.get("lr"))
        if "lr" in group:
            lr = group["lr"]
            group["lr"] = torch.zeros_like(lr) if isinstance(lr, torch.Tensor) else 0.0
    inner.step()
    for group, lr in zip(inner.param_groups, saved):
        if lr is not None:
            group["lr"] = lr
    inner.zero_grad(set_to_none=True)
    return True


def make_checkpoint_callback(transformers: Any, torch: Any) -> Any:
    """The callback class, built here so that this module imports without transformers."""

    class CheckpointCallback(transformers.TrainerCallback):
        """Marks finished saves complete, rotates after the marker, saves every N minutes."""

        def __init__(self, training_args: Any, save_minutes: float | None, attempt: int) -> None:
            self.keep = training_args.save_total_limit
            training_args.save_total_limit = None  # rotation happens here, after the marker
            self.save_seconds = save_minutes * 60 if save_minutes else None
            self.attempt = attempt
            self.last_save = time.monotonic()
            self.rank = int(os.environ.get("RANK", "0"))

        def _dist(self) -> bool:
            return bool(torch.distributed.is_available() and torch.distributed.is_initialized())

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.save_seconds is None or control.should_save:
                return
            due = time.monotonic() - self.last_save >= self.save_seconds
            if self._dist():  # every rank must take the same decision, or the save deadlocks
                flag = torch.tensor([1.0 if due else 0.0], device=_device(torch))
                torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
                due = bool(flag.item())
            if due:
                control.should_save = True

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if self._dist():
                torch.distributed.barrier()  # every rank's shard is on disk
            if self.rank == 0 and path.is_dir():
                record = {
                    "step": int(state.global_step),
                    "max_steps": int(state.max_steps),
                    "epoch": float(state.epoch or 0.0),
                    "attempt": self.attempt,
                    "time": time.time(),
                    "world_size": int(os.environ.get("WORLD_SIZE", "1")),
                    "state_dict_type": os.environ.get("FSDP_STATE_DICT_TYPE"),
                }
                write_marker(path, record)
                if self.keep:
                    rotate(args.output_dir, self.keep, protect=state.best_model_checkpoint)
            if self._dist():
                torch.distributed.barrier()
            self.last_save = time.monotonic()

    return CheckpointCallback


def _device(torch: Any) -> Any:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
