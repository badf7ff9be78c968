"""One labelled form row: the editor that suits the value's type, its help, and its message.

The row does not validate: it reports every edit (``FormField.Edited``) and shows whatever
message its screen sets, so validation lives in one backend function for the whole form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Checkbox, Input, Label, Select, Static

from backend.i18n import _

Level = Literal["error", "warning", "info", ""]


class FormField(Widget):
    """``kind`` is "bool" (a Checkbox), "choice" (a Select of ``choices``) or text (an Input).

    Four widgets per row (itself, label, editor, note) and compact editors: the form has ~50
    rows, and Textual's styling cost grows with the widget count.
    """

    DEFAULT_CSS = """
    FormField { layout: grid; grid-size: 2; grid-columns: 34 1fr; height: auto; }
    FormField .ff-label { text-style: bold; width: 34; }
    FormField .ff-editor { width: 1fr; }
    FormField .ff-note { column-span: 2; padding: 0 0 0 2; color: $text-muted; height: auto; }
    FormField.-error .ff-note { color: $error; }
    FormField.-warning .ff-note { color: $warning; }
    FormField.-error .ff-editor { background: $error 20%; }
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
        self._message = ""

    def compose(self) -> ComposeResult:
        yield Label(self.label, classes="ff-label")
        yield self._editor()
        yield Static(self.help_text, classes="ff-note", markup=False)

    def _editor(self) -> Widget:
        if self.kind == "bool":
            return Checkbox("", value=bool(self.value), compact=True, classes="ff-editor")
        if self.kind == "choice":
            options = [(c, c) for c in self.choices]
            return Select(
                options, value=str(self.value), allow_blank=False, compact=True, classes="ff-editor"
            )
        placeholder = _("empty = default") if self.kind.startswith("optional") else ""
        return Input(
            value=str(self.value), placeholder=placeholder, compact=True, classes="ff-editor"
        )

    @property
    def editor(self) -> Widget:
        return self.query_one(".ff-editor")

    @property
    def message(self) -> str:
        """The validation message now shown (empty when none)."""
        return self._message

    def set_message(self, text: str, level: Level) -> None:
        """Show ``text`` under the field, after its help; the row is coloured by ``level``."""
        self._message = text
        note = Text(self.help_text, style="dim") if self.help_text else Text()
        if text:
            marks = {"error": "✗ ", "warning": "! ", "info": "· "}
            note = Text.assemble(marks.get(level, ""), (text, "bold" if level == "error" else ""))
            if self.help_text:
                note.append(f"  ({self.help_text})", style="dim")
        self.query_one(".ff-note", Static).update(note)
        for name in ("error", "warning", "info"):
            self.set_class(level == name, f"-{name}")

    def set_value(self, value: str | bool) -> None:
        """Show a value set from outside (a tune result) without reporting it as an edit."""
        editor = self.editor
        with editor.prevent(Input.Changed, Checkbox.Changed, Select.Changed):
            if isinstance(editor, Checkbox):
                editor.value = bool(value)
            elif isinstance(editor, (Select, Input)):
                editor.value = str(value)

    @on(Input.Changed)
    def _input(self, event: Input.Changed) -> None:
        event.stop()
        self.post_message(self.Edited(self, self.path, event.value))

    @on(Checkbox.Changed)
    def _checkbox(self, event: Checkbox.Changed) -> None:
        event.stop()
        self.post_message(self.Edited(self, self.path, event.value))

    @on(Select.Changed)
    def _select(self, event: Select.Changed) -> None:
        event.stop()
        self.post_message(self.Edited(self, self.path, event.value))
