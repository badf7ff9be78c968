"""The run directory: one folder per launch holding everything a run is (docs/run-format.md).

Every write is a whole-file atomic replace or an append (``backend.atomicfile``, whose writers
are re-exported here), so a wizard killed at any moment or a full disk leaves a directory another
process (the watcher, ``trainwiz runs``, the monitor) can still read. Run dirs are 0700 and run
files 0600: logs and presets can name private paths and hosts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from backend import paths

# The record writers are the atomic file writer's (re-exported: every run-dir writer names them).
from backend.atomicfile import FULL_DISK as FULL_DISK
from backend.atomicfile import RESERVE as RESERVE
from backend.atomicfile import DiskFull as DiskFull
from backend.atomicfile import atomic_write as atomic_write
from backend.atomicfile import free_bytes as free_bytes
from backend.atomicfile import make_reserve as make_reserve
from backend.atomicfile import private_open as private_open
from backend.atomicfile import release_reserve as release_reserve
from backend.atomicfile import write_json as write_json
from backend.atomicfile import write_private as write_private
from backend.errors import BadInput, TrainwizError
from backend.i18n import _

# The run directory's file names live with the other paths (re-exported for callers).
from backend.paths import ATTEMPTS as ATTEMPTS
from backend.paths import LAUNCH as LAUNCH
from backend.paths import LOG as LOG
from backend.paths import METRICS as METRICS
from backend.paths import NODES as NODES
from backend.paths import PLAN as PLAN
from backend.paths import PRESET as PRESET
from backend.paths import STATUS as STATUS
from backend.paths import STOP_REQUEST as STOP_REQUEST

# A run's records read in the directory it is in now (a copied run dir is a run of its own).
from backend.runpaths import own_paths as own_paths
from backend.runpaths import own_record as own_record
from backend.runstate import FINAL_STATES as FINAL_STATES  # the one definition
from backend.runstate import RunState

State = Literal["starting", "running", "finished", "failed", "stopped", "unknown"]

RUN_ID_NAME_MAX = 64  # preset-name part of a run id: ids stay well under NAME_MAX (255)
MIN_FREE = 4 << 20  # a launch with less free space than this would only fill the disk


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
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:  # TRAINWIZ_HOME=/proc/self, a read-only or a full disk
        raise BadInput(
            _(
                "TRAINWIZ_HOME: cannot make {root} ({why}): point TRAINWIZ_HOME at a folder of yours"
            ).format(root=root, why=exc.strerror or type(exc).__name__)
        ) from exc
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


def remove_run_dir(run_dir: Path) -> None:
    """Delete a run dir this launch made and nothing started in (never follows symlinks)."""
    if run_dir.parent == paths.runs_dir() and not run_dir.is_symlink():
        shutil.rmtree(run_dir, ignore_errors=True)


RUN_MARKERS = (STATUS, LOG, LAUNCH, METRICS)  # any of these makes a folder a run


def check_runs_root() -> None:
    """BadInput when trainwiz's home or its runs folder exists but is not a directory
    (``TRAINWIZ_HOME=/dev/null``, a file): listing nothing there would answer "no runs yet" about
    a home that can hold none, and a launch would fail later on it. A home that does not exist
    yet is fine (the first launch creates it); one that cannot be read says so when read."""
    for path in (paths.home(), paths.runs_dir()):
        try:
            if stat.S_ISDIR(path.stat().st_mode):
                continue
        except NotADirectoryError:  # a file on the way to it
            pass
        except OSError:
            return
        if path == paths.home() and os.environ.get("TRAINWIZ_HOME"):
            raise BadInput(
                _("TRAINWIZ_HOME={path} is not a directory: point it at one (or unset it)").format(
                    path=os.environ["TRAINWIZ_HOME"]
                )
            )
        raise BadInput(
            _(
                "{path} is not a directory: trainwiz keeps its runs there; move it away or set "
                "TRAINWIZ_HOME to a directory"
            ).format(path=path)
        )


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
        and any((p / name).exists() for name in RUN_MARKERS)
    )


def find_run_by_id(ref: str, not_found: Callable[[], Path] | None = None) -> Path:
    """A run by id, unique id prefix or suffix, or 'last' (``control.find_run`` adds paths
    and Slurm job ids)."""
    check_runs_root()  # else a home that is a file answers "no such run" / "no runs yet"
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


LOW_SPACE = 1 << 20  # free bytes under which a failed run is put down to a full disk


def disk_full(run_dir: Path, log: Any = None) -> bool:
    """A run whose log writes hit a full disk, or whose filesystem is (nearly) full now."""
    if log is not None and getattr(log, "disk_full", False):
        return True
    try:
        st = os.statvfs(run_dir)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < LOW_SPACE


def read_attempts(run_dir: Path) -> list[dict[str, Any]]:
    """attempts.json: every start of the run's training (backend/runs/resume.py writes it)."""
    try:
        data = json.loads((run_dir / ATTEMPTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return data if isinstance(data, list) else []


def write_attempts(run_dir: Path, attempts: list[dict[str, Any]]) -> None:
    atomic_write(run_dir / ATTEMPTS, json.dumps(attempts, indent=2) + "\n")


@dataclass(frozen=True)
class RunDir:
    """One run directory: its files by name, its typed status and state, its records.

    The one handle on a run for the CLI, the monitor and troubleshoot: the file names are
    ``backend.paths``'s, the status is ``RunStatus``, the state ``RunState``.
    """

    path: Path

    @classmethod
    def all(cls) -> list[RunDir]:
        """Every run of this TRAINWIZ_HOME, oldest first (``list_run_dirs``)."""
        return [cls(p) for p in list_run_dirs()]

    @property
    def run_id(self) -> str:
        return self.path.name

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def log(self) -> Path:
        return self.path / LOG

    @property
    def metrics(self) -> Path:
        return self.path / METRICS

    @property
    def status_file(self) -> Path:
        return self.path / STATUS

    @property
    def launch_file(self) -> Path:
        return self.path / LAUNCH

    @property
    def preset_file(self) -> Path:
        return self.path / PRESET

    @property
    def plan_file(self) -> Path:
        return self.path / PLAN

    def node_logs(self) -> list[Path]:
        """A multi-node run's own per-node logs (nodes/node<i>-<host>.log), by name."""
        return sorted((self.path / NODES).glob("node*-*.log"))

    def diagnosable(self) -> bool:
        """A log to read: train.log, or a run record with its nodes' own logs (a Slurm run
        whose watcher never copied them into train.log)."""
        return self.log.is_file() or (self.status_file.is_file() and bool(self.node_logs()))

    def is_run(self) -> bool:
        """A folder that holds any of a run's own records (``list_run_dirs``'s test)."""
        return self.path.is_dir() and any((self.path / name).exists() for name in RUN_MARKERS)

    def status_dict(self) -> dict[str, Any] | None:
        """status.json as plain JSON, or None while it is missing, mid-replace or not an object
        (readers that poll it -- the monitor, the notifier -- treat both the same)."""
        try:
            data = json.loads(self.status_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # ValueError: bad JSON or bytes that are not UTF-8
            return None
        return data if isinstance(data, dict) else None

    def status(self) -> RunStatus:
        return read_status(self.path)

    def state(self) -> RunState:
        return RunState(self.status().state)

    def attempts(self) -> list[dict[str, Any]]:
        return read_attempts(self.path)

    def launch_spec(self) -> dict[str, Any]:
        """launch.json: the spec the watcher executes now ({} when it has none), its paths
        into the run's own directory read as this one's (``own_paths``)."""
        return dict(own_record(self.path, _json_or_empty(self.path / LAUNCH)))

    def own_path(self, value: str) -> str:
        """A path from this run's records, as it is in this directory (``own_paths``)."""
        return own_paths(self.path)(value)

    def plan(self) -> dict[str, Any]:
        return _json_or_empty(self.path / PLAN)


def _json_or_empty(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
