"""Which processes belong to a run, found from ``/proc`` rather than trusted from status.json.

Every process of a run inherits ``TRAINWIZ_RUN_DIR=<run dir>`` from the watcher (torchrun copies
its environment into each trainer, dataloader workers fork it), whatever session or process group
it moves to. So the run's process tree is "every live process whose initial environment names
this run dir". A pid written in status.json is only believed together with its start time
(``/proc/PID/stat`` field 22): a pid the kernel has reused for an unrelated process has another
start time and is never signalled.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from backend import subproc
from backend.procinfo import (
    PROC,
    Proc,
    env_entry,
    find_processes,
    proc_info,
    same_process,
    start_time,
)

# proc_info, same_process and start_time live in backend.procinfo (port claims need them too,
# below this layer); re-exported here for the run code that has always imported them from here.
__all__ = ["PROC", "Proc", "proc_info", "same_process", "start_time"]

RUN_ENV = "TRAINWIZ_RUN_DIR"


def run_processes(run_dir: Path, exclude: tuple[int, ...] = ()) -> list[Proc]:
    """Live processes whose environment names ``run_dir`` (this process never counts)."""
    return find_processes(env=env_entry(RUN_ENV, Path(run_dir).resolve()), skip=exclude)


def _send(procs: list[Proc], sig: signal.Signals) -> None:
    for p in procs:
        if same_process(p.pid, p.start):  # re-checked right before each signal
            try:
                os.kill(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def end_processes(
    run_dir: Path, grace: float, exclude: tuple[int, ...] = (), kill_wait: float = 5.0
) -> tuple[int, list[Proc]]:
    """TERM every process of the run (CONT too, so a stopped one gets it), KILL after ``grace``.

    Returns how many processes there were and those still alive after the KILL (normally none;
    a process in uninterruptible sleep can outlive it for a while).
    """
    procs = run_processes(run_dir, exclude)
    if not procs:
        return 0, []
    seen = {(p.pid, p.start) for p in procs}
    _send(procs, signal.SIGTERM)
    _send(procs, signal.SIGCONT)  # a SIGSTOP'd process only acts on the TERM once continued
    deadline = time.monotonic() + grace
    left = procs
    while time.monotonic() < deadline:
        left = run_processes(run_dir, exclude)
        seen |= {(p.pid, p.start) for p in left}
        if not left:
            return len(seen), []
        _send([p for p in left if p.state == "T"], signal.SIGCONT)
        time.sleep(0.1)
    left = run_processes(run_dir, exclude)
    _send(left, signal.SIGKILL)
    deadline = time.monotonic() + kill_wait
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = run_processes(run_dir, exclude)
        _send(left, signal.SIGKILL)  # anything forked between the scan and the kill
    seen |= {(p.pid, p.start) for p in left}
    return len(seen), left


def pid_alive(pid: int | None) -> bool:
    """A live, non-zombie process ``pid``."""
    return proc_info(pid) is not None


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def watcher_alive(status: Any) -> bool:
    """The recorded watcher is alive and is still our watcher (pids get reused)."""
    if not pid_alive(status.watcher_pid):
        return False
    if status.watcher_start is not None:
        return same_process(status.watcher_pid, status.watcher_start)
    return b"backend.runs.watch" in _cmdline(status.watcher_pid or 0)


def watcher_pids(run_dir: Path) -> tuple[int, ...]:
    return tuple(p.pid for p in run_processes(run_dir) if b"backend.runs.watch" in _cmdline(p.pid))


PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _project_env() -> dict[str, str]:
    """PYTHONPATH for the watcher: it imports trainwiz's own modules, wherever it runs from."""
    path = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": f"{PROJECT_ROOT}{os.pathsep}{path}" if path else str(PROJECT_ROOT)}


def start_watcher(run_dir: Path) -> int:
    """``python -m backend.runs.watch RUN_DIR`` in a new session: immune to SIGHUP and ^C."""
    # Every process of the run inherits the marker (backend.runs.procs finds them by it).
    env = {**os.environ, **_project_env(), RUN_ENV: str(run_dir.resolve())}
    fd = os.open(run_dir / "watcher.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as out:
        proc = subproc.spawn(
            [sys.executable, "-m", "backend.runs.watch", str(run_dir)],
            cwd=run_dir,
            env=env,
            stdout=out,
            text=False,
        )
    return proc.pid


def deleted_runs(runs_dir: Path) -> dict[str, list[Proc]]:
    """Runs whose directory under ``runs_dir`` is gone while processes of theirs still live
    (found by the environment marker): ``runs`` names them and ``stop ID`` ends them."""
    prefix = f"{RUN_ENV}={Path(runs_dir).resolve()}/".encode()
    found: dict[str, list[Proc]] = {}
    try:
        entries = list(PROC.iterdir())
    except OSError:
        return found
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        for item in environ.split(b"\0"):
            if item.startswith(prefix):
                run_id = item[len(prefix) :].decode(errors="replace")
                if "/" in run_id or (Path(runs_dir) / run_id).exists():
                    break
                info = proc_info(int(entry.name))
                if info is not None:
                    found.setdefault(run_id, []).append(info)
                break
    return found
