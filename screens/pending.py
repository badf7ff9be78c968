"""A step whose screen is not built yet: shows the preset's real data for it, and says so."""

from __future__ import annotations

import yaml
from textual.app import ComposeResult
from textual.widgets import Static

from backend.i18n import _
from screens.base import StepScreen

# Which preset sections each step is about.
_SECTIONS = {
    "checks": ("launch",),
    "model": ("model",),
    "image": ("environment", "container"),
    "hyperparams": ("training",),
    "launch": ("launch",),
    "monitor": (),
}


class PendingStepScreen(StepScreen):
    """Shows the preset's data for this step and plainly says the step is not built yet."""

    def __init__(self, step_id: str) -> None:
        super().__init__(step_id=step_id)

    def compose_body(self) -> ComposeResult:
        yield Static(
            _("This step ({step}) is not built yet in this version of trainwiz.").format(
                step=self.step_id
            ),
            classes="pending-note",
        )
        data = self.preset.model_dump(mode="json", by_alias=True, exclude_unset=True)
        for section in _SECTIONS.get(self.step_id, ()):
            yield Static(_("preset {section}").format(section=section), classes="section-title")
            yield Static(yaml.safe_dump(data.get(section, {}), sort_keys=False).rstrip())
