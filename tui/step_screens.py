"""Where each wizard step's screen comes from, and the one step built before its first visit.

Each step is a Textual mode (``tui.app``); its screen is made on first use by the factory here.
Two costs of a first visit are removed here rather than in each screen:

- Textual marks a new screen as behind the App's CSS, and catching it up re-parses the whole
  stylesheet and restyles the screen being left, twice per first visit (~200 ms of the UI
  thread at load 2). A step screen made here starts level with the App.
- The Hyperparameters form (~50 rows, ~150 widgets) took 0.6-0.9 s of UI-thread time to build
  on a loaded machine, with the previous step frozen meanwhile. It is built while an earlier
  step is on screen, as soon as that step has settled, so the move to it only shows it.

Both reach into Textual internals (``_css_update_count``, ``_screen_stacks``, ``_get_screen``):
Textual is pinned, and tests/tui/test_step_ahead.py fails if either stops holding.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

from textual.app import App
from textual.screen import Screen

from backend.steps import STEP_IDS
from screens.pending import PendingStepScreen

# step id -> "module:Class"; each module lives in screens/ and subclasses screens.base.StepScreen.
STEP_SCREENS: dict[str, str] = {
    "checks": "screens.checks:ChecksScreen",
    "model": "screens.model:ModelScreen",
    "image": "screens.image:ImageScreen",
    "hyperparams": "screens.hyperparams:HyperparamsScreen",
    "launch": "screens.launch:LaunchScreen",
    "monitor": "screens.monitor:MonitorScreen",
}
# Steps slow enough to build that they are built ahead, while a step before them is shown.
# The others take 100-250 ms on a first visit; building them hidden would start their own
# probes (Docker, runs, GPU sampling) before the user asked for them.
BUILT_AHEAD = ("hyperparams",)
SETTLE_S = 0.3  # the step on screen has drawn and started its own work by then
LAYOUT_POLL_S = 0.1


def _load_class(spec: str) -> type[Screen[None]] | None:
    module_name, _, class_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return None
        raise
    found = getattr(module, class_name, None)
    return found if isinstance(found, type) else None


def import_step_modules_in_background() -> threading.Thread:
    """Import every step's module on a thread: a first visit imported it on the UI thread
    (50-190 ms at load 3 for Launch and Monitor, with plotext, the planner and the runs code).
    A failing import is left for the visit to report, through the factory."""

    def run() -> None:
        for spec in STEP_SCREENS.values():
            try:
                importlib.import_module(spec.partition(":")[0])
            except Exception:  # the step's own visit says what is wrong
                continue

    thread = threading.Thread(target=run, name="step-imports", daemon=True)
    thread.start()
    return thread


def step_factory(app: App[Any], step_id: str) -> Callable[[], Screen[None]]:
    """The factory Textual calls for the step's mode: the step's screen, level with the CSS
    (its widgets are styled as they mount; a theme change later still counts past this)."""

    def make() -> Screen[None]:
        cls = _load_class(STEP_SCREENS[step_id])
        screen = PendingStepScreen(step_id) if cls is None else cls()
        screen._css_update_count = app._css_update_count
        return screen

    return make


def build_ahead_later(app: App[Any], shown_step: str) -> None:
    """Once ``shown_step`` has settled on screen, build the next slow step after it."""
    app.set_timer(SETTLE_S, lambda: _build_next(app, shown_step))


def _build_next(app: App[Any], shown_step: str) -> None:
    if not app.is_running or app._exit:
        return  # quitting: Textual is dropping the modes (a build now would find none)
    if app.current_mode != shown_step or shown_step not in STEP_IDS:
        return  # moved on meanwhile: the step now shown schedules its own
    here = STEP_IDS.index(shown_step)
    for step_id in BUILT_AHEAD:
        if STEP_IDS.index(step_id) > here and not app._screen_stacks.get(step_id):
            build_hidden(app, step_id)
            return


def build_hidden(app: App[Any], step_id: str) -> Screen[Any]:
    """Make and mount a step's screen without showing it; switching to its mode later only
    resumes it (Textual's own first switch makes and shows it in one go)."""
    make = app._modes.get(step_id)
    assert callable(make), f"no factory for the {step_id} step"
    screen = make()
    app._get_screen(screen)  # registers it: composed and mounted off screen
    app._load_screen_css(screen)
    screen._screen_resized(app.size)
    app._screen_stacks[step_id] = [screen]
    app.set_timer(LAYOUT_POLL_S, lambda: _lay_out_when_built(app, screen))
    return screen


def _lay_out_when_built(app: App[Any], screen: Screen[Any]) -> None:
    """Lay the hidden screen out at the App's size once all of it is mounted: the first
    layout of the form (every row measured) was most of what was left of the first visit."""
    if screen.is_current or not screen.is_attached:
        return
    if not getattr(screen, "built", True):
        app.set_timer(LAYOUT_POLL_S, lambda: _lay_out_when_built(app, screen))
        return
    screen._refresh_layout(app.size)
