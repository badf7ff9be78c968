"""The Hyperparameters step's palette commands: "Edit field: NAME" for each of its fields."""

from __future__ import annotations

from typing import Any

from textual.command import DiscoveryHit, Hit, Hits, Provider

from backend.i18n import _


def _is_form(screen: Any) -> bool:
    """The step's screen (its fields and focus_field), without importing its module here."""
    return getattr(screen, "STEP_ID", "") == "hyperparams" and hasattr(screen, "focus_field")


class FieldCommands(Provider):
    """Palette (ctrl+p) on this step: "Edit field: NAME" jumps to any of the ~50 fields."""

    async def discover(self) -> Hits:
        screen: Any = self.screen  # the step's screen, checked by _is_form
        if _is_form(screen):
            for path in list(screen.fields)[:8]:
                label = _("Edit field: {path}").format(path=path)
                yield DiscoveryHit(label, lambda p=path: screen.focus_field(p))

    async def search(self, query: str) -> Hits:
        screen: Any = self.screen  # the step's screen, checked by _is_form
        if not _is_form(screen):
            return
        matcher = self.matcher(query)
        for path, info in screen.fields.items():
            label = _("Edit field: {path}").format(path=path)
            score = matcher.match(label)
            if score > 0:
                yield Hit(score, matcher.highlight(label), lambda p=path: screen.focus_field(p),
                          help=_(info.group))  # fmt: skip
