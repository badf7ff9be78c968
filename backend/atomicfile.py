"""How a record is written so that nothing ever reads half of it: a whole-file atomic replace
(temp file, fsync, rename) or an append, both private to the user (0600: logs, presets and plans
can name private paths and hosts).

A full disk never tears a record either: the folder holds a small reserve file that a write
hitting ENOSPC releases before its one retry, and a write that still fails leaves the last good
file and raises DiskFull. The run directory (``backend.rundir``) keeps its records this way, so
a wizard killed at any moment leaves files another process can still read.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from backend.errors import TrainwizError
from backend.i18n import _

RESERVE = ".reserve"  # released when a record write hits a full disk
RESERVE_BYTES = 256 << 10
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(TrainwizError):
    """A record could not be written because its file system is full (the last good file stays)."""


def private_open(path: Path, flags: int = os.O_WRONLY | os.O_CREAT | os.O_APPEND) -> int:
    return os.open(path, flags, 0o600)


def write_private(path: Path, text: str) -> None:
    """A run file the user alone can read (presets and plans name private paths)."""
    atomic_write(path, text)


def release_reserve(folder: Path) -> bool:
    try:
        (folder / RESERVE).unlink()
    except OSError:
        return False
    return True


def make_reserve(folder: Path) -> None:
    fd = private_open(folder / RESERVE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        try:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
        except OSError as exc:
            if exc.errno in FULL_DISK:
                raise
            os.write(fd, b"\0" * RESERVE_BYTES)  # a file system without fallocate
    finally:
        os.close(fd)


def _write_once(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path: Path, text: str) -> None:
    """Temp file (0600) + fsync + rename: readers see old or new, never half.

    On a full disk the folder's reserve is released and the write retried once; if it still
    fails the previous file is left as it was and DiskFull is raised.
    """
    data = text.encode("utf-8")
    try:
        _write_once(path, data)
        return
    except OSError as exc:
        if exc.errno not in FULL_DISK:
            raise
    release_reserve(path.parent)
    try:
        _write_once(path, data)
    except OSError as exc:
        if exc.errno not in FULL_DISK:
            raise
        raise DiskFull(
            _("disk full: cannot write {path} (the last good copy is kept)").format(path=path)
        ) from exc


def write_json(path: Path, data: Any) -> None:
    atomic_write(path, json.dumps(data, indent=2, default=str) + "\n")


def free_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize
