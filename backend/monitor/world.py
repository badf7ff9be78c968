"""The world size a run trains with (the trainer's, from metrics.jsonl) against the plan's.

The entry writes the trainer's own world size into the ``start`` line (``world_size``, with
``parallel_mode`` and ``dist_backend``); the plan's is the preset's processes: nodes x Slurm
tasks per node x ``nproc_per_node``. ``runs`` and the Monitor show both and say when they
differ, so a run that trains fewer (or more) ranks than it was planned with is never silent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from backend.i18n import _
from backend.preset import load_preset
from backend.rundir import RunDir


def planned_world(run_dir: Path) -> int | None:
    """Processes the run's preset plans (None: no readable preset in the run dir)."""
    try:
        launch = load_preset(str(RunDir(run_dir).preset_file)).launch
    except Exception:  # a run from an older schema, or a corrupt copy: no plan to compare
        return None
    tasks = launch.slurm.ntasks_per_node if launch.scheduler == "slurm" else 1
    return int(launch.nnodes * tasks * launch.nproc_per_node)


def trainer_start(run_dir: Path) -> dict[str, Any] | None:
    """The last ``start`` line of metrics.jsonl (the latest attempt's)."""
    try:
        with open(RunDir(run_dir).metrics, "rb") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    found = None
    for raw in lines:
        if b'"start"' not in raw:
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("kind") == "start":
            found = record
    return found


def world_fields(run_dir: Path) -> dict[str, Any]:
    """``world_size`` (the trainer's), ``planned_world_size`` and ``world_note`` ("" when they
    agree or the trainer has not started)."""
    start = trainer_start(run_dir) or {}
    used = start.get("world_size") if isinstance(start.get("world_size"), int) else None
    planned = planned_world(run_dir)
    return {
        "world_size": used,
        "planned_world_size": planned,
        "world_note": world_note(used, planned),
    }


def world_note(used: int | None, planned: int | None) -> str:
    """The line the Monitor and ``runs`` show when the trainer's world size is not the plan's."""
    if used is None or planned is None or used == planned:
        return ""
    return _(
        "the trainer trains with world size {used}, the plan has {planned} process(es)"
    ).format(used=used, planned=planned)
