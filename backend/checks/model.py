"""What a check reports, and which wizard steps a failure holds back.

A failed check blocks only the steps it names, so a user with no Docker daemon can still
download the model while fixing Docker: the screen asks ``blocked_steps`` before moving on.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from backend.step_ids import BLOCKABLE, StepId

Status = Literal["ok", "warn", "fail", "skip"]
# The step vocabulary is the step table's (backend.step_ids); checks block its blockable steps.
Step = StepId
STEPS: tuple[Step, ...] = BLOCKABLE
STATUS_ORDER: dict[str, int] = {"fail": 0, "warn": 1, "ok": 2, "skip": 3}


class CheckResult(BaseModel):
    """One finding: what was seen, why it matters for this preset, and the exact fix."""

    id: str
    title: str = ""
    status: Status
    summary: str
    detail: str = ""
    why: str = ""
    fix: str = ""
    blocks: list[Step] = Field(default_factory=list)
    duration_s: float = 0.0
    data: dict[str, Any] = Field(
        default_factory=dict, description="structured facts (versions, sizes) for scripts"
    )


def blocked_steps(results: list[CheckResult]) -> dict[Step, list[str]]:
    """Each wizard step held back by at least one failed check, with the ids of those checks.

    Warnings never block: the user may continue past them. The step table (backend.steps)
    asks this same function.
    """
    out: dict[Step, list[str]] = {}
    for step_id in BLOCKABLE:
        ids = [r.id for r in results if r.status == "fail" and step_id in r.blocks]
        if ids:
            out[step_id] = ids
    return out


def worst(results: list[CheckResult]) -> Status:
    """The most severe status in a set (``ok`` for an empty set)."""
    if not results:
        return "ok"
    status = min((r.status for r in results), key=lambda s: STATUS_ORDER[s])
    return "ok" if status == "skip" else status


def finding(status: Status, summary: str, **fields: Any) -> CheckResult:
    """A result whose id, title and duration the runner fills in."""
    return CheckResult(id="", status=status, summary=summary, **fields)
