"""Hugging Face Hub downloads: preflight against free disk, resumable fetch with progress.

The file list and sizes come from the Hub API (``model_info(files_metadata=True)``) so a download
that cannot fit is refused before the first byte. Files are fetched by a subprocess
(``_hf_worker.py``) running huggingface_hub's own ``hf_hub_download``: cancel terminates it, and
the next fetch resumes from the ``.incomplete`` file it leaves. Progress is measured from the
sizes on disk, so it is true whatever transport huggingface_hub picks.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend import subproc
from backend.errors import TrainwizError
from backend.i18n import _
from backend.mirrors.resolve import MIRROR_TOKEN_ENV
from backend.model.hub_errors import explain_api_error, explain_worker_error
from backend.tokens import child_env, decide
from backend.units import download_size

WORKER = Path(__file__).with_name("_hf_worker.py")
DUPLICATE_WEIGHTS = (".bin", ".pt", ".pth", ".h5", ".msgpack", ".onnx", ".ckpt", ".gguf")
DEFAULT_ENDPOINT = "https://huggingface.co"


class Cancelled(TrainwizError):
    """The user cancelled; partial files stay so that the next fetch resumes."""


class NotEnoughDisk(TrainwizError):
    """Refused up front: the download would not fit."""


@dataclass
class RemoteFile:
    name: str
    size: int


@dataclass
class HubPlan:
    """What a fetch would download, decided before any file transfer."""

    repo: str
    revision: str
    commit: str
    endpoint: str
    dir: str
    files: list[RemoteFile]
    skipped: list[str]
    total_bytes: int
    need_bytes: int
    free_bytes: int


@dataclass
class FetchProgress:
    """One progress report: the current file and the whole download (bytes, B/s, seconds)."""

    file: str
    file_bytes: int
    file_total: int
    file_speed: float
    file_eta: float | None
    bytes: int
    total: int
    speed: float
    eta: float | None
    files_done: int
    files_total: int
    message: str = ""


@dataclass
class FetchResult:
    dir: str
    commit: str
    files: list[str]
    skipped: list[str]
    total_bytes: int
    retries: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)


DiskFree = Callable[[Path], int]


def disk_free(path: Path) -> int:
    """Free bytes on the filesystem that will hold ``path`` (its nearest existing parent)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def read_token(token_env: str, endpoint: str = DEFAULT_ENDPOINT) -> str | bool | None:
    """The ``token=`` for huggingface_hub at ``endpoint``: the token from the named variable,
    None (its cached login), or False (send none: the endpoint or the variable is not trusted;
    see ``backend.tokens``)."""
    return decide(endpoint, token_env).hub_token()


def _implicit_token(token_env: str) -> bool | None:
    """False (no cached login either) for a Hub mirror trainwiz chose itself (docs/mirrors.md)."""

    return False if token_env == MIRROR_TOKEN_ENV else None


def select_files(
    sizes: dict[str, int], prefer_safetensors: bool = True
) -> tuple[list[str], list[str]]:
    """(files to fetch, files skipped): with safetensors present, other weight formats are dupes."""
    names = sorted(sizes)
    has_st = any(n.endswith(".safetensors") for n in names)
    if not (prefer_safetensors and has_st):
        return names, []
    keep, skip = [], []
    for name in names:
        duplicate = name.endswith(DUPLICATE_WEIGHTS) or name == "pytorch_model.bin.index.json"
        if duplicate or name.startswith("original/") or name.startswith("consolidated"):
            skip.append(name)
        else:
            keep.append(name)
    return keep, skip


