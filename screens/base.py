"""The base of every wizard step screen: header, step bar, blockers, body, footer.

A step screen only writes ``compose_body``; the frame, the preset access and the reactions to a
changed preset or new check results live here so that every step behaves the same. Screens stay
thin: anything that blocks (checks, downloads, builds, launches) runs in a thread worker calling
``backend``. Screens reach the App only through ``screens.wizard.Wizard`` (no ``tui`` import).
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, ClassVar, cast

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.containers import Container
from textual.screen import Screen
from textual.widgets import Header, Static

from backend.i18n import N_, _
from backend.steps import BLOCKABLE, Machine, blockers, step
from widgets.footer import TranslatedFooter
from widgets.step_indicator import StepIndicator

if TYPE_CHECKING:
    from backend.preset import Preset
    from screens.wizard import Wizard


def freeze_long_lived() -> None:
    """Leave the objects alive now out of Python's later garbage collections.

    A step screen, once built, lives as long as the App; but each full collection walked all
    of them again (every widget, style and cached line of every step): 100–500 ms with the
    UI frozen, at a random keystroke or step switch on a loaded machine. Called after a step
    is first shown (at most once per step), so what it keeps from collection is bounded.
    """
    gc.freeze()


class StepBody(Container):
    """The step's own part of the screen; a new preset recomposes only this, never the frame
    (the Header and step bar follow the App's state themselves)."""

    def compose(self) -> ComposeResult:
        screen = self.screen
        assert isinstance(screen, StepScreen)
        yield from screen.compose_body()


class StepScreen(Screen[None]):
    """One wizard step. Subclasses set STEP_ID and implement ``compose_body``."""

    STEP_ID: ClassVar[str] = ""

    def __init__(self, *, step_id: str | None = None) -> None:
        super().__init__()
        self.step_id = step_id or self.STEP_ID
        self._preset_stale = False
        self._suspended_app_focus: bool | None = None  # the terminal's focus when last hidden

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield StepIndicator(self.step_id, id="steps")
        yield Static(id="step-blockers")
        yield StepBody(id="step-body")
        yield TranslatedFooter(compact=True)

    def compose_body(self) -> ComposeResult:
        raise NotImplementedError

    @on(events.Mount)
    def _step_mounted(self) -> None:
        # A host App without the wizard's state (a test harness) simply has nothing to follow.
        for name, callback in (("preset", self._app_preset_changed),
                               ("machine", self._app_machine_changed)):  # fmt: skip
            if hasattr(type(self.app), name):
                self.watch(self.app, name, callback, init=False)
        self.show_blockers()
        self.call_after_refresh(freeze_long_lived)

    @property
    def wizard(self) -> Wizard:
        return cast("Wizard", self.app)

    @property
    def preset(self) -> Preset:
        return self.wizard.preset

    # ---- the preset: one state in the App, followed here ---------------------------------
    def _app_preset_changed(self) -> None:
        if getattr(self.app, "preset_origin", None) is self:
            return  # this screen made the edit and already shows it
        if self.is_current:
            self.preset_changed()
        else:
            self._preset_stale = True  # refreshed when shown: no hidden work per keystroke

    @on(events.ScreenSuspend)
    def _step_suspended(self) -> None:
        self._suspended_app_focus = self.app.app_focus

    @on(events.ScreenResume)
    def _step_resumed(self, event: events.ScreenResume) -> None:
        # Textual restyles every widget of a resumed screen (~100 ms for the form on a loaded
        # machine, twice on a first visit). Its styles are current: class changes restyle at
        # once, shown or not, and the App refreshes all CSS itself after a theme change. Only
        # the terminal's focus (``:focus`` looks) may have changed meanwhile.
        if self._suspended_app_focus is None or self._suspended_app_focus == self.app.app_focus:
            event.refresh_styles = False
        if self._preset_stale:
            self._preset_stale = False
            self.preset_changed()
        self.show_blockers()

    def preset_changed(self) -> None:
        """The App's preset changed (opened, fixed, tuned); the default rebuilds the body."""
        if self.is_mounted:
            self.query_one(StepBody).refresh(recompose=True)

    def language_changed(self) -> None:
        """The user switched the language (palette); the default rebuilds the body like a new
        preset does. A screen whose rebuild would redo work (Checks re-running) overrides it."""
        self.preset_changed()
        self.show_blockers()

    # ---- blockers: what can't run here, and why ------------------------------------------
    def _app_machine_changed(self) -> None:
        self.show_blockers()

    @property
    def machine(self) -> Machine:
        return getattr(self.app, "machine", None) or Machine()

    def show_blockers(self) -> None:
        """Failed checks that hold this step's action back, shown on arrival (never hidden)."""
        machine = self.machine
        self.query_one(StepIndicator).blocked = set(self.wizard_blocked())
        banner = self.query_one("#step-blockers", Static)
        found = blockers(self.step_id, machine)
        if not found:
            banner.display = False
            return
        gated = _(step(self.step_id).gated_action or N_("this step's action"))
        text = Text()
        text.append(
            "✗ "
            + _("{action} is disabled on this machine: ").format(
                action=gated[:1].upper() + gated[1:]
            ),
            style="bold red",
        )
        text.append("; ".join(f"{r.id}: {r.summary}" for r in found))
        fixes = [r.fix for r in found if r.fix]
        if fixes:
            text.append(" " + _("Fix: {fix}").format(fix=_(fixes[0])), style="cyan")
        text.append(" " + _("You can still look and plan."), style="italic")
        banner.update(text)
        banner.display = True

    def wizard_blocked(self) -> list[str]:
        return [s for s in BLOCKABLE if blockers(s, self.machine)]

    def refuse_if_blocked(self, what: str) -> bool:
        """True (and says why) when a failed check disables ``what`` on this machine."""
        found = blockers(self.step_id, self.machine)
        if not found:
            return False
        reasons = "; ".join(f"{r.id}: {r.summary}" for r in found)
        self.notify(_("{what} needs what this machine lacks: {reasons}").format(
                    what=what, reasons=reasons), title=_("Blocked"), severity="error",
                    timeout=8)  # fmt: skip
        return True

    def refuse_if_form_invalid(self, what: str) -> bool:
        """True (said by the App, focus on the field) while any step's field shows a value the
        preset does not hold; ``what`` would otherwise run or save a value nobody sees."""
        guard = getattr(self.app, "refuse_if_form_invalid", None)
        return bool(guard(what)) if callable(guard) else False

    # ---- leaving ---------------------------------------------------------------------------
    def leave_problems(self) -> list[str]:
        """Fields whose value is not valid (``field: rule``); the App refuses to leave while any."""
        return []
