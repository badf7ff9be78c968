"""Attempts of a run: resume from the last complete checkpoint, by hand or after a crash.

A run is one directory and one metrics series however often it is restarted. Each start of the
training is an *attempt* (1 = the launch), recorded in ``attempts.json`` with how it started
(launch, resume, auto), the checkpoint step it resumed from, and when it ended, its exit code and
cause (the watcher's exit message plus the diagnosis classifier's top finding of that attempt's
part of train.log). The entry resumes on its own from the newest complete checkpoint in
output_dir that passes the structural checks (``backend.entry.checkpoints.resume_choice``, the
one definition of complete and whole, which this module applies too, so the CLI names the
checkpoint the entry will take and each newer one it skips), so an attempt is just the run's
launch.json executed again with ``TRAINWIZ_ATTEMPT`` set.

``trainwiz resume RUN`` records a pending attempt and starts a new watcher; the watcher's
``run_attempts`` runs it and, with ``launch.max_restarts: N``, resumes automatically after a
failure up to N times (never after a stop, never without a complete checkpoint).
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from backend.entry.checkpoints import ResumeChoice, complete_checkpoints, resume_choice
from backend.errors import BadInput, TrainwizError
from backend.i18n import _
from backend.preset.runpreset import run_preset
from backend.preset.schema import map_container_path
from backend.procinfo import find_processes
from backend.rundir import (
    FINAL_STATES,
    LAUNCH,
    LOG,
    PRESET,
    STATUS,
    STOP_REQUEST,
    RunDir,
    RunStatus,
    read_attempts,
    read_status,
    update_status,
    write_attempts,
)
from backend.runs import oomkills
from backend.runs.control import refresh
from backend.runs.fallback import fall_back
from backend.runs.procs import start_watcher
from backend.runs.spec import next_attempt_spec

if TYPE_CHECKING:
    from backend.diagnosis.model import Fix

_CAUSE_BYTES = 4 << 20  # the tail of one attempt's log that the classifier reads


def output_dir(run_dir: Path) -> Path | None:
    """Where the run's trainer writes checkpoints, as a host path (None: only the container
    can see it); a copied run directory's own (``run_preset``), never the original's."""
    try:
        preset = run_preset(run_dir)
    except Exception:
        return None
    out = preset.training.output_dir
    if preset.launch.runner == "docker":
        inside = Path(out).resolve() if out.startswith("/") else None
        if inside is not None and inside.is_relative_to(run_dir.resolve()):
            return Path(out)  # the run dir is mounted at its own path (backend/plan/docker_args)
        mapped = map_container_path(out, preset.container.volumes, preset.launch.workdir)
        return Path(mapped) if mapped != out or not out.startswith("/") else None
    if os.path.isabs(out):
        return Path(out)
    try:
        cwd = RunDir(run_dir).launch_spec()["train"]["cwd"]
    except (KeyError, TypeError):
        cwd = preset.launch.workdir or os.getcwd()
    return Path(cwd) / out


def checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """The run's complete checkpoints (step, path), oldest first."""
    out = output_dir(run_dir)
    return complete_checkpoints(out) if out is not None else []


def checkpoint_choice(run_dir: Path) -> ResumeChoice:
    """The checkpoint a resume of the run starts from and the newer ones it skips, with why:
    the entry's own decision (``resume_choice``) on the run's output_dir seen from here."""
    out = output_dir(run_dir)
    return resume_choice(out) if out is not None else ResumeChoice(None, [])


def latest_checkpoint(run_dir: Path) -> tuple[int, Path] | None:
    """The newest checkpoint a resume can start from: complete and whole."""
    return checkpoint_choice(run_dir).chosen


def max_restarts(run_dir: Path) -> int:
    try:
        return int(run_preset(run_dir).launch.max_restarts)
    except Exception:
        return 0


def _nnodes(run_dir: Path) -> int:
    try:
        return int(run_preset(run_dir).launch.nnodes)
    except Exception:
        return 1