def plan_download(
    repo: str,
    target: str | Path,
    revision: str = "main",
    endpoint: str | None = None,
    token_env: str = "HF_TOKEN",
    prefer_safetensors: bool = True,
    free: DiskFree = disk_free,
    margin: float = 0.02,
) -> HubPlan:
    """Ask the Hub API for the file list and sizes; refuse when they do not fit on disk.

    ``free`` is the injection point for the free-disk measurement (tests, remote hosts).
    """
    from huggingface_hub import HfApi

    endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    decision = decide(endpoint, token_env)
    token = decision.hub_token()
    if token is None and _implicit_token(token_env) is False:
        token = False  # a mirror trainwiz chose: no cached login either
    api = HfApi(endpoint=endpoint, token=token)
    try:
        info = api.model_info(repo, revision=revision, files_metadata=True)
    except Exception as exc:
        raise explain_api_error(
            exc, repo, revision, endpoint, token_env, withheld=decision.reason
        ) from exc
    sizes = {s.rfilename: int(s.size or 0) for s in info.siblings or []}
    keep, skipped = select_files(sizes, prefer_safetensors)
    root = Path(target).expanduser()
    files = [RemoteFile(n, sizes[n]) for n in keep]
    need = sum(max(0, f.size - _on_disk(root, f.name, f.size)) for f in files)
    free_bytes = free(root)
    plan = HubPlan(
        repo=repo,
        revision=revision,
        commit=info.sha or revision,
        endpoint=endpoint,
        dir=str(root),
        files=files,
        skipped=skipped,
        total_bytes=sum(f.size for f in files),
        need_bytes=need,
        free_bytes=free_bytes,
    )
    required = int(need * (1 + margin))
    if required > free_bytes:
        raise NotEnoughDisk(
            _(
                "{repo} needs {gib} more on {root} but only {gib2} is free: free space or choose "
                "another directory (--dir / model.dir); nothing was downloaded"
            ).format(
                repo=repo, gib=download_size(required), root=root, gib2=download_size(free_bytes)
            )
        )
    return plan


def _incomplete_bytes(root: Path, name: str) -> int:
    """Bytes in huggingface_hub's partial file for ``name`` (its download cache in ``root``)."""
    try:
        from huggingface_hub._local_folder import get_local_download_paths

        paths = get_local_download_paths(root, name)
        prefix = paths.incomplete_path("x").name.rsplit(".", 2)[0] + "."
        folder = paths.metadata_path.parent
    except Exception:
        return 0
    if not folder.is_dir():
        return 0
    return sum(p.stat().st_size for p in folder.glob(prefix + "*.incomplete") if p.is_file())


def _on_disk(root: Path, name: str, size: int) -> int:
    final = root / name
    if final.is_file() and final.stat().st_size == size:
        return size
    return min(size, _incomplete_bytes(root, name))


class _Rate:
    """Exponentially smoothed bytes/s, so the ETA does not jump with every poll."""

    def __init__(self) -> None:
        self.last: tuple[float, int] | None = None
        self.value = 0.0

    def update(self, now: float, done: int) -> float:
        if self.last is not None and now > self.last[0]:
            inst = max(0.0, (done - self.last[1]) / (now - self.last[0]))
            self.value = inst if self.value == 0 else 0.7 * self.value + 0.3 * inst
        self.last = (now, done)
        return self.value


