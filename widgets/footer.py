"""The wizard's footer: Textual's Footer, with each binding's description in the user's language.

Binding descriptions are class attributes, fixed when a module is imported — possibly before the
language is known, and never again after a live language switch. So they are marked ``N_()``
where the bindings are declared and translated here, each time the footer is composed (it is
recomposed whenever the bindings change, and by a language switch).

Textual recomposes the footer (all its keys unmounted and mounted again) on every bindings
signal: each focus change and each step switch. Mostly the keys shown are the same, so the
footer recomposes only when what it would show differs from what it shows.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from backend.i18n import N_, _

# Textual's own bindings that the footer shows (the command palette's ``ctrl+p``), marked here
# so that the catalog has them.
TEXTUAL_DESCRIPTIONS = (N_("palette"),)

Shown = tuple[tuple[str, str, str, bool, str], ...]


class TranslatedFooter(Footer):
    """Footer whose key descriptions go through ``_()``.

    The palette key, docked right, has no right margin: Textual's compact footer gives every key
    one, and under the docked key that cell showed whichever key had run on beneath it
    ("^p palettet" at 80 columns)."""

    DEFAULT_CSS = """
    TranslatedFooter.-compact FooterKey.-command-palette, TranslatedFooter FooterKey.-command-palette {
        margin-right: 0;
    }
    """

    _shown: Shown | None = None  # what the last compose drew (None: nothing yet)

    def _what_it_would_show(self) -> Shown:
        """Every key the footer would draw now, as drawn: key, display, words, enabled, tip."""
        app = self.app
        return tuple(
            (key, app.get_key_display(binding), _(binding.description) if binding.description
             else "", enabled, tooltip or "")
            for key, (_node, binding, enabled, tooltip) in self.screen.active_bindings.items()
            if binding.show or key == app.COMMAND_PALETTE_BINDING
        )  # fmt: skip

    def compose(self) -> ComposeResult:
        if self._bindings_ready:
            self._shown = self._what_it_would_show()
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                widget.description = _(widget.description) if widget.description else ""
            yield widget

    def bindings_changed(self, screen: Screen) -> None:  # type: ignore[type-arg]
        if (
            self._shown is not None
            and self.is_attached
            and screen is self.screen
            and self._what_it_would_show() == self._shown
        ):
            return  # the same keys: a recompose would only unmount and remount them
        super().bindings_changed(screen)
