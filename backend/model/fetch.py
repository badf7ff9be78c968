"""One entry point for "make sure the model is there": Hub, git-lfs clone, local dir or tiny.

The wizard's Model step and ``trainwiz model fetch`` both call ``ensure_model``; whatever the
source, it ends with the same ``ModelReport`` (validation without loading weights), which is
what the planner reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backend import paths
from backend.errors import BadInput
from backend.i18n import _
from backend.model.gitlfs import clone_lfs
from backend.model.hub import (
    DiskFree,
    FetchProgress,
    FetchResult,
    disk_free,
    fetch_hub,
    plan_download,
)
from backend.model.modelscope import fetch_modelscope
from backend.model.placeholders import resolve_placeholders
from backend.model.tiny import make_tiny
from backend.model.validate import ModelReport, validate_model_dir
from backend.preset.schema import ModelSource


@dataclass
class EnsureResult:
    dir: str
    source: str
    action: str  # downloaded, cloned, made, kept, local
    fetch: FetchResult | None
    report: ModelReport


def default_dir(repo: str) -> Path:
    """Where a repo lands when nothing names a directory: $TRAINWIZ_HOME/models/owner--name."""
    return paths.models_dir() / repo.replace("/", "--")


def model_dir(source: ModelSource, override: str | None = None) -> Path:
    return Path(resolve_placeholders(override or source.dir, None)).expanduser()


def ensure_model(
    source: ModelSource,
    dir: str | None = None,
    progress: Callable[[FetchProgress], None] | None = None,
    cancel: threading.Event | None = None,
    free: DiskFree = disk_free,
    python: str | None = None,
) -> EnsureResult:
    """Fetch, clone, make or just check the model of ``source``; always validate it."""
    target = model_dir(source, dir)
    fetched: FetchResult | None = None
    if source.source == "hf":
        assert source.repo is not None  # the schema guarantees it
        plan = plan_download(
            source.repo,
            target,
            revision=source.revision,
            endpoint=source.endpoint,
            token_env=source.token_env,
            prefer_safetensors=source.prefer_safetensors,
            free=free,
        )
        fetched = fetch_hub(plan, token_env=source.token_env, progress=progress, cancel=cancel)
        action = "downloaded"
    elif source.source == "git_lfs":
        fetched = clone_lfs(source.clone_url(), target, source.revision, progress, cancel, free)
        action = "cloned"
    elif source.source == "modelscope":
        fetched = fetch_modelscope(source, target, progress, cancel, python)
        action = "downloaded"
    elif source.source == "tiny":
        made = make_tiny(target, source.tiny, python=python)
        action = "made" if made.created else "kept"
    else:
        if not target.is_dir():
            raise BadInput(
                _("model.dir: {target} does not exist (source 'local' downloads nothing)").format(
                    target=target
                )
            )
        action = "local"
    return EnsureResult(str(target), source.source, action, fetched, validate_model_dir(target))
