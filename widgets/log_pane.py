"""The run's log: bounded, batched, flagged lines coloured, counts per kind, jump, search, follow.

Only visible lines are rendered (``render_line`` over a bounded deque), so a log growing at tens
of thousands of lines a second costs the UI one refresh per batch, not one per line.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Input, Static

from backend.diagnosis.nodes import NODE_TAG
from backend.i18n import N_, _
from backend.monitor import ClassifiedBatch, LogModel

SEVERITY_STYLE = {
    "error": Style(color="red", bold=True),
    "warning": Style(color="yellow"),
    "info": Style(color="cyan"),
}
CURSOR = Style(reverse=True)
MATCH = Style(bgcolor="dark_orange3", color="white")


_NODE_COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "bright_cyan", "bright_magenta")


def node_style(index: int) -> Style:
    return Style(color=_NODE_COLOURS[index % len(_NODE_COLOURS)], bold=True)


class OpenTroubleshoot(Message):
    """Asks the app to open the Troubleshoot view for this run (or this log)."""

    def __init__(self, run_id: str | None, log_path: Path | None, line_no: int | None) -> None:
        super().__init__()
        self.run_id = run_id
        self.log_path = log_path
        self.line_no = line_no


class LogView(ScrollView, can_focus=True):
    """Renders a LogModel's visible lines; ``cursor`` is an index into the model's lines."""

    DEFAULT_CSS = """
    LogView { height: 1fr; }
    """

    def __init__(self, model: LogModel, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.model = model
        self.cursor: int | None = None
        self.needle = ""

    def sync_size(self) -> None:
        self.virtual_size = Size(self.model.max_width + 7, len(self.model.lines))

    def on_resize(self) -> None:
        """A following log keeps its newest line in view when it loses rows (a terminal made
        smaller, a line above it that wraps): the offset would stay where it was, the end
        below the view. It gains rows at the end by itself (the offset is clamped)."""
        pane = self.parent
        if isinstance(pane, LogPane) and pane.follow:
            self.scroll_end(animate=False, immediate=False, x_axis=False)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        idx = scroll_y + y
        width = self.scrollable_content_region.width
        if idx >= len(self.model.lines):
            return Strip.blank(width, self.rich_style)
        line = self.model.lines[idx]
        base = SEVERITY_STYLE.get(line.flag.severity) if line.flag else None
        if idx == self.cursor:
            base = (base or Style()) + CURSOR
        segs = [Segment(f"{line.no:>6} ", Style(dim=True))]
        text = line.text.expandtabs(4)
        pos = text.lower().find(self.needle.lower()) if self.needle else -1
        if pos >= 0:
            end = pos + len(self.needle)
            segs += [
                Segment(text[:pos], base),
                Segment(text[pos:end], (base or Style()) + MATCH),
                Segment(text[end:], base),
            ]
        else:
            tag = NODE_TAG.match(text)  # a multi-node run: whose line it is, in that node's colour
            if tag:
                style = (base or Style()) + node_style(int(tag[1]))
                segs.append(Segment(tag[0], style))
                text = text[tag.end() :]
            segs.append(Segment(text, base))
        strip = Strip(segs).crop(scroll_x, scroll_x + width)
        return strip.extend_cell_length(width, self.rich_style)

    def show_index(self, idx: int) -> None:
        self.cursor = idx
        height = self.scrollable_content_region.height
        self.scroll_to(y=max(0, idx - height // 2), animate=False)
        self.refresh()


class LogPane(Vertical):
    ALLOW_MAXIMIZE = True
    DEFAULT_CSS = """
    LogPane { height: 1fr; min-height: 5; }
    LogPane > #log-header { height: 1; background: $boost; }
    LogPane > #log-search { display: none; height: 3; }
    LogPane.searching > #log-search { display: block; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("right_square_bracket", "next_flag", N_("Flag"), id="log.next_flag"),
        Binding(
            "left_square_bracket", "prev_flag", N_("Prev flag"), id="log.prev_flag", show=False
        ),
        Binding("t", "troubleshoot", N_("Troubleshoot"), id="log.troubleshoot"),
        Binding("slash", "search", N_("Search"), id="log.search"),
        Binding("n", "next_match", N_("Next match"), id="log.next_match", show=False),
        Binding("N", "prev_match", N_("Prev match"), id="log.prev_match", show=False),
        Binding("f", "toggle_follow", N_("Follow"), id="log.follow", show=False),
        Binding("escape", "close_search", N_("Close search"), id="log.close_search", show=False),
    ]

    def __init__(
        self,
        *,
        run_id: str | None = None,
        log_path: Path | None = None,
        max_lines: int = 10_000,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.run_id = run_id
        self.log_path = log_path
        self.model = LogModel(max_lines=max_lines)
        self.follow = True
        self.classifier_missing = False
        self.batches = 0

    def compose(self) -> ComposeResult:
        yield Static(self.header_text(), id="log-header")
        yield LogView(self.model, id="log-view")
        yield Input(placeholder=_("search the log (Enter: find, Esc: close)"), id="log-search")

    @property
    def view(self) -> LogView:
        return self.query_one(LogView)

    def header_text(self) -> Text:
        t = Text()
        t.append(_("Log "), style="bold")
        t.append(
            _("following") if self.follow else _("paused"),
            style="green" if self.follow else "yellow",
        )
        t.append(_(" · {total} lines").format(total=self.model.total))
        if self.classifier_missing:
            t.append(_(" · line flagging unavailable (no diagnosis classifier)"), style="dim")
        for cat, n in sorted(self.model.counts.items(), key=lambda kv: (-kv[1], kv[0])):
            sev = self.model.severities.get(cat, "info")
            t.append(f" · {cat} {n}", style=SEVERITY_STYLE.get(sev, Style()))
        return t

    def add_batch(self, batch: ClassifiedBatch) -> None:
        """Called on the UI thread with a batch the worker already classified."""
        self.batches += 1
        view = self.view
        fell = self.model.add(batch)
        if batch.reset:
            view.cursor = None
        elif fell and view.cursor is not None:
            view.cursor = view.cursor - fell if view.cursor >= fell else None
        view.sync_size()
        if self.follow:
            view.scroll_end(animate=False, immediate=False, x_axis=False)
        elif fell:
            view.scroll_to(y=max(0, view.scroll_offset.y - fell), animate=False)
        view.refresh()
        self.query_one("#log-header", Static).update(self.header_text())

    def _jump(self, idx: int | None, what: str) -> None:
        if idx is None:
            self.app.bell()
            self.notify(
                _("No {what} in the last {count} lines").format(
                    what=what, count=len(self.model.lines)
                ),
                timeout=3,
            )
            return
        self.follow = False
        self.view.show_index(idx)
        self.query_one("#log-header", Static).update(self.header_text())

    def _from(self) -> int:
        cur = self.view.cursor
        if cur is not None:
            return cur
        return self.view.scroll_offset.y - 1

    def action_next_flag(self) -> None:
        self._jump(self.model.next_flagged(self._from()), "flagged line")

    def action_prev_flag(self) -> None:
        start = self.view.cursor if self.view.cursor is not None else len(self.model.lines)
        self._jump(self.model.next_flagged(start, backwards=True), "flagged line")

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        if self.follow:
            self.view.cursor = None
            self.view.scroll_end(animate=False, x_axis=False)
        self.query_one("#log-header", Static).update(self.header_text())

    def action_troubleshoot(self) -> None:
        cur = self.view.cursor
        line_no = (
            self.model.lines[cur].no if cur is not None and cur < len(self.model.lines) else None
        )
        self.post_message(OpenTroubleshoot(self.run_id, self.log_path, line_no))

    def action_search(self) -> None:
        self.add_class("searching")
        self.query_one("#log-search", Input).focus()

    def action_close_search(self) -> None:
        self.remove_class("searching")
        self.view.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.view.needle = event.value
        self.remove_class("searching")
        self.view.focus()
        self.action_next_match()

    def action_next_match(self) -> None:
        if self.view.needle:
            self._jump(self.model.next_match(self.view.needle, self._from()), "match")

    def action_prev_match(self) -> None:
        if self.view.needle:
            start = self.view.cursor if self.view.cursor is not None else len(self.model.lines)
            self._jump(self.model.next_match(self.view.needle, start, backwards=True), "match")
