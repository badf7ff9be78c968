"""What a step screen may ask of the wizard App: this interface, never ``tui.app`` itself.

Screens import this Protocol instead of the App class, so there is no import circle through
``screens/base.py`` and ``tui/app.py``; ``TrainwizApp`` satisfies it (mypy checks that where
the App hands itself out).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from backend.preset import Preset
from backend.steps import Machine


class Wizard(Protocol):
    preset: Preset
    preset_source: str
    current_run: Path | None
    machine: Machine
    plan_gpu: str | None

    def propose_preset(self, preset: Preset, *, source: str | None = None,
                       origin: object | None = None, note: str = "") -> None:  # fmt: skip
        """The one way to change the preset; every step screen follows the change."""

    def goto_step(self, step_id: str) -> bool:
        """Show a step (refused, with a message, while the current one has invalid fields)."""

    def set_check_results(self, results: list, *, complete: bool = True) -> None:  # type: ignore[type-arg]
        """The Checks step's latest results: they decide what each step's blockers are
        (``complete=False``: those landed so far, the rest still running)."""

    def action_save_preset(self) -> None: ...

    def refuse_if_form_invalid(self, what: str) -> bool:
        """True (said, focus on the field) while a field shows a value the preset lacks."""
