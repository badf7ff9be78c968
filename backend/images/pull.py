"""Pull an image with per-layer progress, naming the daemon's registry mirrors first.

Uses the SDK's low-level streaming pull so each layer's status and byte counts reach the screen
as they happen; the result keeps the last state of every layer, and a refused pull keeps the
daemon's own words (a mirror or a proxy is the usual fix where Docker Hub is slow or blocked).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from backend.images.docker_client import docker_client, registry_mirrors
from backend.images.events import LayerProgress, LogLine


@dataclass
class LayerState:
    status: str
    current: int | None = None
    total: int | None = None


@dataclass
class PullResult:
    ref: str
    ok: bool
    layers: dict[str, LayerState] = field(default_factory=dict)
    mirrors: list[str] = field(default_factory=list)
    error: str | None = None
    digest: str | None = None


def split_ref(ref: str) -> tuple[str, str]:
    """'host:5000/a/b:tag' -> ('host:5000/a/b', 'tag'); no tag means 'latest'."""
    if "@" in ref:
        repo, digest = ref.split("@", 1)
        return repo, digest
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = ref.rsplit(":", 1)
        return repo, tag
    return ref, "latest"


def pull_image(
    ref: str,
    *,
    progress: Callable[..., None] | None = None,
    cancel: threading.Event | None = None,
    client: Any = None,
) -> PullResult:
    """Pull ``ref``; never raises for a refused pull (the result says why), only for no daemon."""
    from docker.errors import APIError

    api = client or docker_client()
    result = PullResult(ref=ref, ok=False, mirrors=registry_mirrors(api))
    if result.mirrors and progress is not None:
        progress(LogLine("registry mirrors: " + ", ".join(result.mirrors)))
    repo, tag = split_ref(ref)
    try:
        for event in api.api.pull(repo, tag=tag, stream=True, decode=True):
            if cancel is not None and cancel.is_set():
                api.close()
                result.error = "cancelled"
                return result
            if "error" in event:
                result.error = str(event["error"]).strip()
                break
            status = str(event.get("status", ""))
            layer = event.get("id")
            detail = event.get("progressDetail") or {}
            if layer and status and not status.startswith(("Pulling from", "Digest", "Status")):
                state = LayerState(status, detail.get("current"), detail.get("total"))
                result.layers[str(layer)] = state
                if progress is not None:
                    progress(LayerProgress(str(layer), status, state.current, state.total))
            elif status:
                if status.startswith("Digest:"):
                    result.digest = status.split(":", 1)[1].strip()
                if progress is not None:
                    progress(LogLine(status if not layer else f"{layer}: {status}"))
    except APIError as exc:
        result.error = str(exc.explanation or exc)
    result.ok = result.error is None
    return result
