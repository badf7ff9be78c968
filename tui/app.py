"""The trainwiz App: six steps in order, a preset at the centre, keyboard only.

Step screens are looked up by id in ``STEP_SCREENS`` (``module:Class``) and created on first
visit. A step whose screen module is not there shows ``PendingStepScreen``: the preset's own
data for that step and a plain statement that the step is not built yet — never invented
numbers. Every binding has an id so users can remap keys.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.command import Hit, Hits, Provider
from textual.screen import Screen

from backend.preset import Preset, load_preset
from widgets.step_indicator import STEPS

DEFAULT_PRESET = "tiny-cpu"

# step id -> "module:Class"; each module lives in screens/ and subclasses screens.base.StepScreen.
STEP_SCREENS: dict[str, str] = {
    "checks": "screens.checks:ChecksScreen",
    "model": "screens.model:ModelScreen",
    "image": "screens.image:ImageScreen",
    "hyperparams": "screens.hyperparams:HyperparamsScreen",
    "launch": "screens.launch:LaunchScreen",
    "monitor": "screens.monitor:MonitorScreen",
}


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


class StepCommands(Provider):
    """Command palette: jump to any step, open a preset, troubleshoot."""

    async def search(self, query: str) -> Hits:
        app = self.app
        assert isinstance(app, TrainwizApp)
        matcher = self.matcher(query)
        entries = [(f"Go to step: {title}", step_id) for step_id, title in STEPS]
        for label, step_id in entries:
            score = matcher.match(label)
            if score > 0:
                yield Hit(score, matcher.highlight(label), lambda s=step_id: app.goto_step(s))
        for label, action in (
            ("Open preset…", app.action_open_preset),
            ("Troubleshoot a run or a log", app.action_troubleshoot),
            ("Save the current preset", app.action_save_preset),
            ("Run all steps (replay the preset)", app.action_run_all),
        ):
            score = matcher.match(label)
            if score > 0:
                yield Hit(score, matcher.highlight(label), action)


class TrainwizApp(App[int]):
    """The wizard. ``preset`` is the job being assembled; screens read and update it."""

    CSS_PATH = "app.tcss"
    TITLE = "trainwiz"
    COMMANDS: ClassVar = App.COMMANDS | {StepCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+n", "next_step", "Next", id="next_step", priority=True),
        Binding("ctrl+b", "previous_step", "Back", id="previous_step", priority=True),
        Binding("ctrl+o", "open_preset", "Preset", id="open_preset"),
        Binding("ctrl+s", "save_preset", "Save", id="save_preset"),
        Binding("ctrl+t", "troubleshoot", "Troubleshoot", id="troubleshoot"),
        Binding("ctrl+r", "run_all", "Run all", id="run_all"),
    ]

    def __init__(
        self,
        preset: Preset,
        preset_source: str,
        *,
        start_step: str = "checks",
        attach_run: Path | None = None,
    ) -> None:
        super().__init__()
        self.preset = preset
        self.preset_source = preset_source
        self.start_step = start_step
        self.current_run: Path | None = attach_run
        self._step_screens: dict[str, Screen[None]] = {}
        # step id -> ids of the failed checks that hold it back (from the Checks screen).
        self.blocked: dict[str, list[str]] = {}
        self.sub_title = f"preset: {preset.name}"

    def on_mount(self) -> None:
        self.push_screen(self._screen_for(self.start_step))

    # ---- steps -------------------------------------------------------------------------
    def _screen_for(self, step_id: str) -> Screen[None]:
        if step_id not in self._step_screens:
            cls = _load_class(STEP_SCREENS[step_id])
            if cls is None:
                from screens.pending import PendingStepScreen

                self._step_screens[step_id] = PendingStepScreen(step_id)
            else:
                self._step_screens[step_id] = cls()
        return self._step_screens[step_id]

    @property
    def current_step(self) -> str:
        return str(getattr(self.screen, "step_id", ""))

    def on_checks_screen_blocked_changed(self, message: object) -> None:
        self.blocked = {str(k): list(v) for k, v in getattr(message, "blocked", {}).items() if v}

    def goto_step(self, step_id: str) -> None:
        """Show a step, unless a failed check blocks it or a step before it (moving forward)."""
        if step_id == self.current_step:
            return
        ids = [s for s, _ in STEPS]
        here = ids.index(self.current_step) if self.current_step in ids else 0
        for passed in ids[here + 1 : ids.index(step_id) + 1]:
            if passed in self.blocked:
                self.notify(
                    f"The {passed} step is blocked by failed checks: "
                    f"{', '.join(self.blocked[passed])}. Fix them and re-run the checks.",
                    severity="error",
                    title="Blocked",
                )
                return
        target = self._screen_for(step_id)
        if self.screen_stack and len(self.screen_stack) > 1:
            self.switch_screen(target)
        else:
            self.push_screen(target)

    def _move(self, delta: int) -> None:
        ids = [s for s, _ in STEPS]
        current = self.current_step
        if current not in ids:
            return
        index = min(max(ids.index(current) + delta, 0), len(ids) - 1)
        self.goto_step(ids[index])

    def action_next_step(self) -> None:
        self._move(+1)

    def action_previous_step(self) -> None:
        self._move(-1)

    # ---- presets -----------------------------------------------------------------------
    def set_preset(self, preset: Preset, source: str) -> None:
        """Load another preset; every step screen already built refreshes from it."""
        self.preset = preset
        self.preset_source = source
        self.sub_title = f"preset: {preset.name}"
        for screen in self._step_screens.values():
            hook = getattr(screen, "preset_changed", None)
            if callable(hook):
                hook()
        self.notify(f"Loaded preset {preset.name}", title="Preset")

    def action_open_preset(self) -> None:
        from screens.preset_picker import PresetPicker

        def chosen(result: tuple[Preset, str] | None) -> None:
            if result is not None:
                self.set_preset(*result)

        self.push_screen(PresetPicker(), chosen)

    def action_save_preset(self) -> None:
        from screens.preset_picker import SavePresetDialog

        self.push_screen(SavePresetDialog(self.preset))

    def action_troubleshoot(self) -> None:
        run_id = self.current_run.name if self.current_run is not None else None
        self._open_troubleshoot(run_id, None)

    def on_open_troubleshoot(self, message: object) -> None:
        """The log pane's request: troubleshoot this run (or this log file)."""
        self._open_troubleshoot(
            getattr(message, "run_id", None), getattr(message, "log_path", None)
        )

    def _open_troubleshoot(self, run_id: str | None, log_path: Path | None) -> None:
        from screens.troubleshoot import TroubleshootScreen

        if isinstance(self.screen, TroubleshootScreen):
            return
        self.push_screen(TroubleshootScreen(run_id=run_id, log_path=log_path))

    def action_run_all(self) -> None:
        """Replay the open preset with the CLI's own pipeline; the Monitor follows the run."""
        from backend.replay import ReplayResult
        from screens.replay import RunAllScreen

        def finished(result: ReplayResult | None) -> None:
            if result is not None and result.run_dir is not None:
                self.current_run = result.run_dir
                self.goto_step("monitor")

        self.push_screen(RunAllScreen(self.preset), finished)

    def relaunch(self, preset: Preset) -> None:
        """Apply-and-relaunch from Troubleshoot: load the fixed preset, then the Launch step's
        own confirm-and-launch (one launch mechanism; the plan is shown before anything runs)."""
        from screens.troubleshoot import TroubleshootScreen

        self.set_preset(preset, f"{preset.name} (fixed)")
        if isinstance(self.screen, TroubleshootScreen):
            self.pop_screen()
        self.goto_step("launch")
        launch_screen = self._screen_for("launch")
        start = getattr(launch_screen, "action_launch", None)
        if callable(start):
            self.call_after_refresh(start)


def run_wizard(preset: str | None = None, attach: Path | None = None) -> int:
    """Open the wizard (the CLI's no-subcommand path). Returns the exit code."""
    source = preset or DEFAULT_PRESET
    loaded = load_preset(source)
    app = TrainwizApp(
        loaded,
        source,
        start_step="monitor" if attach is not None else "checks",
        attach_run=attach,
    )
    result = app.run()
    return int(result or 0)
