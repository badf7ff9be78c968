"""The run directory: one folder per launch holding everything a run is (docs/run-format.md).

Every write is a whole-file atomic replace or an append, so a wizard killed at any moment leaves
a directory another process (the watcher, ``trainwiz runs``, the monitor) can still read. A full
disk never tears a record either: each run dir holds a small reserve file that a write hitting
ENOSPC releases before its one retry, and a write that still fails leaves the last good file.
Run dirs are 0700 and run files 0600: logs and presets can name private paths and hosts.
"""

from __future__ import annotations

import errno
import json
import os
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from backend import paths
from backend.errors import BadInput, TrainwizError
from backend.i18n import _

State = Literal["starting", "running", "finished", "failed", "stopped", "unknown"]
FINAL_STATES = ("finished", "failed", "stopped")

STATUS = "status.json"
PLAN = "plan.json"
PRESET = "preset.yaml"
LOG = "train.log"
METRICS = "metrics.jsonl"
LAUNCH = "launch.json"  # what the watcher executes (argv, env, docker kwargs), no secrets
STOP_REQUEST = "stop_requested"  # created by `trainwiz stop` so the watcher records "stopped"
RESERVE = ".reserve"  # released when a record write hits a full disk
RESERVE_BYTES = 256 << 10
RUN_ID_NAME_MAX = 64  # preset-name part of a run id: ids stay well under NAME_MAX (255)
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)
MIN_FREE = 4 << 20  # a launch with less free space than this would only fill the disk


class DiskFull(TrainwizError):
    """A record could not be written because its file system is full (the last good file stays)."""


class CorruptRun(BadInput):
    """status.json is missing, unreadable or not a status: reported per run, never fatal."""


class RunStatus(BaseModel):
    """status.json. The contract's keys first; the rest are additions (docs/run-format.md)."""

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
    cause: str | None = None  # why a run ended badly: disk_full, launcher_died, signal, loss_nan..
    pid_start: int | None = None  # start times (/proc/PID/stat) make a recorded pid trustworthy
    watcher_start: int | None = None
    launcher_pid: int | None = None
    launcher_start: int | None = None
    master_port: int | None = None

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


def private_open(path: Path, flags: int = os.O_WRONLY | os.O_CREAT | os.O_APPEND) -> int:
    return os.open(path, flags, 0o600)


def write_private(path: Path, text: str) -> None:
    """A run file the user alone can read (presets and plans name private paths)."""
    atomic_write(path, text)


def release_reserve(run_dir: Path) -> bool:
    try:
        (run_dir / RESERVE).unlink()
    except OSError:
        return False
    return True


