"""The wizard's footer: Textual's Footer, with each binding's description in the user's language.

Binding descriptions are class attributes, fixed when a module is imported — possibly before the
language is known, and never again after a live language switch. So they are marked ``N_()``
where the bindings are declared and translated here, each time the footer is composed (it is
recomposed whenever the bindings change, and by a language switch).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from backend.i18n import N_, _

# Textual's own bindings that the footer shows (the command palette's ``ctrl+p``), marked here
# so that the catalog has them.
TEXTUAL_DESCRIPTIONS = (N_("palette"),)


class TranslatedFooter(Footer):
    """Footer whose key descriptions go through ``_()``."""

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                widget.description = _(widget.description) if widget.description else ""
            yield widget
