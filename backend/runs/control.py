"""Runs after the launch: list them, see their true state, stop them, follow their log.

The watcher normally records every state change. If it is gone (killed, machine rebooted) or the
launcher died before starting it, the state is reconstructed from what is left: the run's live
processes (``backend.runs.procs``: found by their environment, pids believed only with their
start time), the container (docker keeps its exit code) and the metrics file (an ``end`` line).
Nothing here raises on one bad run: a corrupt status.json is reported on that run alone.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from backend.errors import BadInput, TrainwizError
from backend.i18n import _
from backend.rundir import (
    LOG,
    METRICS,
    STATUS,
    STOP_REQUEST,
    CorruptRun,
    DiskFull,
    RunDir,
    RunStatus,
    disk_full,
    find_run_by_id,
    read_status,
    recovered_status,
    update_status,
)
from backend.runs import garbled, multinode
from backend.runs.docker_runner import container_state, stop_container
from backend.runs.multinode import jobs
from backend.runs.procs import (  # the watcher-process helpers live with the others
    end_processes,
    pid_alive,
    run_processes,
    same_process,
    start_time,
    watcher_alive,
    watcher_pids,
)

LAUNCHER_GRACE = 60.0  # a "starting" record without launcher pid older than this is orphaned


def metrics_end(run_dir: Path) -> dict | None:
    """The metrics file's ``end`` line, if the entry wrote one (bad bytes and torn lines skipped)."""
    path = run_dir / METRICS
    last = None
    try:
        with open(path, "rb") as handle:
            for line in handle:
                if b'"end"' not in line:
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and record.get("kind") == "end":
                    last = record
    except OSError:
        return None
    return last


def _save(run_dir: Path, status: RunStatus, **changes: object) -> RunStatus:
    """Record a repaired state; on a full disk return it unsaved, saying so."""
    try:
        return update_status(run_dir, **changes)
    except (DiskFull, OSError) as exc:
        note = f" (not saved: {exc})"
        message = str(changes.get("message", status.message)) + note
        return status.model_copy(update={**changes, "message": message})


def _launcher_gone(run_dir: Path, status: RunStatus) -> bool:
    if status.launcher_pid is not None:
        return not same_process(status.launcher_pid, status.launcher_start)
    try:
        age = time.time() - (run_dir / STATUS).stat().st_mtime
    except OSError:
        return True
    return age > LAUNCHER_GRACE


def refresh(run_dir: Path) -> RunStatus:
    """The run's state, repaired and saved when its watcher (or launcher) died before recording."""
    try:
        status = read_status(run_dir)
    except CorruptRun as exc:
        return _refresh_corrupt(run_dir, exc)
    if not status.final and (status.model_extra or {}).get("slurm_job_id"):
        # Slurm knows the job's state, from any login
        return multinode.refresh(run_dir, status, watcher_alive(status)) or status
    if status.final or watcher_alive(status):
        return status
    alive = run_processes(run_dir)
    if status.state == "starting" and status.watcher_pid is None:
        if alive or not _launcher_gone(run_dir, status):
            return status  # the launcher is still starting the watcher
        return _save(
            run_dir,
            status,
            state="failed",
            ended_at=time.time(),
            cause="launcher_died",
            message="launcher died before the run started (nothing was running)",
        )
    stopped = (run_dir / STOP_REQUEST).exists()
    if status.runner == "docker" and status.container_id:
        try:
            docker_status, code = container_state(status.container_id)
        except TrainwizError:
            return status  # daemon unreachable: nothing new can be known
        if docker_status in ("running", "created", "restarting", "paused"):
            return status
        state = "stopped" if stopped else ("finished" if code == 0 else "failed")
        message = f"container {docker_status}, exit code {code} (recorded after the watcher died)"
        return _save(
            run_dir, status, state=state, exit_code=code, ended_at=time.time(), message=message
        )
    if alive:
        note = f"watcher died; {len(alive)} process(es) of the run still running"
        return status.model_copy(update={"message": f"{status.message} ({note})"})
    return _save(run_dir, status, ended_at=time.time(), **_ended_without_watcher(run_dir, stopped))


def _ended_without_watcher(run_dir: Path, stopped: bool) -> dict:
    end = metrics_end(run_dir)
    if stopped:
        return {"state": "stopped", "message": "stopped on request", "cause": "stopped"}
    if end and end.get("ok"):
        return {"state": "finished", "message": "finished (the entry's end line; watcher gone)"}
    if end and end.get("reason"):
        reason = str(end["reason"])
        return {
            "state": "failed",
            "message": f"{end.get('error') or reason} ({reason})",
            "cause": reason,
        }
    if disk_full(run_dir):
        return {
            "state": "failed",
            "message": "disk full: the run ended while no watcher was running (exit code unknown)",
            "cause": "disk_full",
        }
    return {
        "state": "failed",
        "message": "watcher died; the run ended while no watcher was running: exit code unknown",
        "cause": "watcher_died",
    }


def _refresh_corrupt(run_dir: Path, exc: CorruptRun) -> RunStatus:
    """status.json unreadable: rewritten atomically into a valid record from what is known
    (``backend.runs.garbled``), the unreadable file kept beside it as status.json.garbled."""
    status = recovered_status(run_dir)
    alive = run_processes(run_dir)
    present = os.path.lexists(run_dir / STATUS)
    if not present and not (run_dir / LOG).exists():
        return status.model_copy(update={"message": str(exc)})
    why = garbled.why_unreadable(run_dir / STATUS) if present else "missing"
    kept = garbled.keep_garbled(run_dir) if present else None
    changes: dict[str, object]
    if alive:
        watchers = watcher_pids(run_dir)
        changes = {
            "state": "running",
            "message": garbled.running_message(why, len(alive), kept),
            "watcher_pid": watchers[0] if watchers else None,
            "watcher_start": start_time(watchers[0]) if watchers else None,
        }
    else:
        changes = _ended_without_watcher(run_dir, (run_dir / STOP_REQUEST).exists())
        if changes.get("cause") == "watcher_died":  # nothing says how it ended
            changes.update(cause=garbled.UNREADABLE, message=garbled.UNREADABLE_END)
        changes["message"] = garbled.ended_message(str(changes["message"]), why, kept)
        changes["ended_at"] = time.time()
    if present and kept is None:  # never rewrite what could not be kept
        note = " (not rewritten: no copy of it could be kept beside it)"
        return status.model_copy(update={**changes, "message": f"{changes['message']}{note}"})
    return _save(run_dir, status, **changes)


