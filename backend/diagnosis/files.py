"""A log file diagnosed: the scanner (``classifier``) over the file in this process, or its
parts in parallel processes (``parallel``) when it is big, plus the run's metrics.jsonl beside
a train.log. Above both, so neither imports the other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from backend.diagnosis.classifier import diagnose_stream, sort_findings
from backend.diagnosis.model import Diagnosis
from backend.diagnosis.nodes import node_of_path
from backend.diagnosis.parallel import diagnose_parallel, jobs_for
from backend.diagnosis.unrecognised import settle_unrecognised
from backend.errors import BadInput
from backend.i18n import _
from backend.paths import LOG as RUN_LOG
from backend.paths import METRICS as METRICS_FILE

if TYPE_CHECKING:
    from backend.preset.schema import Preset


def diagnose_file(
    path: str | Path,
    cancel: threading.Event | None = None,
    progress: Callable[..., None] | None = None,
    preset: Preset | None = None,
) -> Diagnosis:
    """Diagnose a log file of any size. A run's ``train.log`` is read with the run's
    ``metrics.jsonl`` beside it: a NaN loss recorded there (bare ``NaN`` in old runs, ``null``
    next to a logged learning rate in new ones) is a finding even when the log says nothing."""
    target = Path(path).expanduser()
    diagnosis = _diagnose_path(target, cancel, progress, preset)
    node = node_of_path(target)
    if node is not None:
        for finding in diagnosis.findings:
            finding.node = finding.node or node
            finding.nodes = finding.nodes or [node]
    metrics = target.with_name(METRICS_FILE)
    if target.name == RUN_LOG and metrics.is_file():
        _merge_metrics(diagnosis, _diagnose_path(metrics, cancel, None, preset))
    return diagnosis


def _diagnose_path(
    target: Path,
    cancel: threading.Event | None,
    progress: Callable[..., None] | None,
    preset: Preset | None,
) -> Diagnosis:
    try:
        size = target.stat().st_size
        handle = target.open("rb")
    except FileNotFoundError as exc:
        raise BadInput(
            _("log '{target}': no such file: give a log file path or a run id").format(
                target=target
            )
        ) from exc
    except OSError as exc:
        raise BadInput(
            _("log '{target}': cannot read: {strerror}").format(
                target=target, strerror=exc.strerror
            )
        ) from exc
    with handle:
        if jobs_for(size) > 1:  # a big log: its parts scanned in parallel processes
            return diagnose_parallel(target, size, preset, cancel, progress)
        return diagnose_stream(handle, preset=preset, total=size, cancel=cancel, progress=progress)


def _merge_metrics(diagnosis: Diagnosis, from_metrics: Diagnosis) -> None:
    """Add the metrics file's loss_nan finding when the log has none (its lines are
    metrics.jsonl lines, and its text says so)."""
    if any(f.category == "loss_nan" for f in diagnosis.findings):
        return
    for finding in from_metrics.findings:
        if finding.category == "loss_nan":
            finding.text = f"{METRICS_FILE} line {finding.line}: {finding.text}"
            diagnosis.findings.append(finding)
    settle_unrecognised(diagnosis.findings)  # a NaN loss is known: the quote yields to it
    sort_findings(diagnosis.findings)
