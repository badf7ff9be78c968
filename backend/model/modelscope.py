"""ModelScope as a model source, through ModelScope's own client (the ``modelscope`` extra).

The client runs in a child process (``python -m backend.model.modelscope REPO REV DIR``):
importing it takes seconds, and a child can be stopped when the user cancels. The endpoint
goes in through ``MODELSCOPE_ENDPOINT``, the variable the client itself reads, so the plan's
printed command (``MODELSCOPE_ENDPOINT=… modelscope download …``) and the fetch are the same.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from backend import subproc
from backend.errors import TrainwizError
from backend.i18n import _
from backend.model.hub import FetchProgress, FetchResult
from backend.preset.schema import ModelSource

ENDPOINT_ENV = "MODELSCOPE_ENDPOINT"


def revision_of(source: ModelSource) -> str:
    """ModelScope's default branch is ``master``; the schema's default ``main`` means it."""
    return "master" if source.revision == "main" else source.revision


def endpoint_env(source: ModelSource) -> dict[str, str]:
    """The client's own variable for the endpoint (the plan's step sets the same)."""
    return {ENDPOINT_ENV: source.endpoint} if source.endpoint else {}


def _size(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file() and ".cache" not in p.parts]
    return sum(p.stat().st_size for p in files), len(files)


def fetch_modelscope(
    source: ModelSource,
    target: Path,
    progress: Callable[[FetchProgress], None] | None = None,
    cancel: threading.Event | None = None,
    python: str | None = None,
) -> FetchResult:
    """Download the whole snapshot of ``source.repo`` into ``target``; raises on failure."""
    target.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **endpoint_env(source)}
    env.setdefault("MODELSCOPE_CACHE", str(target / ".cache" / "modelscope"))
    argv = [python or sys.executable, "-m", "backend.model.modelscope"]
    argv += [str(source.repo), revision_of(source), str(target)]
    started = time.monotonic()

    def tick() -> None:
        if progress is not None:
            done, count = _size(target)
            speed = done / max(time.monotonic() - started, 1e-3)
            progress(
                FetchProgress("", 0, 0, 0.0, None, done, 0, speed, None, count, 0, "modelscope")
            )

    # Its own group, output read as it comes, TERM then KILL on cancel (backend/subproc.py).
    ended = subproc.run(argv, env=env, cancel=cancel, tick=tick)
    if ended.cancelled:
        raise TrainwizError(_("ModelScope download cancelled"))
    if not ended.ok:
        raise TrainwizError(
            _(
                "ModelScope download of {repo} failed: {value} (endpoint {value2}; check "
                "model.repo and the network)"
            ).format(
                repo=source.repo, value=ended.last_line(), value2=source.endpoint or "the default"
            )
        )
    files = sorted(
        p.relative_to(target).as_posix()
        for p in target.rglob("*")
        if p.is_file() and ".cache" not in p.relative_to(target).parts
    )
    return FetchResult(
        dir=str(target),
        commit=revision_of(source),
        files=files,
        skipped=[],
        total_bytes=_size(target)[0],
    )


def _main(argv: list[str]) -> int:
    repo, revision, local_dir = argv
    try:
        from modelscope import snapshot_download
    except ImportError:
        print("the modelscope client is not installed: pip install 'trainwiz[modelscope]'")
        return 3
    snapshot_download(repo, revision=revision, local_dir=local_dir)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