def list_runs() -> list[RunStatus]:
    """Every run, each refreshed; a run that cannot be read is listed with the reason."""
    out = []
    for run in RunDir.all():
        run_dir = run.path
        try:
            out.append(refresh(run_dir))
        except Exception as exc:  # one bad run never hides the others
            out.append(
                recovered_status(run_dir).model_copy(
                    update={"message": f"unreadable: {type(exc).__name__}: {exc}"}
                )
            )
    return out


def stop_run(run_dir: Path, timeout: float = 30.0, wait: float = 15.0) -> RunStatus:
    """End every process of the run (TERM + CONT, KILL after ``timeout``) and verify it.

    The returned status carries ``ended_processes`` and ``left_processes`` (pids still alive,
    normally none); the watcher records "stopped", or this does when no watcher is left.
    """
    status = refresh(run_dir)
    if not status.final and (status.model_extra or {}).get("scheduler") in ("ssh", "slurm"):
        return multinode.stop_run(run_dir, timeout, wait, refresh)
    watchers = watcher_pids(run_dir)
    if status.final and not run_processes(run_dir, exclude=watchers):
        return status.model_copy(update={"ended_processes": 0, "left_processes": []})
    if not status.final:
        try:
            (run_dir / STOP_REQUEST).touch()
        except OSError:
            pass  # a full disk: the record is written below instead
    if status.runner == "docker" and status.container_id:
        stop_container(status.container_id, timeout)
    count, _ = end_processes(run_dir, timeout, exclude=watchers)
    deadline = time.monotonic() + wait
    while watchers and time.monotonic() < deadline:
        if not any(pid_alive(pid) for pid in watchers):
            break
        time.sleep(0.1)
    more, _ = end_processes(run_dir, 1.0)  # a watcher that did not finish in time
    status = refresh(run_dir)
    if not status.final:
        status = _save(
            run_dir,
            status,
            state="stopped",
            ended_at=time.time(),
            cause="stopped",
            message="stopped on request (recorded by 'trainwiz stop')",
        )
    left = [p.pid for p in run_processes(run_dir)]
    return status.model_copy(update={"ended_processes": count + more, "left_processes": left})


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
    try:
        handle = open(path, "rb")  # noqa: SIM115 (closed below)
    except OSError as exc:
        raise BadInput(
            _("{path}: cannot read the run's log ({strerror})").format(
                path=path, strerror=exc.strerror
            )
        ) from exc
    with handle:
        if not from_start:
            handle.seek(0, 2)
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


TAIL_READ_MAX = 1 << 20  # bytes a tail reads from a log's end, at most


def tail_lines(path: Path, lines: int, max_bytes: int = TAIL_READ_MAX) -> list[str]:
    """The last ``lines`` lines of a file, reading at most ``max_bytes`` from its end: a poll of
    a long run (the MCP server's ``logs_tail``, its metrics resource) never reads a multi-GB log
    whole. A first line cut by the byte limit is dropped; a missing file has no lines."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            start = max(0, size - max_bytes)
            handle.seek(start)
            data = handle.read(size - start)
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace").splitlines()
    if start > 0 and text:
        text = text[1:]  # began mid-line
    return text[-lines:] if lines > 0 else []


def wait_for(
    run_dir: Path,
    predicate: Callable[[RunStatus], bool],
    timeout: float,
    cancel: threading.Event | None = None,
) -> RunStatus:
    """Poll status.json until ``predicate`` holds, the run is final or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    status = recovered_status(run_dir)
    while time.monotonic() < deadline and not (cancel is not None and cancel.is_set()):
        try:
            status = read_status(run_dir)
        except CorruptRun:
            time.sleep(0.05)
            continue
        if predicate(status) or status.final:
            return status
        time.sleep(0.05)
    return status


def find_run(ref: str) -> Path:
    """A run by id, unique id prefix, 'last', a run directory path, or a Slurm job id (this
    home's record of it, else the run dir the job names: backend/runs/multinode/jobs.py)."""
    if not ref.strip() or "\0" in ref or len(ref) > 4096:
        # An empty id is a prefix of every id (and Path('') is the cwd): never "the only run".
        shown = ref[:40] + ("..." if len(ref) > 40 else "")
        raise BadInput(
            _(
                "run '{ref}': give a run id, a unique prefix of one, 'last' or a run directory"
            ).format(ref=shown)
        )
    as_path = Path(ref).expanduser()
    try:
        if any((as_path / name).is_file() for name in (STATUS, LOG)):
            return as_path.resolve()
    except OSError:  # a name too long for a path: it can only be an (unknown) id
        pass
    if len(ref) > 255:
        raise BadInput(_("run '{ref}...': no such run (see 'trainwiz runs')").format(ref=ref[:40]))
    if jobs.is_job_id(ref):
        found = jobs.local_run(ref)
        if found is not None:
            return found
        return find_run_by_id(ref, lambda: jobs.run_dir_of_job(ref))
    return find_run_by_id(ref)
