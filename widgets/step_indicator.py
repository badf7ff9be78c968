"""The row of wizard steps at the top of every step screen, the current one highlighted.

The titles come from the step table (``backend.steps``). When the full row does not fit, the
other steps use their short names, then only the current one keeps its name, so the bar never
shows a bare number for the step you are on. A step whose action a failed check disables is
marked ✗.
"""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from backend.i18n import _
from backend.steps import STEPS

STEP_TITLES: list[tuple[str, str]] = [(s.id, s.title) for s in STEPS]


class StepIndicator(Static):
    """`1 Checks › 2 Model › ...` with the current step in reverse video."""

    DEFAULT_CSS = """
    StepIndicator { height: 1; padding: 0 1; background: $boost; }
    """
    blocked: reactive[set[str]] = reactive(set, always_update=True)

    def __init__(self, current: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.current = current

    def _row(self, names: dict[str, str], sep: str) -> Text:
        text = Text()
        for number, s in enumerate(STEPS, start=1):
            if number > 1:
                text.append(sep, style="dim")
            mark = " ✗" if s.id in self.blocked else ""
            label = f" {number} {names[s.id]}{mark} "
            text.append(label, style="bold reverse" if s.id == self.current else "")
        return text

    def render(self) -> Text:
        width = self.content_size.width or 120
        full: dict[str, str] = {s.id: _(s.title) for s in STEPS}
        short: dict[str, str] = {s.id: _(s.short) for s in STEPS}
        current_only: dict[str, str] = {
            s.id: _(s.short) if s.id == self.current else "" for s in STEPS
        }
        for names, sep in ((full, " › "), (short, " › "), (short, "›"), (current_only, "›")):
            row = self._row(names, sep)
            if row.cell_len <= width:
                return row
        return row
