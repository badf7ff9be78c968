"""One labelled form row: the editor that suits the value's type, its help, and its message.

The row does not validate: it reports every edit (``FormField.Edited``) and shows whatever
message its screen sets, so validation lives in one backend function for the whole form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from rich.cells import cell_len
from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.geometry import Size
from textual.message import Message
from textual.strip import Strip
from textual.visual import Visual, visualize
from textual.widget import Widget
from textual.widgets import Checkbox, Input, Select

from backend.i18n import _
from widgets.steady_select import SteadySelect

Level = Literal["error", "warning", "info", ""]


def middle_cut(text: str, width: int) -> str:
    """``text`` in ``width`` cells, cut in the middle: ``/home/u/…/data/train.json``.

    A path's start says where it is and its end which file: an Input scrolled to its cursor
    shows only the end, a plain cut only the start. The tail gets the larger share.
    """
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    head_cells = (width - 1) * 2 // 5
    tail_cells = width - 1 - head_cells
    head = ""
    for char in text:
        if cell_len(head + char) > head_cells:
            break
        head += char
    tail = ""
    for char in reversed(text):
        if cell_len(char + tail) > tail_cells:
            break
        tail = char + tail
    return f"{head}…{tail}"


def _state_label(on: bool) -> str:
    """A checkbox's state in words: the compact box draws the same mark in both states, told
    apart only by colour, which a plain or colour-blind terminal does not show."""
    return _("on") if on else _("off")


def _text_key(text: Text) -> tuple[object, ...]:
    """What a note draws (``Text ==`` ignores the base style: help shown plain or dimmed)."""
    return (text.plain, str(text.style), tuple(text.spans))


class FieldInput(Input):
    """An Input that runs its own editing keys (backspace, End, arrows…) where they arrive.

    Textual inserts a printable key in the Input at once, but a non-printable one bubbles up
    through every parent's message queue to the App, which then runs the binding. While the
    screen is busy with an edit, a fast burst (``End``, 8×``BSpace``, ``3e-4``) was applied out of
    order: the characters landed first and the late backspaces ate them. Running the Input's
    own bindings here keeps every key in the order typed.
    """

    async def _on_key(self, event: events.Key) -> None:
        if not event.is_printable:
            for key in event.aliases:
                for binding in self._bindings.key_to_bindings.get(key, []):
                    event.stop()
                    event.prevent_default()
                    self._restart_blink()
                    await self.run_action(binding.action)
                    return
        await super()._on_key(event)

    @property
    def cut(self) -> bool:
        """True while the value is longer than the editor shows."""
        return bool(self.value) and cell_len(self.value) > self.scrollable_content_region.width

    def render_line(self, y: int) -> Strip:
        """Unfocused, a value too long for the box shows its start and its end (``middle_cut``);
        focused, the Input edits the whole value as usual (and the row's note shows it all)."""
        if y != 0 or self.has_focus or not self.cut:
            return super().render_line(y)
        width = self.scrollable_content_region.width
        text = Text(middle_cut(self.value, width), no_wrap=True, overflow="ignore", end="")
        strip = Strip(self.app.console.render(text, self.app.console_options.update_width(width)))
        return strip.crop(0, width + 1).extend_cell_length(width + 1).apply_style(self.rich_style)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()


class FormScroll(VerticalScroll):
    """The scrolling form. Textual restyles a widget and all its descendants when its focus
    changes; for the form's scroll area that is ~150 widgets (~150 ms on a loaded machine, on
    every arrival at the step, the Screen's auto-focus lands here) though only the area's own
    look depends on its focus (no stylesheet rule styles a descendant by a scroll area's
    ``:focus``). So it restyles itself alone."""

    def watch_has_focus(self, _has_focus: bool) -> None:
        self.app.stylesheet.update_nodes([self], animate=True)


class FormField(Widget):
    """``kind`` is "bool" (a Checkbox), "choice" (a Select of ``choices``) or text (an Input).

    Two widgets per row: the row itself draws its label and its note (help, or the message)
    around its one child, the editor. The form has ~50 rows, and Textual's styling and layout
    cost grows with the widget count: a Label and a Static per row made opening the step and
    coming back to it slow. Where the editor sits is the CSS's say (``margin`` of
    ``.ff-editor``: beside the label, or under it on a narrow screen); the label fills the
    cells before it, the note the lines after.
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {"form-field--label", "form-field--note"}
    DEFAULT_CSS = """
    FormField { layout: vertical; height: auto; }
    FormField > .ff-editor { width: 1fr; margin: 0 0 0 34; }
    FormField > .form-field--label { text-style: bold; }
    FormField > .form-field--note { color: $text-muted; }
    FormField.-error > .form-field--note { color: $error; }
    FormField.-warning > .form-field--note { color: $warning; }
    FormField.-error > .ff-editor { background: $error 20%; }
    """
    NOTE_INDENT = 2

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
        self._level: Level | None = None  # None: no message was ever set (the plain help)
        self._reported: str | bool = value  # the value the screen last heard of (or set)
        self._has_focus = False
        self._note: Text = Text(help_text)
        self._rows: tuple[tuple[object, ...], list[Strip]] | None = None  # (key, drawn rows)
        self._drawn_count: int | None = None  # the row's height when last drawn
        self._editor = self._make_editor()

    def compose(self) -> ComposeResult:
        yield self._editor

    def _make_editor(self) -> Widget:
        # Compact, set without Textual's reactive: that restyles the editor at once, in a form
        # not even mounted yet (~2 ms an editor, ~50 of them); mounting styles it anyway.
        compact = "ff-editor"
        editor: Widget
        if self.kind == "bool":
            editor = Checkbox(_state_label(bool(self.value)), value=bool(self.value),
                              classes=compact)  # fmt: skip
        elif self.kind == "choice":
            options = [(c, c) for c in self.choices]
            editor = SteadySelect(
                options, value=str(self.value), allow_blank=False, classes=compact
            )
        else:
            placeholder = _("empty = default") if self.kind.startswith("optional") else ""
            editor = FieldInput(value=str(self.value), placeholder=placeholder, classes=compact)
        editor.set_reactive(type(editor).compact, True)  # type: ignore[attr-defined]
        editor.set_class(True, "-textual-compact", update=False)
        return editor

    @property
    def editor(self) -> Widget:
        return self._editor

    @property
    def label_text(self) -> str:
        """The label as drawn: ``▸`` marks the row whose editor has the focus."""
        return ("▸ " if self._has_focus else "  ") + self.label

    @property
    def note_text(self) -> str:
        """The note as drawn under the editor: the help, the message, the whole value."""
        return self._note.plain

    # ---- drawing: the label before the editor, the note under it -------------------------
    def _drawn_rows(self, width: int) -> list[Strip]:
        """Every line of the row (the editor's cells are drawn over by the editor itself)."""
        margin = self._editor.styles.margin
        key = (width, margin.top, margin.left, self.label_text, _text_key(self._note))
        if self._rows is not None and self._rows[0] == key:
            return self._rows[1]
        base = self.visual_style.rich_style
        label_width = margin.left if 0 < margin.left < width else width
        label_rows = Visual.to_strips(
            self, visualize(self, Content(self.label_text)), label_width, None,
            self.get_visual_style("form-field--label"), pad=True,
        )  # fmt: skip
        top = max(len(label_rows), margin.top + 1)
        rows = [
            Strip.join([label_rows[y], Strip.blank(width - label_width, base)])
            if y < len(label_rows) else Strip.blank(width, base)
            for y in range(top)
        ]  # fmt: skip
        note_style = self.get_visual_style("form-field--note")
        indent = Strip.blank(self.NOTE_INDENT, note_style.rich_style)
        note_width = max(width - self.NOTE_INDENT, 1)
        note_rows = Visual.to_strips(
            self, visualize(self, self._note, markup=False), note_width, None, note_style, pad=True
        )
        rows += [Strip.join([indent, row]) for row in note_rows or [Strip.blank(note_width)]]
        self._rows = (key, rows)
        self._drawn_count = len(rows)
        return rows

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._drawn_rows(width)) if width else 0

    def render_line(self, y: int) -> Strip:
        rows = self._drawn_rows(self.size.width)
        if y < len(rows):
            return rows[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)

    def notify_style_update(self) -> None:
        self._rows = None  # colours (a theme, -error) are in the drawn rows
        super().notify_style_update()

    def _redraw(self) -> None:
        """Repaint after the label or note changed; lay the form out again only when the row's
        height changed (a new layout of ~50 rows per keystroke held typing back)."""
        width, drawn, height = self.size.width, self._rows, self._drawn_count
        if not width or height is None:
            self.refresh(layout=True)
            return
        rows = self._drawn_rows(width)
        if rows is not (drawn[1] if drawn is not None else None):
            self.refresh(layout=len(rows) != height)

    # ---- message and value ---------------------------------------------------------------
    @property
    def message(self) -> str:
        """The validation message now shown (empty when none)."""
        return self._message

    def set_message(self, text: str, level: Level) -> None:
        """Show ``text`` under the field, after its help; the row is coloured by ``level``."""
        self._message, self._level = text, level
        for name in ("error", "warning", "info"):
            self.set_class(level == name, f"-{name}")
        self._show_note()

    def _show_note(self) -> None:
        """The message (or the help); while a cut value is being edited, the whole value too."""
        text, level = self._message, self._level
        note = Text(self.help_text, style="dim") if self.help_text else Text()
        if level is None:
            note = Text(self.help_text)
        if text and level is not None:
            marks = {"error": "✗ ", "warning": "! ", "info": "· "}
            note = Text.assemble(marks.get(level, ""), (text, "bold" if level == "error" else ""))
            if self.help_text:
                note.append(f"  ({self.help_text})", style="dim")
        editor = self._editor
        if isinstance(editor, FieldInput) and editor.has_focus and editor.cut:
            note = Text.assemble((_("whole value: "), "bold"), editor.value, "\n", note)
        self._note = note
        self._redraw()

    def set_value(self, value: str | bool) -> None:
        """Show a value set from outside (a tune result) without reporting it as an edit."""
        editor = self.editor
        self._reported = value
        with editor.prevent(Input.Changed, Checkbox.Changed, Select.Changed):
            if isinstance(editor, Checkbox):
                editor.value = bool(value)
                editor.label = _state_label(bool(value))
            elif isinstance(editor, (Select, Input)):
                editor.value = str(value)

    def _report(self, value: Any) -> None:
        # An editor announces its initial value when mounted: that is no edit (and ~50 rows
        # of them made opening the step slow).
        if value == self._reported or str(value) == str(self._reported):
            return
        self._reported = value
        self.post_message(self.Edited(self, self.path, value))

    @on(Input.Changed)
    def _input(self, event: Input.Changed) -> None:
        event.stop()
        self._report(event.value)
        if event.input.has_focus:
            self._show_note()

    @on(Checkbox.Changed)
    def _checkbox(self, event: Checkbox.Changed) -> None:
        event.stop()
        event.checkbox.label = _state_label(event.value)
        self._report(event.value)

    @on(Select.Changed)
    def _select(self, event: Select.Changed) -> None:
        event.stop()
        self._report(event.value)

    # ---- focus: the row says which field keys go to (visible in any terminal, no colour) -
    @on(events.DescendantFocus)
    def _focused(self) -> None:
        self._has_focus = True
        self.add_class("-focused")
        self._show_note()

    @on(events.DescendantBlur)
    def _blurred(self) -> None:
        self._has_focus = False
        self.remove_class("-focused")
        self._show_note()
