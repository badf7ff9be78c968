"""The row of wizard steps at the top of every step screen, the current one highlighted."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

STEPS: list[tuple[str, str]] = [
    ("checks", "Checks"),
    ("model", "Model"),
    ("image", "Image"),
    ("hyperparams", "Hyperparameters"),
    ("launch", "Launch"),
    ("monitor", "Monitor"),
]


class StepIndicator(Static):
    """`1 Checks › 2 Model › ...` with the current step in reverse video."""

    DEFAULT_CSS = """
    StepIndicator { height: 1; padding: 0 1; background: $boost; }
    """

    def __init__(self, current: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.current = current

    def render(self) -> Text:
        text = Text()
        for number, (step_id, title) in enumerate(STEPS, start=1):
            if number > 1:
                text.append(" › ", style="dim")
            label = f" {number} {title} "
            if step_id == self.current:
                text.append(label, style="bold reverse")
            else:
                text.append(label)
        return text