def begin_attempt(run_dir: Path, how: str, **fields: Any) -> dict[str, Any]:
    """Record the start of an attempt; a pending one (from ``trainwiz resume``) is reused.
    ``fields`` join the record (an OOM fallback's candidate and the cause it follows)."""
    attempts = read_attempts(run_dir)
    choice = checkpoint_choice(run_dir)
    latest = choice.chosen
    if attempts and attempts[-1].get("pending"):
        record = attempts[-1]
        record.pop("pending", None)
    else:
        record = {"attempt": len(attempts) + 1, "how": how if attempts else "launch"}
        attempts.append(record)
    record.update(fields)
    record["resumed_from"] = latest[0] if latest and record["attempt"] > 1 else None
    record.pop("skipped", None)
    if record["attempt"] > 1 and choice.skipped:
        record["skipped"] = choice.records()
    record["started_at"] = time.time()
    if _nnodes(run_dir) == 1:  # was a SIGKILL the OOM killer's? (backend/runs/oomkills.py)
        record.update(oomkills.at_start())
    log = run_dir / LOG
    record["log_offset"] = log.stat().st_size if log.is_file() else 0
    write_attempts(run_dir, attempts)
    return record


def end_attempt(run_dir: Path, number: int, code: int | None, message: str) -> dict[str, Any]:
    """Record how an attempt ended, with the classifier's name for the failure when it has one."""
    attempts = read_attempts(run_dir)
    record = next((a for a in attempts if a.get("attempt") == number), None)
    if record is None:
        record = {"attempt": number}
        attempts.append(record)
    record.update(ended_at=time.time(), exit_code=code, cause=message, **oomkills.at_end())
    if code not in (0, None):
        found = _diagnosed_cause(run_dir, int(record.get("log_offset") or 0), record)
        if found:
            record["diagnosis_category"], record["diagnosis"], quote = found
            if quote:  # no category: the line that ended it (backend.runs.fallback.final_record)
                record["diagnosis_quote"] = quote
    write_attempts(run_dir, attempts)
    return record


def _diagnosed_cause(
    run_dir: Path, offset: int, record: dict[str, Any] | None = None
) -> tuple[str, str, str | None] | None:
    """(category, "category: title", the quoted line of a failure no category knows)."""
    from backend.diagnosis import diagnose_text  # deferred: classifier tables, only on failure
    from backend.diagnosis.unrecognised import (  # deferred: as above, only on failure
        UNRECOGNISED,
        decisive_text,
    )

    try:
        with open(run_dir / LOG, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(offset, size - _CAUSE_BYTES))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    found = diagnose_text(text)
    oomkills.relabel_findings(found.findings, record)
    top = found.top
    if top is None:
        return None
    quote = decisive_text(top) if top.category == UNRECOGNISED else None
    return top.category, f"{top.category}: {top.title}", quote


def attempt_spec(
    run_dir: Path, spec: dict[str, Any], record: dict[str, Any], log: IO[bytes]
) -> dict[str, Any]:
    """The spec an attempt executes: the launch's for attempt 1, else a new one
    (``backend.runs.spec.next_attempt_spec``: port decided again, ``TRAINWIZ_ATTEMPT`` set),
    recorded as launch.<n>.json. If the run's preset cannot be read back, the previous spec
    runs again with only its attempt number changed, and the log says so."""
    number = int(record["attempt"])
    if number == 1:
        return spec
    try:
        return next_attempt_spec(run_dir, spec, number, record.get("how") or "auto")
    except Exception as exc:  # never lose the attempt over its record
        _note(log, f"attempt {number}: cannot rebuild its spec ({exc}); rerunning the last one")
    out = copy.deepcopy(spec)
    env = {"TRAINWIZ_ATTEMPT": str(number)}
    for step in [
        out.get("train") or {},
        *(s for s in out.get("exec", []) if s.get("id") == "train"),
    ]:
        if step:
            step["env"] = {**step.get("env", {}), **env}
    docker = out.get("docker") or {}
    if docker:
        docker["environment"] = {**docker.get("environment", {}), **env}
    out.update(attempt=number, kind=record.get("how") or "auto")
    return out


