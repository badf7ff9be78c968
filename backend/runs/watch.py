"""The watcher: a small detached process that owns one run from start to exit code.

Started by the launcher with ``setsid`` (``python -m backend.runs.watch RUN_DIR``), it is the
parent of the training process (or the client of its container), so it is the one process that
can learn the real exit code and record it, whatever happens to the wizard or the SSH session.
It executes ``launch.json`` (written by the launcher) and nothing else.

Every process of the run inherits ``TRAINWIZ_RUN_DIR`` from it (``backend.runs.procs``); when a
step's process ends, whatever it left running (torchrun's trainers live in sessions of their
own) is ended too, so a dead torchrun never leaves trainers holding the GPUs. The final record
names the cause: a stop, a non-finite loss, a full disk, a trainer killed by a signal.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from backend import subproc
from backend.redact import read_secret_env, restore_spec_secrets
from backend.rundir import (
    FULL_DISK,
    LAUNCH,
    LOG,
    METRICS,
    STOP_REQUEST,
    DiskFull,
    disk_full,
    own_record,
    private_open,
    read_status,
    update_status,
)
from backend.runs import docker_runner, multinode, notify
from backend.runs.fallback import final_record
from backend.runs.procs import RUN_ENV, end_processes, start_time
from backend.runs.resume import run_attempts

LEFTOVER_GRACE = 5.0  # seconds a step's leftover processes get between TERM and KILL


class RunLog:
    """train.log for the watcher's own lines: a full disk is noted, never raised."""

    def __init__(self, path: Path) -> None:
        self.fd = private_open(path)
        self.disk_full = False

    def fileno(self) -> int:
        return self.fd

    def write(self, data: bytes) -> int:
        try:
            return os.write(self.fd, data)
        except OSError as exc:
            if exc.errno in FULL_DISK:
                self.disk_full = True
                return len(data)
            raise

    def flush(self) -> None:
        pass

    def close(self) -> None:
        os.close(self.fd)


def _log_line(log: Any, text: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    log.write(f"[trainwiz {stamp}] {text}\n".encode())
    log.flush()


def stop_requested(run_dir: Path) -> bool:
    return (run_dir / STOP_REQUEST).exists()


def _log_tail(run_dir: Path, size: int = 16384) -> str:
    try:
        with open(run_dir / LOG, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - size))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _metrics_end(run_dir: Path) -> dict[str, Any] | None:
    try:
        with open(run_dir / METRICS, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 65536))
            lines = handle.read().splitlines()
    except OSError:
        return None
    for raw in reversed(lines):
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("kind") == "end":
            return record
    return None


TRAINER_SIGNAL = re.compile(r"Signal (\d+) \((SIG\w+)\) received by PID (\d+)")


def final_state(run_dir: Path, code: int, log: RunLog | None = None) -> tuple[str, str, str | None]:
    """(state, message, cause) for a process that exited with ``code``."""
    if stop_requested(run_dir):
        return "stopped", f"stopped on request (exit code {code})", "stopped"
    if code == 0:
        return "finished", "finished", None
    end = _metrics_end(run_dir)
    if end and end.get("reason"):
        reason = str(end["reason"])
        return "failed", f"{end.get('error') or reason} ({reason}; exit code {code})", reason
    if disk_full(run_dir, log):
        return "failed", f"disk full: no space left under {run_dir} (exit code {code})", "disk_full"
    found = TRAINER_SIGNAL.findall(_log_tail(run_dir))
    if found:
        _, name, pid = found[-1]
        return "failed", f"trainer pid {pid} killed by signal {name} (exit code {code})", "signal"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return "failed", f"killed by signal {name}", "signal"
    return "failed", f"exit code {code}", "exit_code"


def _end_leftovers(run_dir: Path, log: RunLog, what: str) -> int:
    """End what a step left behind (trainers of a dead torchrun); returns how many there were."""
    count, alive = end_processes(run_dir, LEFTOVER_GRACE, exclude=(os.getpid(),))
    if count:
        _log_line(log, f"{what} left {count} process(es) running: ended them")
    if alive:
        pids = ", ".join(str(p.pid) for p in alive)
        _log_line(log, f"still alive after SIGKILL: {pids}")
    return count


def run_host_step(run_dir: Path, step: dict[str, Any], log: RunLog, *, train: bool) -> int:
    """Run one host command; afterwards no process it started is left running."""
    env = {**os.environ, **step.get("env", {}), RUN_ENV: str(run_dir)}
    _log_line(log, f"step {step['id']}: {step.get('display') or ' '.join(step['argv'])}")
    try:
        proc = subproc.spawn(
            step["argv"], env=env, cwd=step.get("cwd") or None, stdout=log.fileno(), text=False
        )
    except OSError as exc:
        _log_line(log, f"step {step['id']}: cannot start: {exc}")
        return 127
    changes: dict[str, Any] = {
        "pid": proc.pid,
        "pgid": proc.pid,
        "pid_start": start_time(proc.pid),
        "step": step["id"],
    }
    if train:
        changes["state"] = "running"
        changes["message"] = "training"
    else:
        changes["message"] = f"step {step['id']}: {step.get('title', '')}".strip()
    _update(run_dir, log, **changes)
    if stop_requested(run_dir):  # a stop that raced the start: honour it
        os.killpg(proc.pid, signal.SIGTERM)
    code = _wait(run_dir, proc)
    _end_leftovers(run_dir, log, f"step {step['id']}")
    return code


