"""The confirmation asked before anything runs: launch, run all, build.

One dialog for all three, so each says the same things in the same order: what will run,
where, and any warnings. ``extra_warnings`` is the single place that adds warning lines about
a preset (container-safety risks go there).
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

from backend.i18n import N_, _
from backend.preset import Preset
from backend.preset.safety import container_risks
from backend.redact import redact_text


def extra_warnings(preset: Preset) -> list[str]:
    """Warning lines every confirmation shows for ``preset`` (empty: nothing to warn about).

    The one hook for preset-level risks: the dangerous container options
    (``backend.preset.safety.container_risks``), redacted like every other printed value.
    """
    return [redact_text(f"WARNING {risk.line()}") for risk in container_risks(preset)]


def confirm_text(title: str, runs: list[str], where: list[str], warnings: list[str]) -> Text:
    text = Text()
    text.append(title + "\n", style="bold")
    if runs:
        text.append("\n" + _("What runs") + "\n", style="bold")
        for line in runs:
            text.append(f"  {line}\n")
    if where:
        text.append("\n" + _("Where") + "\n", style="bold")
        for line in where:
            text.append(f"  {line}\n")
    if warnings:
        text.append("\n" + _("Warnings") + "\n", style="bold yellow")
        for line in warnings:
            text.append(f"  ! {line}\n", style="yellow")
    return text


class ConfirmDialog(ModalScreen[bool]):
    """Run it for real? ``y`` confirms, ``n``/Escape cancels; the body says what and where."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", N_("Yes"), id="confirm.yes"),
        Binding("n,escape", "answer(False)", N_("Cancel"), id="confirm.no"),
    ]
    DEFAULT_CSS = """
    ConfirmDialog { align: center middle; }
    ConfirmDialog > Vertical {
        width: 90%; max-width: 100; height: auto; max-height: 90%;
        border: thick $accent; background: $surface; padding: 0 1;
    }
    ConfirmDialog #confirm-body { height: auto; max-height: 65vh; }  /* the buttons stay on screen at 80x24 */
    ConfirmDialog #confirm-buttons { height: auto; align-horizontal: right; }
    ConfirmDialog Button { margin: 0 0 0 2; }
    """

    def __init__(self, title: str, runs: list[str], where: list[str],
                 warnings: list[str] | None = None, *, yes: str = N_("Run")) -> None:  # fmt: skip
        super().__init__()
        self.body = confirm_text(title, runs, where, list(warnings or []))
        self.yes_label = yes

    def compose(self) -> ComposeResult:
        with Vertical():
            with VerticalScroll(id="confirm-body"):
                yield Static(self.body, id="confirm-summary")
            with Horizontal(id="confirm-buttons"):
                yield Button(_("Cancel (n)"), id="confirm-no")
                yield Button(f"{_(self.yes_label)} (y)", id="confirm-yes", variant="success")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-yes")
