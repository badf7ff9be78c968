"""The seed's way: a git-lfs clone, made preflightable and resumable.

The seed runs ``git clone`` with smudging on, which gives no size up front and no useful
progress. Here the clone first fetches only pointers (``GIT_LFS_SKIP_SMUDGE=1``), the LFS sizes
(``git lfs ls-files --json``) are checked against free disk, then ``git lfs pull`` fetches the
weights while git-lfs reports progress into the file named by ``GIT_LFS_PROGRESS``. Re-running
on an existing clone resumes (git-lfs keeps partial objects). Every command is an argv list.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from backend import subproc
from backend.errors import BadInput, TrainwizError
from backend.i18n import _
from backend.model.hub import (
    Cancelled,
    DiskFree,
    FetchProgress,
    FetchResult,
    NotEnoughDisk,
    _Rate,
    disk_free,
)
from backend.redact import redact_text
from backend.units import download_size

CANCEL_GRACE_S = 5.0  # git-lfs keeps its partial objects either way: a cancel can be quick
PROGRESS_LINE = re.compile(r"^(\w+) (\d+)/(\d+) (\d+)/(\d+) (.+)$")


def _env() -> dict[str, str]:
    return dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_LFS_SKIP_SMUDGE="1", LC_ALL="C")


def _run(
    argv: list[str], cwd: Path | None, cancel: threading.Event | None, env: dict[str, str]
) -> str:
    """Run one git command, cancellable; returns stdout or raises with stderr's tail."""
    # stdout apart from stderr: ls-files' JSON is stdout, a failure's reason stderr's tail.
    proc = subproc.spawn(argv, cwd=cwd, env=env, stderr=subprocess.PIPE)
    while True:
        try:
            out, err = proc.communicate(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            if cancel is not None and cancel.is_set():
                subproc.stop_group(proc, CANCEL_GRACE_S)  # git and its lfs/ssh children
                raise Cancelled(_("clone cancelled; run fetch again to resume")) from None
    if proc.returncode != 0:
        tail = "\n".join(err.strip().splitlines()[-4:]) or f"exit {proc.returncode}"
        raise TrainwizError(redact_text(f"{' '.join(argv[:3])} failed:\n{tail}"))
    return out


def lfs_files(repo_dir: Path) -> list[tuple[str, int, bool]]:
    """(name, size, downloaded) of every LFS file in the checkout."""
    out = _run(["git", "lfs", "ls-files", "--json"], repo_dir, None, _env())
    files = json.loads(out or "{}").get("files") or []
    return [(f["name"], int(f["size"]), bool(f.get("downloaded"))) for f in files]


def clone_lfs(
    url: str,
    target: str | Path,
    revision: str = "main",
    progress: Callable[[FetchProgress], None] | None = None,
    cancel: threading.Event | None = None,
    free: DiskFree = disk_free,
) -> FetchResult:
    """Clone ``url`` into ``target`` (or reuse an earlier clone), check disk, pull LFS objects."""
    if shutil.which("git") is None:
        raise TrainwizError(_("git is not installed: install git and git-lfs, or use source 'hf'"))
    root = Path(target).expanduser()
    env = _env()
    if not (root / ".git").is_dir():
        if root.exists() and any(root.iterdir()):
            raise BadInput(
                _("model.dir {root} exists and is not a git clone: choose an empty dir").format(
                    root=root
                )
            )
        root.parent.mkdir(parents=True, exist_ok=True)
        _run(["git", "clone", "--no-checkout", "--", url, str(root)], None, cancel, env)
    _run(["git", "checkout", "--quiet", revision, "--"], root, cancel, env)
    files = lfs_files(root)
    sizes = {name: size for name, size, _kind in files}
    need = sum(size for _name, size, done in files if not done)
    have = free(root)
    if need > have:
        raise NotEnoughDisk(
            _(
                "the LFS files need {gib} on {root} but only {gib2} is free: free space or "
                "choose another directory; only the pointers were cloned"
            ).format(gib=download_size(need), root=root, gib2=download_size(have))
        )
    with tempfile.NamedTemporaryFile(prefix="trainwiz-lfs-", suffix=".log", delete=False) as fh:
        progress_file = Path(fh.name)
    try:
        pull_env = dict(env, GIT_LFS_PROGRESS=str(progress_file))
        pull_env.pop("GIT_LFS_SKIP_SMUDGE")
        stop = threading.Event()
        watcher = threading.Thread(
            target=_watch, args=(progress_file, sizes, progress, stop), daemon=True
        )
        watcher.start()
        try:
            _run(["git", "lfs", "pull"], root, cancel, pull_env)
        finally:
            stop.set()
            watcher.join()
    finally:
        progress_file.unlink(missing_ok=True)
    missing = [name for name, _size, done in lfs_files(root) if not done]
    if missing:
        raise TrainwizError(
            _("git lfs pull left {count} files missing: {value}").format(
                count=len(missing), value=missing[:3]
            )
        )
    commit = _run(["git", "rev-parse", "HEAD"], root, None, env).strip()
    return FetchResult(
        dir=str(root),
        commit=commit,
        files=sorted(sizes),
        skipped=[],
        total_bytes=sum(sizes.values()),
    )


def _watch(
    path: Path,
    sizes: dict[str, int],
    progress: Callable[[FetchProgress], None] | None,
    stop: threading.Event,
) -> None:
    """Turn git-lfs's progress lines into FetchProgress reports until ``stop``."""
    got: dict[str, int] = {}
    rate, total = _Rate(), sum(sizes.values())
    current = ""
    while True:
        stopped = stop.wait(0.25)  # one last read after the pull ended
        text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
        for line in text.splitlines():
            match = PROGRESS_LINE.match(line.strip())
            if match:
                current = match.group(6)
                got[current] = max(got.get(current, 0), int(match.group(4)))
        if progress is not None:
            done = sum(got.values())
            speed = rate.update(time.monotonic(), done)
            progress(
                FetchProgress(
                    file=current,
                    file_bytes=got.get(current, 0),
                    file_total=sizes.get(current, 0),
                    file_speed=speed,
                    file_eta=None,
                    bytes=done,
                    total=total,
                    speed=speed,
                    eta=(total - done) / speed if speed > 0 else None,
                    files_done=sum(1 for n, b in got.items() if b >= sizes.get(n, 0)),
                    files_total=len(sizes),
                    message=f"git lfs pull {current}",
                )
            )
        if stopped:
            return
