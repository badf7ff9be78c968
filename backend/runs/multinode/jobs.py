"""A run by its Slurm job id: ``trainwiz attach 1234`` (and ``stop``/``logs``) from any login.

A job id is first looked up in this TRAINWIZ_HOME's records (status.json's ``slurm_job_id``).
When none has it — the job was submitted from another login or another TRAINWIZ_HOME — Slurm
itself is asked (``scontrol show job``): trainwiz submits every job as ``trainwiz-<run id>``
with ``--comment=trainwiz-run=<run dir>`` and its batch log in the run dir, so the job names
its own run directory (on the cluster's shared file system, as Slurm homes are). That run is
followed like a local one; a job that is not trainwiz's is refused with a clear error.
"""

from __future__ import annotations

import re
from pathlib import Path

from backend.errors import BadInput
from backend.i18n import _
from backend.rundir import STATUS, CorruptRun, list_run_dirs, read_status
from backend.runs.multinode.slurm import _query

COMMENT = "trainwiz-run="
_JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+)?")
# scontrol -o prints Key=value pairs separated by spaces; a value ends where the next key starts.
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9:/_]*)=(.*?)(?=\s[A-Za-z][A-Za-z0-9:/_]*=|$)")


def is_job_id(ref: str) -> bool:
    return bool(_JOB_ID.fullmatch(ref))


def local_run(job_id: str) -> Path | None:
    """The run of this TRAINWIZ_HOME whose record has that Slurm job id."""
    for run_dir in reversed(list_run_dirs()):
        try:
            extra = read_status(run_dir).model_extra or {}
        except (CorruptRun, OSError, ValueError):
            continue
        if str(extra.get("slurm_job_id", "")) == job_id:
            return run_dir
    return None


def job_fields(job_id: str) -> dict[str, str]:
    """``scontrol -o show job`` as a dict ({} when Slurm does not know the job or is absent)."""

    shown = _query(["scontrol", "-o", "show", "job", job_id])
    return (
        {key: value.strip() for key, value in _FIELD.findall(shown.splitlines()[0])}
        if shown
        else {}
    )


def run_dir_of_job(job_id: str) -> Path:
    """The run directory a trainwiz job names (its comment, else its batch log's folder)."""
    fields = job_fields(job_id)
    if not fields:
        raise BadInput(
            _(
                "'{job}' is neither a run here nor a Slurm job Slurm knows (scontrol show job "
                "{job}): see 'trainwiz runs' or squeue"
            ).format(job=job_id)
        )
    name = fields.get("JobName", "")
    comment = fields.get("Comment", "")
    if comment.startswith(COMMENT):
        run_dir = Path(comment[len(COMMENT) :])
    else:
        stdout = Path(fields.get("StdOut", ""))
        run_dir = stdout.parent
        if not (name.startswith("trainwiz-") and stdout.name == f"slurm-{job_id}.out"):
            raise BadInput(
                _(
                    "Slurm job {job} ('{name}') is not a trainwiz run: trainwiz follows the "
                    "jobs it submitted (named trainwiz-<run id>)"
                ).format(job=job_id, name=name)
            )
    if name != f"trainwiz-{run_dir.name}":
        raise BadInput(
            _(
                "Slurm job {job} ('{name}') is not a trainwiz run: trainwiz follows the jobs it "
                "submitted (named trainwiz-<run id>)"
            ).format(job=job_id, name=name)
        )
    if not (run_dir / STATUS).is_file():
        raise BadInput(
            _(
                "Slurm job {job} is trainwiz run {run}, but its run directory {dir} cannot be "
                "read from this login: put TRAINWIZ_HOME on the cluster's shared file system"
            ).format(job=job_id, run=run_dir.name, dir=run_dir)
        )
    try:
        recorded = str((read_status(run_dir).model_extra or {}).get("slurm_job_id", ""))
    except (CorruptRun, OSError, ValueError):
        recorded = job_id  # a corrupt record is still that run's: refresh reports it
    if recorded and recorded != job_id:
        raise BadInput(
            _("Slurm job {job} names run {dir}, but that run records job {other}").format(
                job=job_id, dir=run_dir, other=recorded
            )
        )
    return run_dir.resolve()
