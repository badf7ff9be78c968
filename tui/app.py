"""The trainwiz App: six steps in order, one preset at the centre, keyboard only.

Where things live:
- the steps (ids, titles, readiness): ``backend.steps.STEPS``;
- navigation: ``TrainwizApp.goto_step`` — each step is a Textual *mode* with its own screen
  stack, so going back shows that step's live screen, fully repainted (never a cached screen
  re-pushed after being switched away, which left the old frame on the terminal);
- the preset: the ``TrainwizApp.preset`` reactive, changed only through ``propose_preset``;
  every step screen watches it (``screens.base.StepScreen``);
- keys: ``tui.keymap`` (defaults, the user's keymap file, binding ids ``screen.action``).
- runs the App asks about: ``tui.app_runs``; flows across steps (Run all, Troubleshoot,
  resume, relaunch): ``tui.app_flows``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, cast

from textual.app import App
from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.keys import format_key
from textual.reactive import var
from textual.screen import Screen

from backend.checks.model import CheckResult
from backend.i18n import N_, _, current_language, set_language
from backend.preset import Preset, load_preset
from backend.steps import STEP_IDS, STEPS, Machine, blocked_steps
from tui.app_flows import FlowsMixin
from tui.app_runs import RunsMixin, leave_now
from tui.keymap import NEXT_KEYS, PREVIOUS_KEYS, load_user_keymap
from tui.step_screens import build_ahead_later, import_step_modules_in_background, step_factory
from tui.typeahead import PaletteTypeAhead
from widgets.footer import TranslatedFooter
from widgets.step_indicator import StepIndicator

DEFAULT_PRESET = "tiny-cpu"


class StepCommands(Provider):
    """Command palette: trainwiz's own commands, listed even before anything is typed."""

    def _commands(self) -> list[tuple[str, Callable[[], Any], str]]:
        app = cast(TrainwizApp, self.app)
        out: list[tuple[str, Callable[[], Any], str]] = [
            (_("Go to step {number}: {title}").format(number=s.number, title=_(s.title)),
             partial(app.goto_step, s.id),
             _("open the {title} step").format(title=_(s.title))) for s in STEPS
        ]  # fmt: skip
        out += [
            (_("Open preset…"), app.action_open_preset, _("load a shipped preset or a YAML file")),
            (_("Save the current preset"), app.action_save_preset, _("write it as YAML")),
            (_("Troubleshoot a run or a log"), app.action_troubleshoot, _("diagnose a failure")),
            (
                _("Runs on this machine"),
                app.action_runs,
                _("state, preset, step and loss of every run; Enter shows one on the Monitor"),
            ),
            (_("Chat with the run's model"), app.action_chat, app.chat_help()),
            (_("Compare runs"), app.action_compare, _("loss curves, costs, preset changes")),
            (_("Run queue"), app.action_queue, _("queued runs and sweeps: state, GPUs, pause")),
            (_("Run all steps (replay the preset)"), app.action_run_all, _("asks first")),
            (
                "Language: 中文 / English",
                app.action_switch_language,
                _("switch the wizard between Chinese and English"),
            ),
        ]
        return out

    async def discover(self) -> Hits:
        for label, action, help_text in self._commands():
            yield DiscoveryHit(label, action, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for label, action, help_text in self._commands():
            score = matcher.match(label)
            if score > 0:
                yield Hit(score, matcher.highlight(label), action, help=help_text)


class TrainwizApp(PaletteTypeAhead, RunsMixin, FlowsMixin):
    """The wizard. ``preset`` is the job being assembled; screens propose changes to it."""

    CSS_PATH = "app.tcss"
    TITLE = "trainwiz"
    COMMANDS: ClassVar = {StepCommands} | App.COMMANDS
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(NEXT_KEYS, "next_step", N_("Next"), id="app.next_step", priority=True),
        Binding(PREVIOUS_KEYS, "previous_step", N_("Back"), id="app.previous_step", priority=True),
        Binding("ctrl+o", "open_preset", N_("Preset"), id="app.open_preset"),
        Binding("ctrl+s", "save_preset", N_("Save"), id="app.save_preset", show=False),
        Binding("ctrl+t", "troubleshoot", N_("Troubleshoot"), id="app.troubleshoot", show=False),
        Binding("ctrl+r", "run_all", N_("Run all"), id="app.run_all", show=False),
        Binding("f7", "queue", N_("Queue"), id="app.queue", show=False),
        Binding("ctrl+q", "quit", N_("Quit"), id="app.quit", priority=True),
    ]

    preset: var[Preset] = var(cast(Preset, None), init=False, always_update=True)
    machine: var[Machine] = var(Machine(), init=False, always_update=True)

    def __init__(
        self,
        preset: Preset,
        preset_source: str,
        *,
        start_step: str = "checks",
        attach_run: Path | None = None,
        plan_gpu: str | None = None,
    ) -> None:
        super().__init__()
        self.set_reactive(TrainwizApp.preset, preset)
        self.preset_source = preset_source
        self.preset_origin: object | None = None
        self.edited = False
        self.start_step = start_step
        self.current_run: Path | None = attach_run
        self.resume_requested: Path | None = None  # Troubleshoot's resume, for the Monitor
        self.plan_gpu = plan_gpu
        self.last_launched: Path | None = None  # the run this session started (Launch, Run all)
        self._picked_run: Path | None = None  # shown as the preset's run (tui/app_runs.py)
        self.served: list[Path] = []  # runs whose server this wizard started
        self.sub_title = _("preset: {name}").format(name=preset.name)
        for step_id in STEP_IDS:
            self.add_mode(step_id, step_factory(self, step_id))

    def get_key_display(self, binding: Binding) -> str:
        """``alt→`` rather than ``alt+→``: the footer keeps room for every important binding."""
        modifiers, key = binding.parse_key()
        if binding.key_display is None and modifiers == ["alt"]:
            return "alt" + format_key(key)
        return super().get_key_display(binding)

    def on_mount(self) -> None:
        keymap, problems = load_user_keymap()
        if keymap:
            self.set_keymap(keymap)
        for problem in problems:
            self.notify(problem, title="Keymap", severity="error", timeout=30)
        self.switch_mode(self.start_step)
        import_step_modules_in_background()
        build_ahead_later(self, self.start_step)
        self.show_preset_run()

    # ---- steps (the one navigation mechanism) ------------------------------------------
    @property
    def current_step(self) -> str:
        return self.current_mode if self.current_mode in STEP_IDS else ""

    def step_screen(self, step_id: str) -> Screen[Any] | None:
        """The live screen of a step already opened (None before its first visit)."""
        try:
            stack = self.get_screen_stack(step_id) if step_id in STEP_IDS else []
        except KeyError:  # Textual knows a mode's stack only once it has been shown
            return None
        return stack[0] if stack else None

    def goto_step(self, step_id: str) -> bool:
        """Show a step. Refused only while the step shown has a field that is not valid: an
        edit that never reached the preset must not be dropped without a word."""
        if step_id not in STEP_IDS:
            raise KeyError(step_id)
        if step_id == self.current_step:
            return True
        here = self.step_screen(self.current_step) if self.current_step else None
        problems = list(getattr(here, "leave_problems", lambda: [])()) if here else []
        if problems:
            title = _(next(s.title for s in STEPS if s.id == self.current_step))
            self.notify(
                "\n".join(problems) + "\n" + _("Fix the value (or open the preset again: ctrl+o)."),
                title=_("Can't leave {title}").format(title=title),
                severity="error",
                timeout=10,
            )
            self._focus_problem(here)
            return False
        self.switch_mode(step_id)
        build_ahead_later(self, step_id)
        return True

    # ---- the form guards every action that uses the preset -----------------------------
    def form_problems(self) -> tuple[Screen[Any] | None, list[str]]:
        """(the step screen, ``field: rule`` lines) for values typed but rejected: the preset
        does not hold what those fields show, so nothing may run or save it meanwhile."""
        for step_id in STEP_IDS:
            screen = self.step_screen(step_id)
            problems = list(getattr(screen, "leave_problems", lambda: [])()) if screen else []
            if problems:
                return screen, problems
        return None, []

    def refuse_if_form_invalid(self, what: str) -> bool:
        """True (and says which field and rule, focus on it) while a field shows a rejected
        value: ``what`` would otherwise use a value the screen does not show."""
        screen, problems = self.form_problems()
        if not problems:
            return False
        self.notify(
            "\n".join(problems)
            + "\n"
            + _("The preset does not hold what the field shows: fix the value first."),
            title=_("Not done: {what}").format(what=what),
            severity="error",
            timeout=10,
        )
        self._focus_problem(screen)
        return True

    def _focus_problem(self, screen: Screen[Any] | None) -> None:
        if screen is None:
            return
        if screen is not self.screen and screen in self.screen_stack:
            while self.screen is not screen and len(self.screen_stack) > 1:
                self.pop_screen()  # a dialog over the form: the field must be seen to be fixed
        focus = getattr(screen, "focus_problem", None)
        if callable(focus):
            focus()

    def _move(self, delta: int) -> None:
        current = self.current_step
        if current not in STEP_IDS or self.screen is not self.step_screen(current):
            return  # a dialog is open: it answers first
        index = min(max(STEP_IDS.index(current) + delta, 0), len(STEP_IDS) - 1)
        self.goto_step(STEP_IDS[index])

    def action_next_step(self) -> None:
        self._move(+1)

    def action_previous_step(self) -> None:
        self._move(-1)

    # ---- language (live switch from the palette) ---------------------------------------
    def action_switch_language(self) -> None:
        """Chinese <-> English, live: the frame (step bar, footer, header) repaints at once and
        each step body is rebuilt the way a new preset rebuilds it (now or when next shown)."""
        set_language("en" if current_language() != "en" else "zh_CN")
        self.watch_preset(self.preset)
        for step_id in STEP_IDS:
            screen = self.step_screen(step_id)
            if screen is None:
                continue
            for indicator in screen.query(StepIndicator):
                indicator.refresh()
            for footer in screen.query(TranslatedFooter):
                footer.refresh(recompose=True)
            if screen is self.screen and hasattr(screen, "language_changed"):
                screen.language_changed()
            elif hasattr(screen, "_preset_stale"):
                screen._preset_stale = True  # rebuilt in the new language when next shown
        self.notify(_("Language: English"), title="trainwiz")

    # ---- the machine (what the checks found) -------------------------------------------
    def set_check_results(self, results: list[CheckResult], *, complete: bool = True) -> None:
        self.machine = Machine(list(results), complete)

    @property
    def blocked(self) -> dict[str, list[str]]:
        return {str(k): v for k, v in blocked_steps(self.machine.checks or []).items()}

    # ---- the preset (one state) --------------------------------------------------------
    def propose_preset(
        self,
        preset: Preset,
        *,
        source: str | None = None,
        origin: object | None = None,
        note: str = "",
    ) -> None:
        """The one way to change the preset. ``source`` names a newly opened preset; ``origin``
        is the screen that made the edit (it already shows it); ``note`` is said to the user."""
        if source is not None:
            self.preset_source = source
            self.edited = False
            # The checks were the last preset's: Launch waits for this one's (Checks runs them
            # as soon as it sees none), and the Monitor may show this preset's run.
            self.machine = Machine()
        else:
            self.edited = True
        self.preset_origin = origin
        self.preset = preset
        if note:
            self.notify(note, title="Preset")
        if source is not None:
            self.show_preset_run()

    def watch_preset(self, preset: Preset) -> None:
        edited = _(" (edited)") if self.edited else ""
        self.sub_title = _("preset: {name}").format(name=preset.name) + edited

    def set_preset(self, preset: Preset, source: str) -> None:
        """Load another preset (picker, relaunch)."""
        self.propose_preset(preset, source=source, note=f"Loaded preset {preset.name}")

    def action_open_preset(self) -> None:
        from screens.preset_picker import PresetPicker  # deferred: loaded when opened

        def chosen(result: tuple[Preset, str] | None) -> None:
            if result is not None:
                self.set_preset(*result)

        self.push_screen(PresetPicker(), chosen)

    def action_save_preset(self) -> None:
        from screens.preset_picker import SavePresetDialog  # deferred: loaded on Save

        if self.refuse_if_form_invalid(_("Save")):
            return
        hyper = self.step_screen("hyperparams")
        cross = [p for p in getattr(hyper, "problems", []) if p not in self.form_problems()[1]]
        if cross:
            self.notify(_("Not saved: ") + "; ".join(cross), severity="error", timeout=8)
            return

        def saved(path: Path | None) -> None:
            if path is not None:
                self.preset_source = str(path)
                self.edited = False
                self.watch_preset(self.preset)

        self.push_screen(SavePresetDialog(self.preset), saved)


def run_wizard(
    preset: str | None = None, attach: Path | None = None, gpu: str | None = None
) -> int:
    """Open the wizard (the CLI's no-subcommand path). Returns 2 without a terminal; otherwise
    the process ends with the App's exit code once the terminal is restored (``leave_now``)."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print(
            _(
                "trainwiz: the wizard needs a terminal (stdin and stdout are not a TTY); "
                "for scripts use a subcommand, e.g. 'trainwiz replay PRESET --yes' or "
                "'trainwiz plan tiny-cpu' (see 'trainwiz --help')"
            ),
            file=sys.stderr,
        )
        return 2
    source = preset or DEFAULT_PRESET
    loaded = load_preset(source)
    if gpu is not None:
        from backend.planner import gpu_spec  # deferred: only with --gpu

        gpu_spec(gpu)  # an unknown name is bad input (exit 2) before the wizard opens
    app = TrainwizApp(
        loaded,
        source,
        start_step="monitor" if attach is not None else "checks",
        attach_run=attach,
        plan_gpu=gpu,
    )
    app.leave_quickly = True
    result = app.run()
    leave_now(int(result or 0))
