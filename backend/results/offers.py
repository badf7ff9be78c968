"""What a user can do next with a run the wizard shows: resume it, chat with its model.

The wizard's Monitor shows both actions for every run, enabled or disabled *with the reason*;
the reasons are the CLI's own refusals (``check_resumable`` for ``trainwiz resume``,
``model_dir`` for ``trainwiz chat``), so the wizard and the CLI never disagree about a run.
Everything here only reads the run: the state is status.json as the Monitor shows it (a
resume's own check, ``check_resumable``, then refreshes a failed or stopped run's record).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from backend.errors import BadInput, TrainwizError
from backend.i18n import _
from backend.rundir import LAUNCH, read_status

RESUMABLE_STATES = ("failed", "stopped")


@dataclass(frozen=True)
class Offer:
    """One action: ``available`` or not, and ``reason`` (why not, or what it will use)."""

    available: bool
    reason: str
    checkpoint: int | None = None
    path: Path | None = None


@dataclass(frozen=True)
class RunOffers:
    run_id: str
    state: str
    attempt: int  # the attempt shown now (1 = the launch)
    resumed_from: int | None
    resume: Offer
    chat: Offer
    runner: str = ""  # what the resume confirmation says will run the next attempt


def _first_line(exc: TrainwizError) -> str:
    problems = getattr(exc, "problems", None) or [str(exc)]
    return str(problems[0])


def resume_offer(run_dir: Path, state: str) -> Offer:
    """Resume for a failed or stopped run with a complete checkpoint; the reason it is not
    offered is ``state_refusal``'s or ``check_resumable``'s, word for word what ``trainwiz
    resume`` refuses with."""
    from backend.runs.resume import (  # deferred: ~50 modules, not with the monitor
        check_resumable,
        state_refusal,
    )

    why = state_refusal(run_dir.name, state)  # the Monitor's state: no refresh, nothing written
    if why is not None:
        return Offer(False, why)
    try:
        _status, (step, path) = check_resumable(run_dir)
    except BadInput as exc:
        return Offer(False, _first_line(exc))
    return Offer(True, _("from checkpoint-{step}").format(step=step), checkpoint=step, path=path)


def chat_offer(run_dir: Path, state: str) -> Offer:
    """Chat once the run has ended, with the model ``trainwiz chat`` would load."""
    from backend.results.weights import model_dir  # deferred: ~50 modules, not with the monitor

    if state not in ("finished", *RESUMABLE_STATES):
        return Offer(False, _("the run is {state}: chat once it has ended").format(state=state))
    try:
        path = model_dir(run_dir)
    except BadInput as exc:
        return Offer(False, _first_line(exc))
    step = int(path.name.split("-")[1]) if path.name.startswith("checkpoint-") else None
    what = f"checkpoint-{step}" if step is not None else _("the final model")
    return Offer(True, what, checkpoint=step, path=path)


def run_offers(run_dir: Path) -> RunOffers:
    """Resume and chat for ``run_dir``, each with its reason; what the confirmation shows."""
    from backend.runs.resume import read_attempts  # deferred: ~50 modules, not with the monitor

    try:
        status = read_status(run_dir)
        state = status.state
        run_id = status.run_id
    except (TrainwizError, OSError, ValueError) as exc:
        why = _("the run's status cannot be read: {error}").format(error=exc)
        off = Offer(False, why)
        return RunOffers(run_dir.name, "unknown", 1, None, off, off)
    attempts = read_attempts(run_dir)
    current = attempts[-1] if attempts else {}
    runner: str = status.runner
    try:
        runner = str(json.loads((run_dir / LAUNCH).read_text(encoding="utf-8"))["runner"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return RunOffers(
        run_id=run_id,
        state=state,
        attempt=int(current.get("attempt") or 1),
        resumed_from=current.get("resumed_from"),
        resume=resume_offer(run_dir, state),
        chat=chat_offer(run_dir, state),
        runner=runner,
    )
