"""The review of one fix before it is applied: the preset diff, then apply or cancel.

Troubleshoot never applies a fix silently; this dialog is the one place a fix is confirmed
(``y``) or dropped (``esc``/``n``), so what the user read is the diff that gets applied.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from backend.diagnosis import Fix
from backend.i18n import N_, _


class FixReviewDialog(ModalScreen[bool]):
    """The preset diff of one fix; nothing changes unless the user confirms."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "apply", N_("Apply and relaunch"), id="troubleshoot.fix_apply"),
        Binding("escape,n", "cancel", N_("Cancel"), id="troubleshoot.fix_cancel"),
    ]
    DEFAULT_CSS = """
    FixReviewDialog { align: center middle; }
    FixReviewDialog > Vertical { width: 100; height: auto; max-height: 90%; border: thick $accent;
        padding: 1 2; background: $surface; }
    FixReviewDialog #fix-diff { height: auto; max-height: 24; }
    FixReviewDialog Horizontal { height: auto; margin-top: 1; }
    """

    def __init__(self, fix: Fix, diff: list[str], action: str) -> None:
        super().__init__()
        self.fix = fix
        self.diff = diff
        self.action_label = action

    def compose(self) -> ComposeResult:
        diff = Text()
        for line in self.diff or [_("(this fix changes nothing in the preset)")]:
            colour = "green" if line.startswith("+") else "red" if line.startswith("-") else ""
            diff.append(line + "\n", style=colour)
        with Vertical():
            yield Static(Text(self.fix.title, style="bold"))
            yield Static(self.fix.reason, classes="muted")
            with VerticalScroll(id="fix-diff"):
                yield Static(diff)
            yield Static(self.action_label, id="fix-action")
            with Horizontal():
                yield Button(_("Apply (y)"), variant="primary", id="fix-apply")
                yield Button(_("Cancel (esc)"), id="fix-cancel")

    @on(Button.Pressed, "#fix-apply")
    def action_apply(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#fix-cancel")
    def action_cancel(self) -> None:
        self.dismiss(False)