def run_attempts(
    run_dir: Path,
    spec: dict[str, Any],
    log: IO[bytes],
    train_once: Callable[[dict[str, Any]], int],
    final_state: Callable[[int], tuple[str, str]],
) -> int:
    """The watcher's training step: run one attempt, and resume after a failure while
    ``launch.max_restarts`` allows and a complete checkpoint exists; an out-of-memory in the
    first steps restarts on the next OOM fallback candidate instead (``backend.runs.fallback``;
    bounded by the candidates, not counted as a restart). Returns the last exit code."""
    record = begin_attempt(run_dir, "launch")
    limit = max_restarts(run_dir)
    while True:
        number = int(record["attempt"])
        if number > 1 and record.get("resumed_from") is not None:
            _note(log, f"attempt {number}: resuming from step {record.get('resumed_from')}")
        for item in record.get("skipped") or []:
            _note(log, f"attempt {number}: checkpoint-{item['step']} skipped: {item['why']}")
        spec = attempt_spec(run_dir, spec, record, log)
        code = train_once(spec)
        state, message = final_state(code)
        ended = end_attempt(run_dir, number, code, message)
        if state != "failed" or (run_dir / STOP_REQUEST).exists():
            return code
        switched = fall_back(run_dir, spec, ended, read_attempts(run_dir), log)
        if switched is not None:
            spec, fields = switched
            record = begin_attempt(run_dir, "oom_fallback", **fields)
            continue
        autos = sum(1 for a in read_attempts(run_dir) if a.get("how") == "auto")
        if autos >= limit:
            return code
        latest = latest_checkpoint(run_dir)
        if latest is None:
            _note(log, f"attempt {number} failed ({message}); no complete checkpoint to resume")
            return code
        _note(log, f"attempt {number} failed ({message}); restart {autos + 1} of {limit}")
        update_status(
            run_dir,
            state="running",
            message=f"attempt {number + 1}: resuming from checkpoint-{latest[0]} after {message}",
        )
        record = begin_attempt(run_dir, "auto")


