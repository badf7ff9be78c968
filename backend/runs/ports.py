"""master_port for single-node runs: the preset's unless it is taken, chosen under a lock.

Taken means bound on this machine, or chosen by another trainwiz run that has not ended (its
torchrun may not have bound it yet): two launches of one preset at the same moment then get
different ports. The choice is recorded in status.json (``master_port``) and in launch.json.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from typing import Any

from backend import paths
from backend.runs.rundir import CorruptRun, list_run_dirs, read_status


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


def free_master_port(
    argv: list[str], nnodes: int, notes: list[str], taken: set[int] | None = None
) -> list[str]:
    """A single-node run whose master_port is taken (bound here, or chosen by another live
    trainwiz run) gets a free one (torchrun would fail with EADDRINUSE); multi-node runs keep
    theirs, since every node must agree on it."""
    taken = set() if taken is None else taken
    out = list(argv)
    for i, arg in enumerate(out):
        if arg.startswith("--master_port="):
            port = int(arg.split("=", 1)[1])
            if nnodes == 1 and (port in taken or not port_free(port)):
                new = port
                while new in taken or new == port:
                    new = any_free_port()
                out[i] = f"--master_port={new}"
                why = "chosen by another run" if port in taken else "in use here"
                notes.append(f"launch.master_port {port} is {why}: using {new} instead")
                port = new
            taken.add(port)
            break
    return out


def chosen_port(spec: dict[str, Any]) -> int | None:
    """The master_port launch.json will give torchrun (None when there is none)."""
    argvs = [spec.get("train", {}).get("argv", []), spec.get("docker", {}).get("command") or []]
    argvs += [s.get("argv", []) for s in spec.get("exec", [])]
    for argv in argvs:
        for arg in argv if isinstance(argv, list) else []:
            if isinstance(arg, str) and arg.startswith("--master_port="):
                return int(arg.split("=", 1)[1])
    return None


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
