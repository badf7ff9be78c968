"""Facts about one process from ``/proc``: alive (not a zombie), and whether a recorded pid is
still the same process (its start time), for modules below ``backend.runs`` (port claims).
"""

from __future__ import annotations

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
