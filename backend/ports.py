"""Ports: which are bound here, which live runs chose, and the lock the choice is made under.

Taken means bound on this machine, or chosen by another trainwiz run that has not ended (its
torchrun may not have bound it yet): two launches of one preset at the same moment then get
different ports. The rule itself (first free from master_port up) is the launch spec's
(``backend.runs.spec.decide_port``); the choice is recorded in status.json and launch.json.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from backend import paths
from backend.rundir import CorruptRun, list_run_dirs, read_status


def port_free(port: int) -> bool:
    """Whether ``port`` can be bound here now (torchrun's rendezvous would bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def any_free_port() -> int:
    """A port the kernel says is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def next_free_port(port: int, taken: set[int]) -> int:
    """The port a launch uses instead of a taken ``port``: the first free one above it (so the
    Checks step can say which), else any the kernel gives."""
    for candidate in range(port + 1, min(port + 200, 65536)):
        if candidate not in taken and port_free(candidate):
            return candidate
    new = any_free_port()
    while new in taken or new == port:
        new = any_free_port()
    return new


def live_run_ports() -> dict[int, str]:
    """master_port -> run id, for the runs that have not ended."""
    out: dict[int, str] = {}
    for run_dir in list_run_dirs():
        try:
            status = read_status(run_dir)
        except CorruptRun:
            continue
        if not status.final and status.master_port:
            out[status.master_port] = status.run_id
    return out


def claimed_ports(exclude: Path | None = None) -> set[int]:
    """master_ports of runs that have not ended: chosen but maybe not bound by torchrun yet."""
    out = set()
    for run_dir in list_run_dirs():
        if run_dir == exclude:
            continue
        try:
            status = read_status(run_dir)
        except CorruptRun:
            continue
        if not status.final and status.master_port:
            out.add(status.master_port)
    return out


class PortLock:
    """Serialises the port choice of simultaneous launches (one lock file in TRAINWIZ_HOME)."""

    def __enter__(self) -> PortLock:
        root = paths.home()  # not under runs/: that folder holds run dirs only
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.fd = os.open(root / ".ports.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
