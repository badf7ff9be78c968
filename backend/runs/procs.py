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
import time
from dataclasses import dataclass
from pathlib import Path

RUN_ENV = "TRAINWIZ_RUN_DIR"
PROC = Path("/proc")


@dataclass(frozen=True)
class Proc:
    pid: int
    start: int  # clock ticks since boot (/proc/PID/stat field 22): pid + start is unique
    state: str  # R, S, D, T (stopped), Z (zombie), ...


def _stat_fields(pid: int) -> list[str] | None:
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
    fields = _stat_fields(pid)
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


def _marker(run_dir: Path) -> bytes:
    return f"{RUN_ENV}={Path(run_dir).resolve()}".encode() + b"\0"


def run_processes(run_dir: Path, exclude: tuple[int, ...] = ()) -> list[Proc]:
    """Live processes whose environment names ``run_dir`` (this process never counts)."""
    marker = _marker(run_dir)
    skip = {os.getpid(), *exclude}
    out: list[Proc] = []
    try:
        entries = list(PROC.iterdir())
    except OSError:
        return out
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if not (environ.startswith(marker) or b"\0" + marker in environ):
            continue
        info = proc_info(int(entry.name))
        if info is not None:
            out.append(info)
    return out


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
