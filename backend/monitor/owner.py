"""Who owns a GPU process: this run, another job, or unknown.

NVML reports host PIDs. A host run is matched through its process tree (psutil children of the
run's pid, or its process group); a docker run through the container id found in
``/proc/<pid>/cgroup``. A PID we cannot inspect (another user's, hidden by a PID namespace) is
"unknown" rather than guessed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from backend.procinfo import stat_fields

try:  # the wizard always has psutil; a bare GPU box running the probe script may not
    import psutil
except ImportError:  # pragma: no cover - exercised only where psutil is absent
    psutil = None  # type: ignore[assignment]

Owner = Literal["this run", "other", "unknown"]


class OwnerResolver(Protocol):
    def refresh(self) -> None:
        """Called once per sample, so per-sample caches (process trees) stay fresh."""

    def owner(self, pid: int) -> Owner: ...

    def name(self, pid: int) -> str: ...


def process_name(pid: int) -> str:
    if psutil is None:
        try:
            return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip()
        except OSError:
            return ""
    try:
        return psutil.Process(pid).name()
    except (psutil.Error, OSError):
        return ""


def _descendants(root: int) -> set[int]:
    if psutil is not None:
        try:
            return {c.pid for c in psutil.Process(root).children(recursive=True)}
        except (psutil.Error, OSError):
            return set()
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = stat_fields(int(entry.name))
        if fields is None or len(fields) < 2:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


def _pid_exists(pid: int) -> bool:
    return psutil.pid_exists(pid) if psutil is not None else Path(f"/proc/{pid}").exists()


class UnknownOwner:
    """No run to compare with (e.g. browsing GPUs before a launch)."""

    def refresh(self) -> None:
        return None

    def owner(self, pid: int) -> Owner:
        return "unknown"

    def name(self, pid: int) -> str:
        return process_name(pid)


@dataclass
class StaticOwner:
    """A fixed set of PIDs is this run; the rest are others. Used to replay recorded traces."""

    pids: frozenset[int] = frozenset()
    names: dict[int, str] = field(default_factory=dict)

    def refresh(self) -> None:
        return None

    def owner(self, pid: int) -> Owner:
        return "this run" if pid in self.pids else "other"

    def name(self, pid: int) -> str:
        return self.names.get(pid, "")


class ProcessTreeOwner:
    """A host run: its launcher pid, every descendant, and anything in its process group."""

    def __init__(self, root_pid: int, pgid: int | None = None) -> None:
        self.root_pid = root_pid
        self.pgid = pgid
        self._tree: set[int] = set()
        self.refresh()

    def refresh(self) -> None:
        self._tree = {self.root_pid} | _descendants(self.root_pid)

    def owner(self, pid: int) -> Owner:
        if pid in self._tree:
            return "this run"
        if self.pgid is not None:
            try:
                if os.getpgid(pid) == self.pgid:
                    return "this run"
            except OSError:
                return "unknown"
        return "other" if _pid_exists(pid) else "unknown"

    def name(self, pid: int) -> str:
        return process_name(pid)


class ContainerOwner:
    """A docker run: a PID is ours when its cgroup path names our container id."""

    def __init__(self, container_id: str, proc_root: Path | str = "/proc") -> None:
        self.container_id = container_id.strip().lower()
        self.proc_root = Path(proc_root)

    def refresh(self) -> None:
        return None

    def owner(self, pid: int) -> Owner:
        try:
            text = (self.proc_root / str(pid) / "cgroup").read_text(encoding="utf-8")
        except OSError:
            return "unknown"
        ids = container_ids_in_cgroup(text)
        if any(_same_container(self.container_id, cid) for cid in ids):
            return "this run"
        return "other"

    def name(self, pid: int) -> str:
        try:
            return (self.proc_root / str(pid) / "comm").read_text(encoding="utf-8").strip()
        except OSError:
            return ""


def container_ids_in_cgroup(text: str) -> list[str]:
    """64-hex docker ids in a /proc/<pid>/cgroup body (cgroup v1 and v2 layouts)."""
    found = []
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        for part in path.replace(".scope", "").split("/"):
            token = part.rsplit("-", 1)[-1]  # systemd: docker-<id>.scope
            if len(token) == 64 and all(c in "0123456789abcdef" for c in token):
                found.append(token)
    return found


def _same_container(ours: str, seen: str) -> bool:
    # status.json may hold a short (12-char) id; cgroups always carry the full one.
    return bool(ours) and (seen == ours or seen.startswith(ours))


def owner_for_status(
    status: dict[str, Any] | None, proc_root: Path | str = "/proc"
) -> OwnerResolver:
    """The resolver for a run described by its status.json (see docs/run-format.md)."""
    if not status:
        return UnknownOwner()
    if status.get("runner") == "docker" and status.get("container_id"):
        return ContainerOwner(str(status["container_id"]), proc_root)
    pid = status.get("pid")
    if isinstance(pid, int) and pid > 0:
        pgid = status.get("pgid")
        return ProcessTreeOwner(pid, pgid if isinstance(pgid, int) else None)
    return UnknownOwner()


def as_static(pids: Iterable[int], names: dict[int, str] | None = None) -> StaticOwner:
    return StaticOwner(frozenset(pids), dict(names or {}))