def make_reserve(run_dir: Path) -> None:
    fd = private_open(run_dir / RESERVE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        try:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
        except OSError as exc:
            if exc.errno in FULL_DISK:
                raise
            os.write(fd, b"\0" * RESERVE_BYTES)  # a file system without fallocate
    finally:
        os.close(fd)


def _write_once(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path: Path, text: str) -> None:
    """Temp file (0600) + fsync + rename: readers see old or new, never half.

    On a full disk the run's reserve is released and the write retried once; if it still fails
    the previous file is left as it was and DiskFull is raised.
    """
    data = text.encode("utf-8")
    try:
        _write_once(path, data)
        return
    except OSError as exc:
        if exc.errno not in FULL_DISK:
            raise
    release_reserve(path.parent)
    try:
        _write_once(path, data)
    except OSError as exc:
        if exc.errno not in FULL_DISK:
            raise
        raise DiskFull(
            _("disk full: cannot write {path} (the last good copy is kept)").format(path=path)
        ) from exc


def write_status(run_dir: Path, status: RunStatus) -> None:
    atomic_write(run_dir / STATUS, status.model_dump_json(indent=2) + "\n")


def read_status(run_dir: Path) -> RunStatus:
    """status.json, or CorruptRun (a BadInput) naming what is wrong with it."""
    path = run_dir / STATUS
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise CorruptRun(
            _("{run_dir}: not a run directory (no {STATUS})").format(run_dir=run_dir, STATUS=STATUS)
        ) from exc
    except OSError as exc:
        raise CorruptRun(
            _("{path}: unreadable ({strerror})").format(path=path, strerror=exc.strerror)
        ) from exc
    try:
        return RunStatus.model_validate_json(raw)
    except (ValidationError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CorruptRun(
            _("{path}: not a valid status ({value})").format(path=path, value=first[:120])
        ) from exc


def recovered_status(run_dir: Path) -> RunStatus:
    """A status rebuilt from the rest of the run dir when status.json cannot be read."""
    runner: Literal["host", "docker"] = "host"
    try:
        spec = json.loads((run_dir / LAUNCH).read_bytes())
        if isinstance(spec, dict) and spec.get("runner") == "docker":
            runner = "docker"
    except (OSError, ValueError):
        pass
    preset = run_dir.name[16:] if re.match(r"\d{8}-\d{6}-", run_dir.name) else "?"
    return RunStatus(run_id=run_dir.name, preset=preset or "?", runner=runner, state="unknown")


def update_status(run_dir: Path, **changes: Any) -> RunStatus:
    """Merge ``changes`` into status.json (rebuilt from the run dir when it is corrupt)."""
    try:
        current = read_status(run_dir)
    except CorruptRun:
        current = recovered_status(run_dir)
    status = current.model_copy(update=changes)
    write_status(run_dir, status)
    return status


def run_id_name(preset_name: str) -> str:
    """The preset name as a safe, bounded path component (no '/', '..', control characters)."""
    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", preset_name).strip("._-")[:RUN_ID_NAME_MAX]
    return name.rstrip("._-") or "run"


def new_run_id(preset_name: str, root: Path, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now or time.time()))
    base = f"{stamp}-{run_id_name(preset_name)}"
    candidate, n = base, 1
    while (root / candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def create_run_dir(preset_name: str, runner: Literal["host", "docker"], **fields: Any) -> Path:
    """Make the directory (exclusively, so two launches in one second never share one).

    A full disk is refused here, with nothing left behind.
    """
    root = paths.runs_dir()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    free = free_bytes(root)
    if free is not None and free < MIN_FREE:
        raise DiskFull(
            _(
                "disk full: {value} KiB free under {root}, a run needs at least {value2} MiB: "
                "free some space"
            ).format(value=free // 1024, root=root, value2=MIN_FREE >> 20)
        )
    while True:
        run_id = new_run_id(preset_name, root)
        run_dir = root / run_id
        try:
            run_dir.mkdir(mode=0o700)
        except FileExistsError:
            continue
        break
    try:
        os.chmod(run_dir, 0o700)  # whatever the umask
        make_reserve(run_dir)
        status = RunStatus(run_id=run_id, preset=preset_name, runner=runner, **fields)
        write_status(run_dir, status)
        os.close(private_open(run_dir / LOG))
    except (OSError, DiskFull) as exc:
        remove_run_dir(run_dir)
        if isinstance(exc, DiskFull) or exc.errno in FULL_DISK:
            raise DiskFull(
                _("disk full: no room for a run under {root}: free some space").format(root=root)
            ) from exc
        raise TrainwizError(
            _("cannot create the run directory {run_dir}: {exc}").format(run_dir=run_dir, exc=exc)
        ) from exc
    return run_dir


def free_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def remove_run_dir(run_dir: Path) -> None:
    """Delete a run dir this launch made and nothing started in (never follows symlinks)."""
    import shutil

    if run_dir.parent == paths.runs_dir() and not run_dir.is_symlink():
        shutil.rmtree(run_dir, ignore_errors=True)


def write_json(path: Path, data: Any) -> None:
    atomic_write(path, json.dumps(data, indent=2, default=str) + "\n")


def list_run_dirs() -> list[Path]:
    """Run directories, oldest first (ids start with a timestamp); a corrupt one is listed too."""
    root = paths.runs_dir()
    if not root.is_dir():
        return []
    return sorted(
        p
        for p in root.iterdir()
        if not p.name.startswith(".")
        and p.is_dir()
        and any((p / name).exists() for name in (STATUS, LOG, LAUNCH))
    )


def find_run(ref: str) -> Path:
    """A run by id, unique id prefix, 'last', a run directory path, or a Slurm job id (this
    home's record of it, else the run dir the job names: backend/runs/multinode/jobs.py)."""
    as_path = Path(ref).expanduser()
    if any((as_path / name).is_file() for name in (STATUS, LOG)):
        return as_path.resolve()
    from backend.runs.multinode import jobs

    if jobs.is_job_id(ref):
        found = jobs.local_run(ref)
        if found is not None:
            return found
        return _find_run_by_id(ref, lambda: jobs.run_dir_of_job(ref))
    return _find_run_by_id(ref)


def _find_run_by_id(ref: str, not_found: Callable[[], Path] | None = None) -> Path:
    runs = list_run_dirs()
    if ref in ("last", "latest"):
        if not runs:
            raise BadInput(_("no runs yet: start one with 'trainwiz launch PRESET'"))
        return runs[-1]
    exact = [p for p in runs if p.name == ref]
    if exact:
        return exact[0]
    matches = [p for p in runs if p.name.startswith(ref) or re.search(re.escape(ref) + "$", p.name)]
    if len(matches) == 1:
        return matches[0]
    if not matches and not_found is not None:
        return not_found()
    if not matches:
        raise BadInput(_("run '{ref}': no such run (see 'trainwiz runs')").format(ref=ref))
    names = ", ".join(p.name for p in matches[:5])
    raise BadInput(
        _("run '{ref}' is ambiguous ({names}): give more of the id").format(ref=ref, names=names)
    )
