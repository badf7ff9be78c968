"""Export a run's model: safetensors + tokenizer + a README model card, in one folder.

The worker (``worker.py export``, the training side's python) loads the weights, writes them
with ``save_pretrained(safe_serialization=True)`` and loads the result back with
AutoModelForCausalLM, the proof that the export is usable. Everything is written into a hidden
sibling folder first and renamed into place at the end, so ``--to DIR`` is either the whole
export or untouched; an existing non-empty DIR is refused (trainwiz never overwrites a folder it
did not create).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from backend import subproc
from backend.errors import BadInput, TrainwizError
from backend.i18n import _
from backend.preset.runpreset import run_preset
from backend.preset.schema import Preset, map_container_path
from backend.results.merge import export_adapter_run, is_adapter_run
from backend.results.model_card import render
from backend.results.serve_template import run_template
from backend.results.summary import run_summary
from backend.results.weights import WORKER, uniform_modes, weights, worker_python


@dataclass
class ExportResult:
    to: Path
    source: Path
    files: list[str] = field(default_factory=list)
    n_params: int | None = None
    consolidated: bool = False  # source was an FSDP-sharded checkpoint


def data_file(preset: Preset) -> Path | None:
    """The training data as a host path (None when only the container sees it)."""
    path = preset.training.data_path
    if preset.launch.runner == "docker":
        mapped = map_container_path(path, preset.container.volumes, preset.launch.workdir)
        return Path(mapped) if mapped != path else None
    return Path(preset.launch.workdir or os.getcwd()).expanduser() / Path(path).expanduser()


def _check_target(to: Path) -> None:
    if to.exists() and (not to.is_dir() or any(to.iterdir())):
        raise BadInput(_("--to {to}: exists and is not empty: choose a new folder").format(to=to))
    if not to.parent.is_dir():
        raise BadInput(
            _("--to {to}: its parent {parent} does not exist").format(to=to, parent=to.parent)
        )


def export_run(
    run_dir: Path,
    to: Path,
    *,
    checkpoint: int | None = None,
    timeout: float = 1800.0,
    merge: bool = False,
) -> ExportResult:
    to = to.expanduser().absolute()
    _check_target(to)
    preset = run_preset(run_dir)
    if merge or is_adapter_run(preset):  # LoRA/QLoRA: the adapter, or merged (merge.py)
        render_card = partial(
            render, run_dir.name, preset, run_summary(run_dir), data_file=data_file(preset)
        )
        return ExportResult(to, *export_adapter_run(
            run_dir, to, preset, merge=merge, checkpoint=checkpoint, timeout=timeout,
            card=render_card,
        ))  # fmt: skip
    picked = weights(run_dir, checkpoint)
    source = picked.path
    tmp = to.parent / f".{to.name}.trainwiz-export-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    argv = [worker_python(run_dir), str(WORKER), "export", *picked.worker_args(), "--to", str(tmp)]
    argv += ["--work", str(to.parent)]  # a sharded checkpoint is consolidated beside the target
    try:
        proc = subproc.probe(argv, timeout)
        if proc.error is not None:
            raise proc.error  # the worker would not start or ran past the timeout
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.code != 0 or not lines:
            tail = " | ".join(proc.stderr.strip().splitlines()[-5:])
            if proc.code == 2 and picked.sharded:  # consolidate.py: the shards are incomplete
                raise BadInput(tail)
            raise TrainwizError(
                _("export of {source} failed (exit {returncode}): {tail}").format(
                    source=source, returncode=proc.code, tail=tail
                )
            )
        report = json.loads(lines[-1])
        card = render(
            run_dir.name,
            preset,
            run_summary(run_dir),
            data_file=data_file(preset),
            source=source,
            n_params=report.get("n_params"),
            chat_template=run_template(run_dir),
        )
        (tmp / "README.md").write_text(card, encoding="utf-8")
        uniform_modes(tmp)
        if to.exists():
            to.rmdir()  # empty (checked above)
        os.replace(tmp, to)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    files = sorted(p.name for p in to.iterdir())
    return ExportResult(to, source, files, report.get("n_params"), picked.sharded)
