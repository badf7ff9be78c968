"""Facts about processes from ``/proc``: alive (not a zombie), whether a recorded pid is still
the same process (its start time), and the one scan that finds processes by what their
environment or command line holds (a run's, a queue item's, a server's), for every module that
looks for processes, ``backend.runs`` and below (port claims).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Proc:
    pid: int
    start: int  # clock ticks since boot (/proc/PID/stat field 22): pid + start is unique
    state: str  # R, S, D, T (stopped), Z (zombie), ...


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (which may hold spaces and ")"):
    ``[0]`` the state, ``[1]`` the parent pid, ``[11]``/``[12]`` user/system ticks, ``[19]`` the
    start time; None when the process is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    try:
        return text.rsplit(")", 1)[1].split()
    except IndexError:
        return None


def proc_info(pid: int | None) -> Proc | None:
    """The live process ``pid`` (None when gone or a zombie)."""
    if not pid or pid <= 0:
        return None
    fields = stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return Proc(pid=pid, start=int(fields[19]), state=fields[0])


def start_time(pid: int | None) -> int | None:
    info = proc_info(pid)
    return info.start if info else None


def same_process(pid: int | None, start: int | None) -> bool:
    """``pid`` is alive and is still the process recorded with ``start`` (not a reused pid)."""
    info = proc_info(pid)
    return info is not None and start is not None and info.start == start


def env_entry(key: str, value: str | Path) -> bytes:
    """``KEY=VALUE`` as it stands in ``/proc/PID/environ``, its terminating NUL included."""
    return f"{key}={value}".encode() + b"\0"


def holds_entry(environ: bytes, entry: bytes) -> bool:
    """The environment block has this whole ``KEY=VALUE\\0`` entry (not a longer value)."""
    return environ.startswith(entry) or b"\0" + entry in environ


def find_processes(
    *, env: bytes | None = None, cmdline: bytes | None = None, skip: Iterable[int] = ()
) -> list[Proc]:
    """Live processes (zombies excluded) whose environment holds the entry ``env``
    (``env_entry``) and whose command line contains ``cmdline``, each test only where given;
    this process and ``skip`` never count. The cheap tests run first: /proc/PID/stat is read
    only for a match."""
    skipped = {os.getpid(), *skip}
    found: list[Proc] = []
    try:
        entries = list(PROC.iterdir())
    except OSError:
        return found
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) in skipped:
            continue
        try:
            if env is not None and not holds_entry((entry / "environ").read_bytes(), env):
                continue
            if cmdline is not None and cmdline not in (entry / "cmdline").read_bytes():
                continue
        except OSError:
            continue
        info = proc_info(int(entry.name))
        if info is not None:
            found.append(info)
    return found
