"""The wizard's steps, once: ids, titles, what each needs, and what makes it ready.

Everything that speaks of steps reads this table: the step bar and navigation (tui), the
checks' ``blocks`` (``backend.checks.model``), replay's stage names (``backend.replay``),
launch's prepare (through ``model_ready`` / ``environment_ready``) and the Launch screen's
per-step readiness. No Textual here.

A step can always be *opened*: "blocked" means its action (pull, build, launch) cannot run on
this machine, and the reasons say which failed checks hold it back and how to fix them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from backend.checks.model import blocked_steps
from backend.i18n import N_
from backend.images.ready import environment_ready
from backend.step_ids import BLOCKABLE as _BLOCKABLE
from backend.step_ids import STEP_IDS as _STEP_IDS
from backend.step_ids import StepId

if TYPE_CHECKING:
    from backend.checks.model import CheckResult
    from backend.preset.schema import Preset

State = Literal["ready", "needs-action", "blocked"]


@dataclass(frozen=True)
class Machine:
    """What is known about this machine: the last check results (None: not run yet).

    ``complete`` is False while the checks are still running: a failure already landed
    disables its step at once (Checks says "Disabled here" then), the rest follow."""

    checks: list[CheckResult] | None = None
    complete: bool = True


@dataclass(frozen=True)
class Readiness:
    state: State
    reasons: list[str] = field(default_factory=list)
    blocking_checks: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return self.state == "ready"


@dataclass(frozen=True)
class Step:
    id: StepId
    title: str  # English (N_); shown through _()
    short: str  # for a narrow step bar
    action: str  # what makes the step ready, in words
    gated_action: str  # the action a failed check disables ("" = nothing is gated)
    replay: str | None  # the stage name `trainwiz replay --from/--until` uses
    blockable: bool  # checks may name it in ``blocks``
    ready: Callable[[Preset, Machine], Readiness]

    @property
    def number(self) -> int:
        return STEP_IDS.index(self.id) + 1


def blockers(step_id: str, machine: Machine) -> list[CheckResult]:
    """The failed checks that hold this step's action back (warnings never do)."""
    if machine.checks is None:
        return []
    return [r for r in machine.checks if r.status == "fail" and step_id in r.blocks]


def _blocked(step_id: str, machine: Machine) -> Readiness | None:
    found = blockers(step_id, machine)
    if not found:
        return None
    reasons = [f"{r.id}: {r.summary}" + (f" — fix: {r.fix}" if r.fix else "") for r in found]
    return Readiness("blocked", reasons, [r.id for r in found])


def _checks_ready(preset: Preset, machine: Machine) -> Readiness:
    if machine.checks is None:
        return Readiness("needs-action", ["the checks have not run yet"])
    failed = [r.id for r in machine.checks if r.status == "fail"]
    if failed:
        return Readiness("needs-action", [f"failed: {', '.join(failed)}"])
    if not machine.complete:
        return Readiness("needs-action", ["the checks are still running"])
    return Readiness("ready")


def _model_ready(preset: Preset, machine: Machine) -> Readiness:
    from backend.model.ready import model_ready  # deferred: `--help` skips the model clients

    found = model_ready(preset)
    blocked = _blocked("model", machine)
    if blocked is not None and not found.ready:
        return blocked
    return Readiness("ready" if found.ready else "needs-action", [found.reason])


def _image_ready(preset: Preset, machine: Machine) -> Readiness:
    blocked = _blocked("image", machine)
    if environment_ready(preset):
        what = "environment image" if preset.launch.runner == "docker" else "training venv"
        return Readiness("ready", [f"{what} present"])
    if blocked is not None:
        return blocked
    what = "environment image" if preset.launch.runner == "docker" else "training venv"
    return Readiness("needs-action", [f"no {what} yet: build it (or Launch builds it first)"])


def _always_ready(preset: Preset, machine: Machine) -> Readiness:
    return Readiness("ready")


def _launch_ready(preset: Preset, machine: Machine) -> Readiness:
    blocked = _blocked("launch", machine)
    if blocked is not None:
        return blocked
    before = [step(s).ready(preset, machine) for s in ("model", "image")]
    missing = [r for b in before if not b.ready for r in b.reasons]
    if missing:
        return Readiness("needs-action", [f"runs first: {m}" for m in missing])
    return Readiness("ready")


STEPS: tuple[Step, ...] = (
    Step("checks", N_("Checks"), N_("Checks"), N_("run the checks (r) and fix what fails"), "",
         "checks", False, _checks_ready),
    Step("model", N_("Model"), N_("Model"), N_("fetch the model (f)"), N_("fetch"), "model", True,
         _model_ready),
    Step("image", N_("Image"), N_("Image"), N_("build the environment (b)"),
         N_("pull and build"), "environment", True, _image_ready),
    Step("hyperparams", N_("Hyperparameters"), N_("Params"), N_("edit the form; plan for a GPU"),
         "", None, False, _always_ready),
    Step("launch", N_("Launch"), N_("Launch"), N_("launch (l)"), N_("launch"), "launch", True,
         _launch_ready),
    Step("monitor", N_("Monitor"), N_("Monitor"), N_("follow a run"), "", "follow", False,
         _always_ready),
)  # fmt: skip
STEP_IDS: tuple[StepId, ...] = tuple(s.id for s in STEPS)
BLOCKABLE: tuple[StepId, ...] = tuple(s.id for s in STEPS if s.blockable)
# The leaf's literals (what the checks block by) are this table's: one vocabulary.
assert STEP_IDS == _STEP_IDS and BLOCKABLE == _BLOCKABLE, "backend/step_ids.py != the table"
REPLAY_STAGES: tuple[str, ...] = tuple(s.replay for s in STEPS if s.replay)


def step(step_id: str) -> Step:
    for candidate in STEPS:
        if candidate.id == step_id:
            return candidate
    raise KeyError(f"unknown step {step_id!r}; steps are {', '.join(STEP_IDS)}")


__all__ = ["BLOCKABLE", "REPLAY_STAGES", "STEPS", "STEP_IDS", "Machine", "Readiness", "Step"]
__all__ += ["StepId", "blocked_steps", "blockers", "step"]
