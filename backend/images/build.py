"""Build the environment image once per set of inputs, streaming the builder's log.

``trainwiz-env:<hash>`` names the result; if that tag exists the build is skipped, which is what
makes the second build instant. A failed build's first error-looking line comes back in
``BuildResult``; the classifier's findings are added one layer up
(``backend.diagnosis.build_log.explain_build``), since the classifier names images in its fixes.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.errors import TrainwizError
from backend.i18n import _
from backend.images.catalog import ImageInfo
from backend.images.docker_client import docker_client
from backend.images.dockerfile import env_tag_for, render_dockerfile, write_context
from backend.images.events import BuildStep, LogLine
from backend.images.host import HostGpus
from backend.images.plan import EnvPlan, plan_environment
from backend.paths import cache_dir
from backend.preset.schema import Preset

Progress = Callable[..., None] | None
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_ERRORISH = re.compile(
    r"(^|\s)(ERROR|Error|error):|\bE: |Traceback|No module named|not found|Killed|"
    r"RuntimeError|OSError|Exception\b|returned non-zero|No matching distribution",
)
_DOCKER_TAIL = re.compile(r"^The command .* returned a non-zero code|^executor failed running")


@dataclass
class BuildFinding:
    """A diagnosis finding, reduced to what the build screen and CLI show."""

    category: str
    severity: str
    line: int
    title: str
    text: str
    explanation: str = ""


@dataclass
class BuildResult:
    tag: str
    ok: bool
    cached: bool
    dockerfile: str
    log_path: str | None = None
    log_tail: list[str] = field(default_factory=list)
    error: str | None = None
    error_line: str | None = None
    error_line_no: int | None = None
    findings: list[BuildFinding] = field(default_factory=list)
    image_id: str | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def env_image_tag(preset: Preset, host: HostGpus | None = None) -> str:
    """The tag the environment image of ``preset`` has (or will have) on this host."""
    return env_tag_for(plan_environment(preset, host))


def _emit(progress: Progress, event: object) -> None:
    if progress is not None:
        progress(event)


def _error_line(lines: list[str]) -> tuple[int | None, str | None]:
    """The last line that reads like the cause, skipping Docker's own 'command failed' summary."""
    for index in range(len(lines) - 1, -1, -1):
        text = lines[index].strip()
        if text and _ERRORISH.search(text) and not _DOCKER_TAIL.match(text):
            return index + 1, text
    return None, None


def _existing(client: Any, tag: str) -> Any | None:
    from docker.errors import ImageNotFound

    try:
        return client.images.get(tag)
    except ImageNotFound:
        return None


def build_env_image(
    preset: Preset,
    *,
    progress: Progress = None,
    cancel: threading.Event | None = None,
    host: HostGpus | None = None,
    base: ImageInfo | None = None,
    force: bool = False,
    client: Any = None,
) -> BuildResult:
    """Build (or find) the environment image; never raises for a failed build, only for no daemon."""
    started = time.monotonic()
    plan = plan_environment(preset, host, base)
    plan.notes += plan.indexes.notes()  # how a private index is reached (image builds only)
    tag = env_tag_for(plan)
    dockerfile = render_dockerfile(plan)
    api = client or docker_client()
    found = _existing(api, tag)
    if found is not None and not force:
        _emit(progress, LogLine(f"trainwiz: {tag} exists: build skipped"))
        return BuildResult(tag, True, True, dockerfile, image_id=found.short_id, notes=plan.notes)
    log_dir = cache_dir() / "env-builds"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{tag.split(':', 1)[1]}.log"
    with tempfile.TemporaryDirectory(prefix="trainwiz-build-") as tmp, _build_args(plan) as args:
        context = write_context(plan, Path(tmp))
        lines, error, image_id = _stream_build(api, context, tag, log_path, progress, cancel, args)
    result = BuildResult(
        tag, error is None, False, dockerfile, str(log_path), lines[-40:], error, notes=plan.notes
    )
    result.seconds = round(time.monotonic() - started, 1)
    if error is None:
        result.image_id = image_id
        return result
    result.error_line_no, result.error_line = _error_line(lines)
    return result


def _local_daemon() -> bool:
    """Does the build's 127.0.0.1 mean this machine? (a unix socket, or TCP to loopback)"""
    host = os.environ.get("DOCKER_HOST", "")
    if not host or host.startswith(("unix://", "npipe://")):
        return True
    return host.startswith(("tcp://127.0.0.1", "tcp://localhost", "tcp://[::1]"))


@contextmanager
def _build_args(plan: EnvPlan) -> Iterator[dict[str, str]]:
    """The build's ARG values: none, or the build-time proxy's URLs while it runs."""
    if not plan.indexes.needs_proxy:
        yield {}
        return
    if not _local_daemon():
        raise TrainwizError(
            _(
                "{field}: an index with credentials is reached through trainwiz's proxy on "
                "this machine's 127.0.0.1, which the Docker daemon at DOCKER_HOST={host} cannot "
                "reach; build with a local daemon, or use launch.runner: host"
            ).format(field=plan.indexes.secret_fields()[0], host=os.environ.get("DOCKER_HOST", ""))
        )
    from backend.images.pipproxy import (  # deferred: http.server, only with an index secret
        index_proxy,
    )

    with index_proxy(plan.indexes, plan.pip_cert) as proxy:
        yield plan.indexes.build_arg_values(proxy.base)


def _stream_build(
    api: Any,
    context: Path,
    tag: str,
    log_path: Path,
    progress: Progress,
    cancel: threading.Event | None,
    buildargs: dict[str, str] | None = None,
) -> tuple[list[str], str | None, str | None]:
    """Run the classic builder over the context; returns (log lines, error, image id)."""
    from docker.errors import APIError

    lines: list[str] = []
    partial = ""
    error: str | None = None
    image_id: str | None = None
    with log_path.open("w", encoding="utf-8", buffering=1) as log:

        def take(text: str) -> None:
            text = _ANSI.sub("", text)
            lines.append(text)
            log.write(text + "\n")
            step = _STEP.match(text)
            if step:
                _emit(progress, BuildStep(int(step[1]), int(step[2]), step[3]))
            _emit(progress, LogLine(text))

        try:
            stream = api.api.build(
                path=str(context),
                tag=tag,
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                network_mode="host",  # also how a build reaches the pip proxy on 127.0.0.1
                buildargs=buildargs or None,
            )
            for chunk in stream:
                if cancel is not None and cancel.is_set():
                    api.close()  # dropping the connection makes the daemon stop the build
                    take("trainwiz: build cancelled")
                    return lines, "cancelled", None
                if "stream" in chunk:
                    partial += chunk["stream"]
                    *done, partial = partial.split("\n")
                    for text in done:
                        take(text.rstrip("\r"))
                elif "error" in chunk:
                    if partial:
                        take(partial)
                        partial = ""
                    error = str(chunk["error"]).strip()
                    take(error)
                elif "aux" in chunk:
                    image_id = str(chunk["aux"].get("ID", "")) or image_id
            if partial:
                take(partial)
        except APIError as exc:
            error = f"Docker refused the build: {exc.explanation or exc}"
            take(error)
        except OSError as exc:
            raise TrainwizError(
                _("lost the Docker daemon during the build: {exc}").format(exc=exc)
            ) from exc
    return lines, error, image_id


def plan_for(preset: Preset, host: HostGpus | None = None) -> EnvPlan:
    """The plan behind the tag (for previews: Dockerfile, wheels, notes)."""
    return plan_environment(preset, host)
