"""A Select whose current-value line may be told its label before its own children exist.

Textual's ``Select`` sets its value when it mounts, and the value's line (``SelectCurrent``)
then looks up its label widget. On a loaded machine the Select can mount before that line has
composed its children (seen in CI, a Hyperparameters form built ahead: ``NoMatches: '#label'``
raised out of the App, which ends it). Here the label is kept until the line has mounted, and
shown then. Everything else is Textual's own Select; Textual is pinned, and
tests/tui/test_steady_select.py fails if this stops holding.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.widgets import Select
from textual.widgets._select import SelectCurrent, SelectOverlay


class SteadyCurrent(SelectCurrent):
    """The Select's current-value line; an early label waits for the line's mount."""

    def update(self, label: Any) -> None:
        if not self.query("#label"):  # not composed yet: shown by on_mount
            self.label = label
            self.has_value = label is not Select.NULL
            return
        super().update(label)

    def on_mount(self) -> None:
        super().update(self.label)


class SteadySelect(Select[str]):
    """``Select`` with a ``SteadyCurrent`` line (same options, keys, messages and looks:
    CSS type selectors match a subclass by its base's name too)."""

    def compose(self) -> ComposeResult:
        yield SteadyCurrent(self.prompt)
        yield SelectOverlay(type_to_search=self._type_to_search).data_bind(compact=Select.compact)