def run_dir_gone(run_dir: Path, inode: int | None) -> bool:
    """The run directory was deleted (or replaced by another) while the run was going."""
    try:
        return inode is not None and os.stat(run_dir).st_ino != inode
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _wait(run_dir: Path, proc: subprocess.Popen[bytes]) -> int:
    """The step's exit code; when the run directory disappears meanwhile, the step and all it
    started are ended (nobody can follow, stop or record the run any more) and the watcher
    exits: training on into a deleted directory only holds the GPUs and the disk."""
    try:
        inode: int | None = os.stat(run_dir).st_ino
    except OSError:
        inode = None
    while True:
        try:
            return proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        if run_dir_gone(run_dir, inode):
            abandon(run_dir, proc)


def abandon(run_dir: Path, proc: subprocess.Popen[bytes] | None = None) -> None:
    print(f"watcher: {run_dir} was deleted: ending the run's processes", file=sys.stderr)
    if proc is not None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=LEFTOVER_GRACE)
        except (OSError, subprocess.TimeoutExpired):
            pass
    end_processes(run_dir, LEFTOVER_GRACE, exclude=(os.getpid(),))
    raise SystemExit(1)


def _update(run_dir: Path, log: RunLog, **changes: Any) -> None:
    try:
        update_status(run_dir, **changes)
    except DiskFull as exc:
        log.disk_full = True
        print(f"watcher: {exc}", file=sys.stderr, flush=True)


def run_docker(run_dir: Path, spec: dict[str, Any], log: RunLog) -> int:
    inode = os.stat(run_dir).st_ino
    return docker_runner.run_container(  # a deleted run dir stops the container like a stop
        run_dir,
        spec,
        log,  # type: ignore[arg-type]
        lambda: stop_requested(run_dir) or run_dir_gone(run_dir, inode),
    )


def watch(run_dir: Path) -> int:
    """Execute the run; always leaves status.json in a final state."""
    log = RunLog(run_dir / LOG)
    try:
        spec = json.loads((run_dir / LAUNCH).read_text(encoding="utf-8"))
        spec = own_record(run_dir, spec)  # a copied run dir runs on its own files only
        # launch.json holds no secret: their values come from the run's 0600 file.
        spec = restore_spec_secrets(spec, read_secret_env(run_dir))
    except (OSError, ValueError) as exc:
        return _finish(run_dir, log, "failed", None, f"launch.json unreadable: {exc}", "watcher")
    me = os.getpid()
    _update(run_dir, log, watcher_pid=me, watcher_start=start_time(me), started_at=time.time())
    notify.watch_in_background(run_dir)  # the preset's webhooks: loss NaN, stalled
    for note in spec.get("notes", []):
        _log_line(log, f"note: {note}")
    try:
        for step in spec.get("prepare", []):
            if stop_requested(run_dir):
                break
            code = run_host_step(run_dir, step, log, train=False)
            if code != 0:
                state, message, cause = final_state(run_dir, code, log)
                if state == "failed" and cause != "disk_full":
                    message = f"step {step['id']} failed ({message})"
                return _finish(run_dir, log, state, code, message, cause)
        if stop_requested(run_dir):
            return _finish(
                run_dir, log, "stopped", None, "stopped before training started", "stopped"
            )
        if spec.get("scheduler") in ("ssh", "slurm"):  # backend/runs/multinode
            code, finding, why = multinode.run(run_dir, spec, log)  # type: ignore[arg-type]
            state, message, cause = final_state(run_dir, code, log)
            if finding and (state == "failed" or why == "stopped"):
                message = finding  # the nodes' words (a stop: a scancel from outside)
            if state == "failed" and why and cause in ("exit_code", "signal"):
                cause = why  # the nodes' own cause (an unreachable node, a Slurm time limit)
            return _finish(run_dir, log, state, code, message, cause)
        code = run_attempts(  # resumes after a crash up to launch.max_restarts times
            run_dir,
            spec,
            log,  # type: ignore[arg-type]
            lambda s: (
                run_host_step(run_dir, s["train"], log, train=True)
                if s["runner"] == "host"
                else run_docker(run_dir, s, log)
            ),
            lambda c: final_state(run_dir, c, log)[:2],
        )
        state, message, cause = final_state(run_dir, code, log)
        message, cause = final_record(run_dir, message, cause)  # OOM fallback: candidate, cause
        try:
            failed_step = read_status(run_dir).step
        except Exception:
            failed_step = None
        if state == "failed" and failed_step not in (None, "train", "container"):
            message = f"step {failed_step} failed ({message})"
        return _finish(run_dir, log, state, code, message, cause)
    except Exception as exc:  # the watcher must record why, whatever broke
        _end_leftovers(run_dir, log, "the failed watcher")
        cause = "disk_full" if getattr(exc, "errno", None) in FULL_DISK else "watcher"
        _log_line(log, f"watcher error: {type(exc).__name__}: {exc}")
        return _finish(run_dir, log, "failed", None, f"{type(exc).__name__}: {exc}", cause)


def _finish(
    run_dir: Path,
    log: RunLog,
    state: str,
    code: int | None,
    message: str,
    cause: str | None,
) -> int:
    _log_line(log, f"run {state}: {message}")  # the log is complete once the record is final
    _update(
        run_dir,
        log,
        state=state,
        exit_code=code,
        ended_at=time.time(),
        message=message,
        cause=cause,
    )
    notify.run_ended(run_dir, state, message, cause)  # finished / failed, after the record
    return 0 if state == "finished" else 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m backend.runs.watch RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(args[0]).resolve()
    if not (run_dir / LAUNCH).is_file():  # fail fast on a wrong directory
        print(f"watch: {run_dir} has no {LAUNCH}", file=sys.stderr)
        return 2
    os.umask(0o077)  # everything the run writes (metrics, output, checkpoints) is the user's
    os.environ[RUN_ENV] = str(run_dir)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return watch(run_dir)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except OSError as exc:  # nothing else to record it with
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        sys.exit(1)
