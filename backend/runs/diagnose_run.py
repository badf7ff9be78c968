"""Diagnose a run, not just its log: the one place that joins the log's findings with the run record.

A run killed by the kernel (SIGKILL from the OOM killer), stopped by its launcher dying, or ended
by a full disk often leaves no line in ``train.log`` that the classifier can recognise; its
``status.json`` still says why it ended (``cause``), because the watcher classified the ending.
Reporting "no known failure" for such a run would contradict the run's own record, so the record's
cause becomes a finding whenever the log has no error of a known category: first, before a
quoted exception no category knows (``unrecognised_failure``) when the watcher knew the cause,
and not at all when the record only says "exit code N" and the log quotes what ended it. The
CLI's ``diagnose`` and the wizard's Troubleshoot both come here, so both see the same findings
and the same resume fix.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backend.diagnosis import Diagnosis, Finding, Fix, diagnose_file, sort_findings
from backend.diagnosis.nodes import cross_node, merge_node_log
from backend.diagnosis.unrecognised import known_error, settle_unrecognised
from backend.i18n import _
from backend.preset.schema import Preset
from backend.rundir import LOG, NODES, CorruptRun, RunDir, RunStatus, read_status
from backend.runs.memfixes import judge_memory_fixes
from backend.runs.oomkills import relabel_findings
from backend.runs.resume import offer_resume, read_attempts
from backend.runs.summary import shown_message

RECORD_CATEGORY = "run_record"
NODE_LOGS = NODES  # a Slurm run's own per-node logs: <run>/nodes/node<i>-<host>.log


@dataclass(frozen=True)
class DiagnosableRun:
    """A run Troubleshoot can diagnose: its log (train.log, perhaps not there when only the
    nodes' logs are), its preset when it has one, and its recorded state."""

    run_id: str
    log: Path
    preset: Path | None
    state: str


def diagnosable_runs() -> list[DiagnosableRun]:
    """Runs with a log to read, newest first (``RunDir.all``, the one lister of run dirs).

    The state is status.json's as written (no refresh: this is read on the UI's first paint);
    a run without a readable status is "unknown"."""
    out = []
    for run in reversed(RunDir.all()):
        if not run.diagnosable():
            continue
        status = run.status_dict() or {}
        preset = run.preset_file
        out.append(
            DiagnosableRun(
                run.run_id,
                run.log,
                preset if preset.is_file() else None,
                str(status.get("state", "unknown")),
            )
        )
    return out


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
    message = shown_message(status.message) or _("the watcher recorded no message")
    return Finding(
        category=RECORD_CATEGORY,
        severity="error",
        line=0,
        lines=[],
        text=f"status.json: state failed, cause {cause}{exit_part}",
        title=_("The run record says it failed: {cause}").format(cause=cause),
        explanation=_(
            "{message}. The log has no line the classifier recognises, so this comes from the run "
            "record (status.json), which the watcher wrote when the run ended."
        ).format(message=message),
    )


def diagnose_run(
    run_dir: Path,
    preset: Preset | None = None,
    cancel: threading.Event | None = None,
    progress: Callable[..., None] | None = None,
) -> RunDiagnosis:
    """Findings for a run directory: its log, then the record's cause, then the resume fix."""
    log = run_dir / LOG
    node_logs = RunDir(run_dir).node_logs()
    if log.is_file() or not node_logs:
        diagnosis = diagnose_file(log, cancel=cancel, progress=progress, preset=preset)
    else:  # the watcher never copied the nodes' logs into train.log
        diagnosis = Diagnosis()
    # Every node's own log: a node whose lines never reached train.log (the watcher stopped,
    # the run was cancelled) still names its failure and itself.
    for path in node_logs:
        if cancel is not None and cancel.is_set():
            break
        extra = diagnose_file(path, cancel=cancel, preset=preset)
        merge_node_log(diagnosis.findings, f"{NODE_LOGS}/{path.name}", extra.findings)
    if node_logs:
        sort_findings(diagnosis.findings)
        cross_node(diagnosis.findings)
    try:
        status: RunStatus | None = read_status(run_dir)
    except CorruptRun:
        status = None
    attempts = read_attempts(run_dir)  # a SIGKILL the kernel did not send is not host_oom
    relabel_findings(diagnosis.findings, attempts[-1] if attempts else None)
    settle_unrecognised(diagnosis.findings)  # a node log's known error outranks a mere quote
    if status is not None and not known_error(diagnosis.findings):
        finding = record_finding(status)
        # A quoted exception says more than "exit code 1"; a cause the watcher knew says more.
        quoted = diagnosis.has_error and status.cause in (None, "exit_code")
        if finding is not None and not quoted:
            diagnosis.findings.insert(0, finding)
    judge_memory_fixes(diagnosis.findings, preset)  # the planner's word on memory fixes
    resume = offer_resume(run_dir, diagnosis.findings) if status is not None else None
    return RunDiagnosis(diagnosis, status, resume)
