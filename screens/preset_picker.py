"""Dialogs to pick a preset (shipped or by path) and to save the current one."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from backend.errors import BadInput
from backend.i18n import N_, _
from backend.preset import Preset, list_shipped, load_preset, save_preset


class PresetPicker(ModalScreen[tuple[Preset, str] | None]):
    """Shipped presets in a list, or a YAML path typed in; errors shown with file:line."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", N_("Cancel"), id="picker.cancel")
    ]
    DEFAULT_CSS = """
    PresetPicker { align: center middle; }
    PresetPicker > Vertical { width: 90; height: auto; max-height: 30; border: thick $accent; padding: 1 2; background: $surface; }
    PresetPicker OptionList { height: auto; max-height: 12; }
    PresetPicker #picker-error { color: $error; height: auto; }
    """

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(_("Open a preset"))
            yield OptionList(
                *[Option(f"{name} — {desc}", id=name) for name, desc in list_shipped()],
                id="picker-list",
            )
            yield Input(placeholder=_("…or a path to a preset YAML, then Enter"), id="picker-path")
            yield Static("", id="picker-error")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            self._try(event.option.id)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self._try(event.value.strip())

    def _try(self, ref: str) -> None:
        try:
            preset = load_preset(ref)
        except BadInput as exc:
            self.query_one("#picker-error", Static).update("\n".join(exc.problems))
            return
        self.dismiss((preset, ref))

    def action_cancel(self) -> None:
        self.dismiss(None)


class SavePresetDialog(ModalScreen[Path | None]):
    """Save the preset being edited as YAML: where is asked (the default shown in full), an
    existing file is overwritten only after a second Enter on the same path, and the write
    is atomic (nothing half-written on error)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", N_("Cancel"), id="save.cancel")
    ]
    DEFAULT_CSS = """
    SavePresetDialog { align: center middle; }
    SavePresetDialog > Vertical { width: 90%; max-width: 100; height: auto; border: thick $accent; padding: 1 2; background: $surface; }
    SavePresetDialog #save-error { color: $error; height: auto; }
    SavePresetDialog #save-hint { color: $text-muted; height: auto; }
    """

    def __init__(self, preset: Preset, default: Path | None = None) -> None:
        super().__init__()
        self.preset = preset
        self.default = default or Path.cwd() / f"{preset.name}.yaml"
        self._overwrite: Path | None = None  # the path the user was asked about

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(_("Save preset '{name}' to:").format(name=self.preset.name))
            yield Input(value=str(self.default), id="save-path")
            yield Static(
                _("Enter saves to this path (edit it first to save elsewhere); Escape cancels."),
                id="save-hint",
            )
            yield Static("", id="save-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        error = self.query_one("#save-error", Static)
        if not text:
            error.update(_("Type the path of the YAML file to write."))
            return
        target = Path(text).expanduser().absolute()
        if target.is_dir():
            error.update(_("{path} is a directory: name the file.").format(path=target))
            return
        if target.exists() and self._overwrite != target:
            self._overwrite = target
            error.update(
                _("{path} exists. Enter again overwrites it; or edit the path.").format(path=target)
            )
            return
        try:
            path = save_preset(self.preset, target)
        except (BadInput, OSError) as exc:
            error.update(str(exc))
            return
        self.app.notify(_("Saved {path}").format(path=path), title=_("Preset"))
        self.dismiss(path)

    def action_cancel(self) -> None:
        self.dismiss(None)
