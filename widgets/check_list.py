"""A list of system checks that fills in as results land, one row per check.

Rows exist from the start (marked as running) so the list never jumps while results arrive in
completion order; each landed result replaces its row's prompt in place.
"""

from __future__ import annotations

from collections import Counter

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from backend.checks import CheckResult
from backend.i18n import _

MARKS = {
    "ok": ("✓", "green"),
    "warn": ("!", "yellow"),
    "fail": ("✗", "bold red"),
    "skip": ("–", "dim"),
}


def _padded(title: str, width: int) -> str:
    """The title in the current language, padded to ``width`` terminal cells (a CJK character
    takes two, so ``str.ljust`` would push the summaries of translated rows out of line)."""
    shown = _(title)
    return shown + " " * max(1, width - cell_len(shown))


def row_text(title: str, result: CheckResult | None, width: int = 25) -> Text:
    """`✓ Title   summary`, or `… Title   running` before the result lands.

    ``title`` is the English title (translated here, so a language switch only repaints); a
    recorded English summary is shown translated when the catalog knows it."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if result is None:
        text.append("… ", style="dim")
        text.append(_padded(title, width), style="bold")
        text.append(_("running"), style="dim italic")
        return text
    mark, style = MARKS[result.status]
    text.append(f"{mark} ", style=style)
    text.append(_padded(title, width), style="bold")
    text.append(_(result.summary), style="dim" if result.status == "skip" else "")
    return text


class CheckList(OptionList):
    """Checks by id; ``show_pending`` lays out the rows, ``land`` fills one in."""

    DEFAULT_CSS = """
    CheckList { height: 1fr; border: round $primary 50%; text-wrap: nowrap; text-overflow: ellipsis; }
    CheckList:focus { border: round $primary; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.results: dict[str, CheckResult] = {}
        self.titles: dict[str, str] = {}

    def show_pending(self, checks: list[tuple[str, str]]) -> None:
        """One 'running' row per (id, title), in the order given."""
        self.results.clear()
        self.titles = dict(checks)
        highlighted = self.highlighted
        self.set_options(Option(row_text(title, None), id=check_id) for check_id, title in checks)
        if checks:
            self.highlighted = highlighted if highlighted is not None else 0

    def land(self, result: CheckResult) -> None:
        self.results[result.id] = result
        title = result.title or self.titles.get(result.id, result.id)
        if result.id not in self.titles:
            self.titles[result.id] = title
            self.add_option(Option(row_text(title, result), id=result.id))
        else:
            self.replace_option_prompt(result.id, row_text(title, result))

    def repaint(self) -> None:
        """Every row again in the current language (the results stay as they are)."""
        for check_id, title in self.titles.items():
            self.replace_option_prompt(check_id, row_text(title, self.results.get(check_id)))

    @property
    def highlighted_result(self) -> CheckResult | None:
        option = self.highlighted_option
        return self.results.get(option.id) if option is not None and option.id else None

    def counts(self) -> Counter[str]:
        return Counter(r.status for r in self.results.values())
