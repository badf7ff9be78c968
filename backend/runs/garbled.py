"""A status.json nobody can read (invalid JSON, truncated, binary) rewritten into one everyone can.

Left garbled, every reader of the run (``runs``, ``stop``, the monitor, the port claims) had to
rebuild the same guess each time, and the record said nothing about why. ``refresh``
(``backend.runs.control``) rewrites it once, atomically, from what is known: the run's live
processes (``running``), else how it ended (the metrics end line, a stop request), else
``failed`` with cause ``status_unreadable``. The garbled file is kept beside it first, as
``status.json.garbled`` (a hard link: the same bytes, no copy), under the first name that is
free: nothing that is already there is overwritten, and a status.json that is a symlink is
replaced as a link, its target untouched. When no copy can be kept, nothing is rewritten.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

from backend.rundir import STATUS

GARBLED = STATUS + ".garbled"
UNREADABLE = "status_unreadable"  # the cause of a run whose end is known from nothing else
MAX_NAMES = 100  # status.json.garbled, .garbled.1, ... .garbled.99
MAX_COPY = 64 << 20  # a file system without hard links: bigger garbage is not copied


def why_unreadable(path: Path) -> str:
    """A few words on what is wrong with the file (its first bytes only are read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return "not a regular file"
            head = handle.read(1 << 20)
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    if not head.strip():
        return "empty"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return "not text"
    try:
        json.loads(text)
    except ValueError:
        return "not JSON: truncated or garbled"
    return "not a status record"


def keep_garbled(run_dir: Path) -> str | None:
    """status.json kept under the first free ``status.json.garbled[.N]``: its name, or None
    when nothing could be kept (then status.json must stay as it is)."""
    source = run_dir / STATUS
    names = [GARBLED, *(f"{GARBLED}.{n}" for n in range(1, MAX_NAMES))]
    for name in names:
        try:
            os.link(source, run_dir / name, follow_symlinks=False)  # a symlink: the link itself
        except FileExistsError:
            continue
        except OSError:
            break  # no hard links on this file system: a copy below
        return name
    for name in names:
        try:
            return name if _copy(source, run_dir / name) else None
        except FileExistsError:
            continue
        except OSError:
            return None
    return None


def _copy(source: Path, target: Path) -> bool:
    """Copy into a new ``target`` (never an existing one); False when the source is no
    regular file or too large to copy."""
    if source.is_symlink():
        os.symlink(os.readlink(source), target)
        return True
    fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as src:
        info = os.fstat(src.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_COPY:
            return False
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return True


def running_message(why: str, count: int, kept: str | None) -> str:
    note = f"; the unreadable file is kept as {kept}" if kept else ""
    return (
        f"status.json was unreadable ({why}): rebuilt while {count} process(es) of the run "
        f"are running{note}"
    )


def ended_message(ended: str, why: str, kept: str | None) -> str:
    note = f"; the unreadable file is kept as {kept}" if kept else ""
    return f"{ended} [status.json was unreadable ({why}): rebuilt{note}]"


UNREADABLE_END = "nothing of the run is running and nothing says how it ended: exit code unknown"
