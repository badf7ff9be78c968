"""One scheduler per TRAINWIZ_HOME: its lock, whether it runs, starting it detached.

The lock is ``flock`` on ``queue.lock``: the kernel drops it when the holder dies (``kill -9``,
a reboot), so a dead scheduler never blocks the next one and no stale pid file has to be
believed. A second scheduler finds the lock taken and refuses. ``ensure_scheduler`` is what
``queue add``, ``queue resume``, ``sweep`` and the wizard call: it starts one only when the
lock is free.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

from backend import paths, subproc
from backend.runs.procs import PROJECT_ROOT

LOCK = "queue.lock"
LOG = "queue.log"  # the scheduler's own output (one line per item started or ended)


class Locked(RuntimeError):
    """Another scheduler holds this home's lock."""


def lock_path() -> Path:
    return paths.home() / LOCK


def take_lock() -> int:
    """The lock's descriptor, held until this process ends; ``Locked`` when taken."""
    paths.home().mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise Locked(f"another scheduler holds {lock_path()} (pid {holder() or '?'})") from exc
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def holder() -> int | None:
    """The pid written by the scheduler that holds the lock now (None: no scheduler runs)."""
    try:
        fd = os.open(lock_path(), os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def ensure_scheduler(wait_s: float = 5.0) -> int | None:
    """Start the scheduler when none runs; its pid (None when it exited at once: nothing to do)."""
    pid = holder()
    if pid is not None:
        return pid
    env = dict(os.environ)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = f"{PROJECT_ROOT}{os.pathsep}{path}" if path else str(PROJECT_ROOT)
    env.pop("TRAINWIZ_QUEUE_ITEM", None)  # a launcher's marker is never the scheduler's
    home = paths.home()
    fd = os.open(home / LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as out:
        proc = subproc.spawn(
            [sys.executable, "-m", "backend.queue.scheduler"],
            cwd=home,
            env=env,
            stdout=out,
            text=False,
        )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:  # so the caller can say which pid schedules
        pid = holder()
        if pid is not None or proc.poll() is not None:
            break
        time.sleep(0.05)
    return pid if pid is not None and pid > 0 else (None if proc.poll() is not None else proc.pid)
