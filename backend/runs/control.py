"""Runs after the launch: list them, see their true state, stop them, follow their log.

The watcher normally records every state change. If it is gone (killed, machine rebooted) the
state is reconstructed from what is left: the process (is the pid alive), the container (docker
keeps its exit code) and the metrics file (an ``end`` line with ``ok``).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from backend.runs.rundir import (
    LOG,
    METRICS,
    STOP_REQUEST,
    RunStatus,
    list_run_dirs,
    read_status,
    update_status,
)


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has exited: only its parent has not reaped it yet
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def watcher_alive(status: RunStatus) -> bool:
    """The recorded watcher pid is alive and still is our watcher (pids get reused)."""
    if not pid_alive(status.watcher_pid):
        return False
    try:
        cmdline = Path(f"/proc/{status.watcher_pid}/cmdline").read_bytes()
    except OSError:
        return True
    return b"backend.runs.watch" in cmdline


def metrics_end(run_dir: Path) -> dict | None:
    """The metrics file's ``end`` line, if the entry wrote one."""
    path = run_dir / METRICS
    if not path.is_file():
        return None
    last = None
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if '"end"' in line:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if record.get("kind") == "end":
                    last = record
    return last


def refresh(run_dir: Path) -> RunStatus:
    """The run's state, repaired and saved when its watcher died before recording the end."""
    status = read_status(run_dir)
    if not status.final and (status.model_extra or {}).get("slurm_job_id"):
        from backend.runs import multinode  # Slurm knows the job's state, from any login

        return multinode.refresh(run_dir, status, watcher_alive(status)) or status
    if status.final or watcher_alive(status):
        return status
    if status.watcher_pid is None and status.started_at is None:
        return status  # the launcher is still starting the watcher
    stopped = (run_dir / STOP_REQUEST).exists()
    if status.runner == "docker" and status.container_id:
        from backend.errors import TrainwizError
        from backend.runs.docker_runner import container_state

        try:
            docker_status, code = container_state(status.container_id)
        except TrainwizError:
            return status  # daemon unreachable: nothing new can be known
        if docker_status in ("running", "created", "restarting", "paused"):
            return status
        state = "stopped" if stopped else ("finished" if code == 0 else "failed")
        message = f"container {docker_status}, exit code {code} (recorded after the watcher died)"
        return update_status(
            run_dir, state=state, exit_code=code, ended_at=time.time(), message=message
        )
    if status.pgid and _group_alive(status.pgid):
        return status
    end = metrics_end(run_dir)
    if stopped:
        state, message = "stopped", "stopped on request"
    elif end and end.get("ok"):
        state, message = "finished", "finished (the entry's end line; watcher gone)"
    else:
        state, message = "failed", "ended while no watcher was running: exit code unknown"
    return update_status(run_dir, state=state, ended_at=time.time(), message=message)


def _group_alive(pgid: int) -> bool:
    """A live (not zombie) process is in group ``pgid``: orphans may wait unreaped for a while."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def list_runs() -> list[RunStatus]:
    return [refresh(d) for d in list_run_dirs()]


def stop_run(run_dir: Path, timeout: float = 30.0, wait: float = 15.0) -> RunStatus:
    """Graceful stop: SIGTERM to the process group (or docker stop), SIGKILL after ``timeout``."""
    status = refresh(run_dir)
    if status.final:
        return status
    if (status.model_extra or {}).get("scheduler") in ("ssh", "slurm"):
        from backend.runs import multinode  # every node: scancel, or kill over SSH

        return multinode.stop_run(run_dir, timeout, wait)
    (run_dir / STOP_REQUEST).touch()
    if status.runner == "docker" and status.container_id:
        from backend.runs.docker_runner import stop_container

        stop_container(status.container_id, timeout)
    if status.pgid:
        _signal_group(status.pgid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _group_alive(status.pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        _signal_group(status.pgid, signal.SIGKILL)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        status = read_status(run_dir)
        if status.final or not watcher_alive(status):
            break
        time.sleep(0.1)
    return refresh(run_dir)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def follow_log(
    run_dir: Path,
    *,
    follow: bool = True,
    cancel: threading.Event | None = None,
    poll: float = 0.2,
    from_start: bool = True,
) -> Iterator[str]:
    """Yield the log's text as it grows, until the run is final and the log is drained."""
    path = run_dir / LOG
    with open(path, "rb") as handle:
        if not from_start:
            handle.seek(0, os.SEEK_END)
        while True:
            data = handle.read(65536)
            if data:
                yield data.decode("utf-8", errors="replace")
                continue
            if not follow or (cancel is not None and cancel.is_set()):
                return
            if refresh(run_dir).final:
                rest = handle.read()
                if rest:
                    yield rest.decode("utf-8", errors="replace")
                return
            time.sleep(poll)


def wait_for(
    run_dir: Path,
    predicate: Callable[[RunStatus], bool],
    timeout: float,
    cancel: threading.Event | None = None,
) -> RunStatus:
    """Poll status.json until ``predicate`` holds, the run is final or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    status = read_status(run_dir)
    while time.monotonic() < deadline and not (cancel is not None and cancel.is_set()):
        status = read_status(run_dir)
        if predicate(status) or status.final:
            return status
        time.sleep(0.05)
    return status
