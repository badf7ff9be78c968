"""Keys typed right after Enter in the command palette go where the chosen command leaves the
focus, not into the closing palette.

Textual's palette takes a few message hops between Enter and closing (the list reports the
selection, the palette runs it, then pops itself). Keys that arrive meanwhile are given to the
palette's own input and vanish with it: "Edit field: lr", Enter, ``3e-4`` typed at once lost
the value on a loaded machine. So from the Enter on, the App holds the keys back; once the
palette is gone and its command has run (the focus is where the command put it), the held
keys are delivered in the order typed. Should the palette still be open after that Enter
(it only highlighted an entry), they go to the palette after all. Nothing is dropped either
way: the keys are late by a frame or so, never lost.
"""

from __future__ import annotations

import time

from textual import events
from textual.app import App
from textual.command import CommandPalette
from textual.timer import Timer

# How long keys wait for a palette that stays open after Enter before they go to it.
STILL_OPEN_S = 1.0


class PaletteTypeAhead(App[int]):
    """Mixed into the wizard App (below ``App`` in its bases)."""

    _held: list[events.Key] | None = None
    _hold_timer: Timer | None = None

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key) and not event.is_forwarded:
            if self._held is not None:
                self._held.append(event)
                return
            if event.key == "enter" and isinstance(self.screen, CommandPalette):
                self._hold_after_enter(self.screen)
        await super().on_event(event)

    def _hold_after_enter(self, palette: CommandPalette) -> None:
        self._held = []
        since = time.monotonic()

        def check() -> None:
            if palette not in self.screen_stack:
                self._stop_holding()
                # after the command (queued when the palette popped) and its refresh
                self.call_after_refresh(self._deliver_held)
            elif time.monotonic() - since > STILL_OPEN_S:
                self._stop_holding()
                self.call_later(self._deliver_held)

        self._hold_timer = self.set_interval(0.01, check)

    def _stop_holding(self) -> None:
        if self._hold_timer is not None:
            self._hold_timer.stop()
            self._hold_timer = None

    async def _deliver_held(self) -> None:
        """The held keys, in order, through the App's usual key handling (bindings first).
        Keys that arrive meanwhile wait in the App's queue behind these."""
        held, self._held = self._held or [], None
        for key in held:
            await super().on_event(key)