def fetch_hub(
    plan: HubPlan,
    token_env: str = "HF_TOKEN",
    progress: Callable[[FetchProgress], None] | None = None,
    cancel: threading.Event | None = None,
    retries: int = 5,
    poll_s: float = 0.2,
) -> FetchResult:
    """Download the planned files (resuming partial ones); raises Cancelled or a clear error."""
    root = Path(plan.dir)
    root.mkdir(parents=True, exist_ok=True)
    job = {
        "repo": plan.repo,
        "commit": plan.commit,
        "endpoint": plan.endpoint,
        "dir": str(root),
        "files": [f.name for f in plan.files],
        "retries": retries,
    }
    decision = decide(plan.endpoint, token_env)
    # The worker passes token=False (no implicit login) when the token is withheld, and for a
    # mirror trainwiz chose itself when the user gave it no token on purpose (docs/mirrors.md).
    job["no_token"] = not decision.send or (
        decision.token is None and _implicit_token(token_env) is False
    )
    env = child_env(decision)
    env.update(HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_ENABLE_HF_TRANSFER="0")
    if job["no_token"]:
        env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
    proc = subproc.spawn(
        [sys.executable, str(WORKER)], env=env, stdin=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(json.dumps(job))
    proc.stdin.close()
    events: queue.Queue[dict[str, Any] | None] = queue.Queue()
    stderr_tail: list[str] = []
    threading.Thread(target=_pump, args=(proc.stdout, events), daemon=True).start()
    threading.Thread(target=_tail, args=(proc.stderr, stderr_tail), daemon=True).start()

    sizes = {f.name: f.size for f in plan.files}
    done: set[str] = set()
    seen: list[dict[str, Any]] = []
    current = plan.files[0].name if plan.files else ""
    total_rate, file_rate = _Rate(), _Rate()
    error: dict[str, Any] | None = None
    finished = False
    message = (
        f"preflight: {len(plan.files)} files ({len(plan.skipped)} duplicates skipped), "
        f"{download_size(plan.need_bytes)} to fetch, {download_size(plan.free_bytes)} free"
    )
    while not finished:
        try:
            event = events.get(timeout=poll_s)
        except queue.Empty:
            event = {}
        if event is None:
            finished = True
        elif event:
            seen.append(event)
            kind = event.get("event")
            if kind == "file_start":
                current, file_rate = event["file"], _Rate()
                message = f"downloading {current}"
            elif kind == "file_done":
                done.add(event["file"])
            elif kind == "retry":
                message = f"{event['file']}: connection lost, resuming (attempt {event['attempt']})"
            elif kind == "error":
                error = event
        if cancel is not None and cancel.is_set():
            _stop(proc)
            raise Cancelled(_("download cancelled; run fetch again to resume the partial file"))
        if progress is not None:
            progress(_progress(root, plan, sizes, done, current, total_rate, file_rate, message))
    proc.wait()
    if error is not None or proc.returncode != 0:
        partial = _incomplete_bytes(root, str((error or {}).get("file") or ""))
        raise explain_worker_error(
            error, plan.repo, plan.endpoint, token_env, partial, stderr_tail, decision.reason
        )
    return FetchResult(
        dir=str(root),
        commit=plan.commit,
        files=[f.name for f in plan.files],
        skipped=plan.skipped,
        total_bytes=plan.total_bytes,
        retries=sum(1 for e in seen if e.get("event") == "retry"),
        events=seen,
    )


def _progress(
    root: Path,
    plan: HubPlan,
    sizes: dict[str, int],
    done: set[str],
    current: str,
    total_rate: _Rate,
    file_rate: _Rate,
    message: str,
) -> FetchProgress:
    now = time.monotonic()
    file_bytes = (
        sizes.get(current, 0) if current in done else _on_disk(root, current, sizes.get(current, 0))
    )
    total = sum(sizes[n] if n in done else _on_disk(root, n, sizes[n]) for n in sizes)
    speed, fspeed = total_rate.update(now, total), file_rate.update(now, file_bytes)
    file_total = sizes.get(current, 0)
    return FetchProgress(
        file=current,
        file_bytes=file_bytes,
        file_total=file_total,
        file_speed=fspeed,
        file_eta=(file_total - file_bytes) / fspeed if fspeed > 0 else None,
        bytes=total,
        total=plan.total_bytes,
        speed=speed,
        eta=(plan.total_bytes - total) / speed if speed > 0 else None,
        files_done=len(done),
        files_total=len(sizes),
        message=message,
    )


def _pump(stream: Any, out: queue.Queue[dict[str, Any] | None]) -> None:
    for line in stream:
        line = line.strip()
        if line.startswith("{"):
            try:
                out.put(json.loads(line))
            except ValueError:
                continue
    out.put(None)


def _tail(stream: Any, out: list[str]) -> None:
    for line in stream:
        out.append(line)
        del out[:-50]


def _stop(proc: subprocess.Popen[str]) -> None:
    """The worker and anything it started (hf_transfer, a proxy helper): TERM, KILL after 5 s."""
    subproc.stop_group(proc, 5.0)