def _note(log: IO[bytes], text: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    log.write(f"[trainwiz {stamp}] {text}\n".encode())
    log.flush()


def trainer_pids(run_dir: Path) -> list[int]:
    """Live processes running this run's entry (torchrun and its workers), from their command
    lines. Wider on purpose than the run's process tree (``procs.run_processes``, found by
    environment): a trainer from before that marker existed, or one that lost it, must still
    keep a resume from putting a second trainer on the same output_dir."""
    entry = str(run_dir / "entry" / "train_entry.py").encode()
    return sorted(p.pid for p in find_processes(cmdline=entry, skip=()))


def state_refusal(run_id: str, state: str) -> str | None:
    """Why a run in ``state`` cannot resume (None: its state allows it): a finished run's final
    model is saved, another attempt would retrain; a live one must be stopped first."""
    if state == "finished":
        return _("the run finished: nothing to resume")
    if state not in FINAL_STATES:
        return _(
            "the run is {state}: resume is for a failed or stopped run (stop it first: "
            "trainwiz stop {run_id})"
        ).format(run_id=run_id, state=state)
    return None


def check_resumable(run_dir: Path) -> tuple[RunStatus, tuple[int, Path]]:
    """The run's status and the checkpoint a resume would start from, or BadInput saying why
    it cannot resume (a finished run, a live run, training processes still alive, no
    launch.json, no complete and whole checkpoint). Reads only. The one decision: the CLI's
    refusal and the wizard's disabled Resume (``offers.resume_offer``) both come from here."""
    status, choice = _resumable(run_dir)
    assert choice.chosen is not None  # _resumable refuses a run without one
    return status, choice.chosen


def _resumable(run_dir: Path) -> tuple[RunStatus, ResumeChoice]:
    status = refresh(run_dir)
    why = state_refusal(status.run_id, status.state)
    if why is not None:
        raise BadInput(why)
    alive = trainer_pids(run_dir)
    if alive:  # torchrun's workers run in their own session: one can outlive its torchrun
        raise BadInput(
            _(
                "run {run_id}: its training process(es) {items} are still running: stop them "
                "first (kill PID), or two trainers would share output_dir"
            ).format(run_id=status.run_id, items=", ".join(map(str, alive)))
        )
    if not (run_dir / LAUNCH).is_file():
        raise BadInput(
            _("run {run_id} has no {LAUNCH}: it cannot be started again").format(
                run_id=status.run_id, LAUNCH=LAUNCH
            )
        )
    choice = checkpoint_choice(run_dir)
    if choice.chosen is None:
        where = output_dir(run_dir)
        message = _(
            "run {run_id}: no complete checkpoint in {where}: nothing to resume from; start "
            "it again with 'trainwiz launch {value}' (set training.save_steps or "
            "save_minutes so the next run can resume)"
        ).format(run_id=status.run_id, where=where, value=run_dir / PRESET)
        if choice.skipped:
            message += " " + _("(skipped: {items})").format(items=choice.text())
        raise BadInput(message)
    return status, choice


def prepare_resume(run_dir: Path) -> dict[str, Any]:
    """Check that the run can resume and record the pending attempt, with the newer
    checkpoints it skips and why; the caller starts the watcher. Refuses a live run and a run
    without a complete, whole checkpoint (nothing is changed)."""
    status, choice = _resumable(run_dir)
    latest = choice.chosen
    assert latest is not None  # _resumable refuses a run without one
    attempts = read_attempts(run_dir) or [
        {"attempt": 1, "how": "launch", "ended_at": status.ended_at, "cause": status.message}
    ]
    number = int(attempts[-1].get("attempt", len(attempts))) + 1
    record = {"attempt": number, "how": "resume", "pending": True, "resumed_from": latest[0]}
    message = f"attempt {number}: resuming from checkpoint-{latest[0]}"
    if choice.skipped:
        record["skipped"] = choice.records()
        message += f" (skipped {choice.text()})"
    attempts.append(record)
    write_attempts(run_dir, attempts)
    (run_dir / STOP_REQUEST).unlink(missing_ok=True)
    update_status(
        run_dir,
        state="starting",
        exit_code=None,
        ended_at=None,
        started_at=None,  # with watcher_pid None: "being started" to refresh(), not "dead"
        watcher_pid=None,
        message=message,
    )
    return record


def resume(run_dir: Path, ack_timeout: float = 15.0) -> dict[str, Any]:
    """``trainwiz resume``: the same run, next attempt, from the last complete checkpoint."""
    record = prepare_resume(run_dir)
    start_watcher(run_dir)
    deadline = time.monotonic() + ack_timeout
    while time.monotonic() < deadline:
        status = read_status(run_dir)
        if status.watcher_pid is not None or status.final:
            return record
        time.sleep(0.05)
    raise TrainwizError(
        _("the watcher of run {name} did not start within {ack_timeout:.0f} s: see {value}").format(
            name=run_dir.name, ack_timeout=ack_timeout, value=run_dir / "watcher.log"
        )
    )


def resume_fix(run_dir: Path) -> Fix | None:
    """The diagnosis's way out when a run can resume: its last complete checkpoint is kept, so
    a fix that needs no preset change costs minutes (``trainwiz resume``), not a relaunch."""
    from backend.diagnosis.model import Fix  # deferred: backend.diagnosis loads the classifier

    latest = latest_checkpoint(run_dir)
    if latest is None:
        return None
    return Fix(
        _("Resume from checkpoint-{step}: trainwiz resume {run}").format(
            step=latest[0], run=run_dir.name
        ),
        _(
            "the run continues at step {step} with its optimizer and data order, instead of "
            "a relaunch from step 0"
        ).format(step=latest[0]),
    )


def offer_resume(run_dir: Path, findings: list[Any]) -> Fix | None:
    """Put the resume fix first among each error finding's fixes when the run has a complete
    checkpoint (``trainwiz diagnose`` and the wizard's Troubleshoot both call this); returns it."""
    if not (run_dir / STATUS).is_file():
        return None
    fix = resume_fix(run_dir)
    if fix is None:
        return None
    for finding in findings:
        if finding.severity == "error":
            finding.fixes.insert(0, fix)
    return fix
