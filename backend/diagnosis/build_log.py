"""A failed environment-image build, explained by the classifier.

The image builder (``backend.images.build``) sits below the classifier, whose fixes name images
and CUDA tables; so the builder returns the raw result and this module, one layer up, adds the
findings and the line they point at. Every caller that shows a build (the CLI's ``env``, the
Images step, replay and the watcher's prepare step) goes through ``build_explained`` or
``ensure_env_image`` here, so a failed build reads the same everywhere.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from backend.errors import TrainwizError
from backend.i18n import _
from backend.images.build import BuildFinding, BuildResult, Progress, build_env_image
from backend.images.catalog import ImageInfo
from backend.images.host import HostGpus
from backend.preset.schema import Preset


def diagnose_build_log(text: str, preset: Preset | None = None) -> list[BuildFinding]:
    """Findings of the diagnosis classifier for a build log (empty when it recognises nothing)."""
    from backend.diagnosis.classifier import (  # deferred: classifier tables, only for a failed build
        diagnose_text,
    )

    diagnosis = diagnose_text(text, preset)
    return [
        BuildFinding(f.category, f.severity, f.line, f.title, f.text, f.explanation)
        for f in diagnosis.findings
    ]


def explain_build(result: BuildResult, preset: Preset | None = None) -> BuildResult:
    """Add the classifier's findings to a failed build; the top one names the error line."""
    if result.ok or not result.log_path:
        return result
    try:
        lines = Path(result.log_path).read_text(errors="replace").splitlines()
    except OSError:  # the log went away: the builder's own error line stands
        return result
    result.findings = diagnose_build_log("\n".join(lines), preset)
    if result.findings and 0 < result.findings[0].line <= len(lines):
        top = result.findings[0]
        result.error_line_no, result.error_line = top.line, lines[top.line - 1].strip()
    return result


def build_explained(
    preset: Preset,
    *,
    progress: Progress = None,
    cancel: threading.Event | None = None,
    host: HostGpus | None = None,
    base: ImageInfo | None = None,
    force: bool = False,
    client: Any = None,
) -> BuildResult:
    """``build_env_image`` whose failure carries the classifier's findings."""
    result = build_env_image(
        preset,
        progress=progress,
        cancel=cancel,
        host=host,
        base=base,
        force=force,
        client=client,
    )
    return explain_build(result, preset)


def ensure_env_image(
    preset: Preset,
    *,
    progress: Progress = None,
    cancel: threading.Event | None = None,
    host: HostGpus | None = None,
) -> str:
    """The environment image tag, building it first if needed; raises if the build fails."""
    result = build_explained(preset, progress=progress, cancel=cancel, host=host)
    if not result.ok:
        first = result.findings[0].title if result.findings else (result.error_line or "")
        raise TrainwizError(
            _("environment image build failed: {value}; log: {log_path}").format(
                value=first or result.error, log_path=result.log_path
            )
        )
    return result.tag
