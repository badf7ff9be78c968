"""One labelled form row: the editor that suits the value's type, its help, and its message.

The row does not validate: it reports every edit (``FormField.Edited``) and shows whatever
message its screen sets, so validation lives in one backend function for the whole form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Input, Label, Select, Static, Switch

Level = Literal["error", "warning", "info", ""]


class FormField(Vertical):
    """``kind`` is "bool" (a Switch), "choice" (a Select of ``choices``) or text (an Input)."""

    DEFAULT_CSS = """
    FormField { height: auto; margin: 0 0 0 0; }
    FormField > Horizontal { height: auto; }
    FormField .ff-label { width: 34; padding: 1 1 0 0; text-style: bold; }
    FormField Input { width: 1fr; }
    FormField Select { width: 1fr; }
    FormField Switch { width: auto; }
    FormField .ff-help { color: $text-muted; padding: 0 0 0 34; }
    FormField .ff-message { padding: 0 0 0 34; height: auto; }
    FormField .ff-message.-error { color: $error; text-style: bold; }
    FormField .ff-message.-warning { color: $warning; }
    FormField .ff-message.-info { color: $text-muted; text-style: italic; }
    FormField.-invalid Input { border: tall $error; }
    """

    @dataclass
    class Edited(Message):
        field: FormField
        path: str
        raw: Any

    def __init__(
        self,
        path: str,
        label: str,
        kind: str,
        value: str | bool,
        help_text: str,
        choices: tuple[str, ...] = (),
        *,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.path = path
        self.label = label
        self.kind = kind
        self.value = value
        self.help_text = help_text
        self.choices = choices

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield Label(self.label, classes="ff-label")
            yield self._editor()
        if self.help_text:
            yield Static(self.help_text, classes="ff-help", markup=False)
        yield Static("", classes="ff-message", markup=False)

    def _editor(self) -> Widget:
        if self.kind == "bool":
            return Switch(value=bool(self.value), classes="ff-editor")
        if self.kind == "choice":
            options = [(c, c) for c in self.choices]
            return Select(options, value=str(self.value), allow_blank=False, classes="ff-editor")
        placeholder = "empty = default" if self.kind.startswith("optional") else ""
        return Input(value=str(self.value), placeholder=placeholder, classes="ff-editor")

    @property
    def editor(self) -> Widget:
        return self.query_one(".ff-editor")

    @property
    def message(self) -> str:
        return str(self.query_one(".ff-message", Static).content)

    def set_message(self, text: str, level: Level) -> None:
        widget = self.query_one(".ff-message", Static)
        widget.update(text)
        for name in ("error", "warning", "info"):
            widget.set_class(level == name, f"-{name}")
        self.set_class(level == "error", "-invalid")

    def set_value(self, value: str | bool) -> None:
        """Show a value set from outside (a tune result) without reporting it as an edit."""
        editor = self.editor
        with editor.prevent(Input.Changed, Switch.Changed, Select.Changed):
            if isinstance(editor, Switch):
                editor.value = bool(value)
            elif isinstance(editor, (Select, Input)):
                editor.value = str(value)

    @on(Input.Changed)
    def _input(self, event: Input.Changed) -> None:
        event.stop()
        self.post_message(self.Edited(self, self.path, event.value))

    @on(Switch.Changed)
    def _switch(self, event: Switch.Changed) -> None:
        event.stop()
        self.post_message(self.Edited(self, self.path, event.value))

    @on(Select.Changed)
    def _select(self, event: Select.Changed) -> None:
        event.stop()
        self.post_message(self.Edited(self, self.path, event.value))
