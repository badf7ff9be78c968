"""Diagnose a run, not just its log: the one place that joins the log's findings with the run record.

A run killed by the kernel (SIGKILL from the OOM killer), stopped by its launcher dying, or ended
by a full disk often leaves no line in ``train.log`` that the classifier can recognise; its
``status.json`` still says why it ended (``cause``), because the watcher classified the ending.
Reporting "no known failure" for such a run would contradict the run's own record, so the record's
cause becomes a finding whenever the log has no error of its own. The CLI's ``diagnose`` and the
wizard's Troubleshoot both come here, so both see the same findings and the same resume fix.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backend.diagnosis import Diagnosis, Finding, Fix, diagnose_file
from backend.preset.schema import Preset
from backend.runs.rundir import CorruptRun, RunStatus, read_status

RECORD_CATEGORY = "run_record"


@dataclass
class RunDiagnosis:
    """The log's diagnosis plus what the run record says (``status`` is None for a bare log)."""

    diagnosis: Diagnosis
    status: RunStatus | None
    resume: Fix | None = None  # put first among the errors' fixes when a checkpoint exists


def record_finding(status: RunStatus) -> Finding | None:
    """A finding for a failed run's recorded cause; None for runs that did not fail."""
    if status.state != "failed":
        return None
    cause = status.cause or "unknown"
    exit_part = f", exit code {status.exit_code}" if status.exit_code is not None else ""
    message = status.message or "the watcher recorded no message"
    return Finding(
        category=RECORD_CATEGORY,
        severity="error",
        line=0,
        lines=[],
        text=f"status.json: state failed, cause {cause}{exit_part}",
        title=f"The run record says it failed: {cause}",
        explanation=(
            f"{message}. The log has no line the classifier recognises, so this comes from the run "
            "record (status.json), which the watcher wrote when the run ended."
        ),
    )


def diagnose_run(
    run_dir: Path,
    preset: Preset | None = None,
    cancel: threading.Event | None = None,
    progress: Callable[..., None] | None = None,
) -> RunDiagnosis:
    """Findings for a run directory: its log, then the record's cause, then the resume fix."""
    from backend.runs.resume import offer_resume

    log = run_dir / "train.log"
    diagnosis = diagnose_file(log, cancel=cancel, progress=progress, preset=preset)
    try:
        status: RunStatus | None = read_status(run_dir)
    except CorruptRun:
        status = None
    if status is not None and not diagnosis.has_error:
        finding = record_finding(status)
        if finding is not None:
            diagnosis.findings.insert(0, finding)
    resume = offer_resume(run_dir, diagnosis.findings) if status is not None else None
    return RunDiagnosis(diagnosis, status, resume)
