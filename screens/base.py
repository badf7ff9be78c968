"""The base of every wizard step screen: header, step indicator, body, footer.

A step screen only writes ``compose_body``; the frame, the navigation bindings and the preset
access live here so that every step behaves the same. Screens stay thin: anything that blocks
(checks, downloads, builds, launches) runs in a thread worker calling ``backend``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual.app import ComposeResult
from textual.containers import Container
from textual.screen import Screen
from textual.widgets import Footer, Header

from widgets.step_indicator import StepIndicator

if TYPE_CHECKING:
    from backend.preset import Preset
    from tui.app import TrainwizApp


class StepScreen(Screen[None]):
    """One wizard step. Subclasses set STEP_ID and implement ``compose_body``."""

    STEP_ID: ClassVar[str] = ""

    def __init__(self, *, step_id: str | None = None) -> None:
        super().__init__()
        self.step_id = step_id or self.STEP_ID

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield StepIndicator(self.step_id, id="steps")
        with Container(id="step-body"):
            yield from self.compose_body()
        yield Footer()

    def compose_body(self) -> ComposeResult:
        raise NotImplementedError

    @property
    def wizard(self) -> TrainwizApp:
        from tui.app import TrainwizApp

        assert isinstance(self.app, TrainwizApp)
        return self.app

    @property
    def preset(self) -> Preset:
        return self.wizard.preset

    def preset_changed(self) -> None:
        """Called when the app loads another preset; the default rebuilds the body."""
        if self.is_mounted:
            self.refresh(recompose=True)
