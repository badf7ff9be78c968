"""The run directory: one folder per launch holding everything a run is (docs/run-format.md).

Every write is a whole-file atomic replace or an append, so a wizard killed at any moment leaves
a directory another process (the watcher, ``trainwiz runs``, the monitor) can still read.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from backend import paths
from backend.errors import BadInput

State = Literal["starting", "running", "finished", "failed", "stopped"]
FINAL_STATES = ("finished", "failed", "stopped")

STATUS = "status.json"
PLAN = "plan.json"
PRESET = "preset.yaml"
LOG = "train.log"
METRICS = "metrics.jsonl"
LAUNCH = "launch.json"  # what the watcher executes (argv, env, docker kwargs), no secrets
STOP_REQUEST = "stop_requested"  # created by `trainwiz stop` so the watcher records "stopped"


class RunStatus(BaseModel):
    """status.json. The contract's keys first; ``watcher_pid`` and ``step`` are additions."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    preset: str
    runner: Literal["host", "docker"]
    state: State = "starting"
    pid: int | None = None
    pgid: int | None = None
    container_id: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    message: str = ""
    watcher_pid: int | None = None
    step: str | None = None

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


def atomic_write(path: Path, text: str) -> None:
    """Temp file in the same directory + fsync + rename: readers see old or new, never half."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_status(run_dir: Path, status: RunStatus) -> None:
    atomic_write(run_dir / STATUS, status.model_dump_json(indent=2) + "\n")


def read_status(run_dir: Path) -> RunStatus:
    try:
        return RunStatus.model_validate_json((run_dir / STATUS).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise BadInput(f"{run_dir}: not a run directory (no {STATUS})") from exc


def update_status(run_dir: Path, **changes: Any) -> RunStatus:
    status = read_status(run_dir).model_copy(update=changes)
    write_status(run_dir, status)
    return status


def new_run_id(preset_name: str, root: Path, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now or time.time()))
    base = f"{stamp}-{preset_name}"
    candidate, n = base, 1
    while (root / candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def create_run_dir(preset_name: str, runner: Literal["host", "docker"]) -> Path:
    """Make the directory (exclusively, so two launches in one second never share one)."""
    root = paths.runs_dir()
    root.mkdir(parents=True, exist_ok=True)
    while True:
        run_id = new_run_id(preset_name, root)
        run_dir = root / run_id
        try:
            run_dir.mkdir()
        except FileExistsError:
            continue
        break
    write_status(run_dir, RunStatus(run_id=run_id, preset=preset_name, runner=runner))
    (run_dir / LOG).touch()
    return run_dir


def write_json(path: Path, data: Any) -> None:
    atomic_write(path, json.dumps(data, indent=2, default=str) + "\n")


def list_run_dirs() -> list[Path]:
    """Run directories, oldest first (ids start with a timestamp)."""
    root = paths.runs_dir()
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if (p / STATUS).is_file())


def find_run(ref: str) -> Path:
    """A run by id, unique id prefix, 'last', or a run directory path."""
    as_path = Path(ref).expanduser()
    if (as_path / STATUS).is_file():
        return as_path.resolve()
    runs = list_run_dirs()
    if ref in ("last", "latest"):
        if not runs:
            raise BadInput("no runs yet: start one with 'trainwiz launch PRESET'")
        return runs[-1]
    exact = [p for p in runs if p.name == ref]
    if exact:
        return exact[0]
    matches = [p for p in runs if p.name.startswith(ref) or re.search(re.escape(ref) + "$", p.name)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise BadInput(f"run '{ref}': no such run (see 'trainwiz runs')")
    names = ", ".join(p.name for p in matches[:5])
    raise BadInput(f"run '{ref}' is ambiguous ({names}): give more of the id")
