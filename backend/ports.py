"""Ports: which are bound here, which live runs chose, and the lock the choice is made under;
and, for a server trainwiz starts (``trainwiz serve``), whether it could listen on a host and
port, whether that host is loopback only, and the address a client on this machine reaches it at.

Taken means bound on this machine, or chosen by another trainwiz run that has not ended (its
torchrun may not have bound it yet): two launches of one preset at the same moment then get
different ports, from one TRAINWIZ_HOME or from two. The machine-wide part is a folder of claims
(one file per chosen port naming its run dir, in this user's folder under the temp dir) and
one lock over it: a run of another home that has not ended holds its port as firmly as one of
this home's. The rule itself (first free from master_port up) is the launch spec's
(``backend.runs.spec.decide_port``); the choice is recorded in status.json and launch.json.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

from backend.procinfo import same_process
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


def listen_addresses(host: str) -> list[tuple[socket.AddressFamily, str]]:
    """The addresses a server told to listen on ``host`` binds (asyncio's servers, uvicorn's
    included, bind every one a name resolves to). Raises OSError (``socket.gaierror``) for a
    name that does not resolve."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except UnicodeError as exc:  # a label the IDNA codec refuses: unresolvable too
        raise socket.gaierror(socket.EAI_NONAME, str(exc)) from exc
    out: list[tuple[socket.AddressFamily, str]] = []
    for family, _type, _proto, _name, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6) and (family, sockaddr[0]) not in out:
            out.append((family, str(sockaddr[0])))
    if not out:
        raise socket.gaierror(socket.EAI_NONAME, f"{host}: no IP address")
    return out


def listen_problem(host: str, port: int) -> str | None:
    """Why a server could not listen on ``host``:``port`` now: ``"unresolvable"`` (the name
    resolves to nothing), ``"not_here"`` (no interface of this machine has that address),
    ``"in_use"``, ``"denied"`` (a port below 1024 for a user who may not); None when it can.
    A port only in TIME_WAIT counts as free, as it does for the server (SO_REUSEADDR)."""
    try:
        addresses = listen_addresses(host)
    except OSError:
        return "unresolvable"
    for family, address in addresses:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as asyncio binds it: IPv6 only, v4 is its own
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((address, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return "in_use"
                return "denied" if exc.errno == errno.EACCES else "not_here"
    return None


def loopback_only(host: str) -> bool:
    """Whether a server on ``host`` is reachable from this machine alone: every address it
    resolves to is a loopback one (127.0.0.0/8, ::1). 0.0.0.0 and :: (every interface) are
    not; an unresolvable name is not either."""
    try:
        addresses = listen_addresses(host)
    except OSError:
        return False
    return all(ipaddress.ip_address(address.split("%")[0]).is_loopback for _f, address in addresses)


def client_address(host: str) -> str:
    """Where a client on this machine reaches a server listening on ``host``: the address it
    bound, the unspecified ones as their loopback (0.0.0.0 -> 127.0.0.1, :: -> ::1, which is
    all an asyncio server on :: answers: it binds IPv6 only)."""
    try:
        unspecified = ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return host  # a name: the client resolves it as the server did
    if not unspecified:
        return host
    return "::1" if ":" in host else "127.0.0.1"


def url_host(host: str) -> str:
    """``host`` as a URL's authority writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


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
    """master_ports of runs that have not ended, this home's and any other home's of this user
    on this machine: chosen but maybe not bound by torchrun yet."""
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
    return out | _machine_claims(exclude)


def claims_dir() -> Path:
    """This user's port claims on this machine (not under TRAINWIZ_HOME: every home sees it)."""
    path = Path(tempfile.gettempdir()) / f"trainwiz-ports-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def claim_port(port: int | None, run_dir: Path) -> None:
    """Record that ``run_dir`` chose ``port`` (call under ``PortLock``): held until that run
    ends or its folder is gone, whatever home it lives in. A spec without a port claims none."""
    if port is None:
        return
    path = claims_dir() / str(port)
    part = path.with_name(f".{port}.{os.getpid()}.part")
    part.write_text(str(run_dir.resolve()), encoding="utf-8")
    os.replace(part, path)


def _machine_claims(exclude: Path | None) -> set[int]:
    """Ports claimed by live runs of any home; a claim whose run ended or vanished is dropped."""
    out = set()
    skip = exclude.resolve() if exclude is not None else None
    for path in claims_dir().iterdir():
        if not path.name.isdigit():
            continue
        try:
            run_dir = Path(path.read_text(encoding="utf-8").strip())
        except OSError:
            continue
        if run_dir == skip:
            continue
        try:
            live = run_dir.is_dir() and _run_alive(read_status(run_dir))
        except (CorruptRun, OSError):
            live = run_dir.is_dir()  # a run dir being written: its claim stands
        if live:
            out.add(int(path.name))
        else:
            path.unlink(missing_ok=True)
    return out


def _run_alive(status: Any) -> bool:
    """Not ended, and its watcher (once it has one) is still that process: a run killed with
    its watcher (a test session torn down, a reboot) never keeps its port."""
    if status.final:
        return False
    if status.watcher_pid is None:
        return True  # a launch still starting: its claim stands
    if status.watcher_start is None:
        return Path(f"/proc/{status.watcher_pid}").exists()
    return same_process(status.watcher_pid, status.watcher_start)


class PortLock:
    """Serialises the port choice of simultaneous launches of this user on this machine, from
    any TRAINWIZ_HOME (one lock file beside the claims)."""

    def __enter__(self) -> PortLock:
        self.fd = os.open(claims_dir() / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
