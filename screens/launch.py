"""Step 5, Launch: the exact plan, one confirmation, a detached run, then the Monitor.

The plan is built in a worker (naming the environment image can ask the Docker daemon) and shown
command by command, as ``trainwiz plan`` prints it. Launching writes the run directory and starts
the detached watcher; the training then belongs to the watcher, so leaving the wizard (or losing
SSH) never stops it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from backend import paths
from backend.errors import BadInput, TrainwizError
from backend.plan import Plan, build_plan
from backend.runs import LaunchResult, launch
from backend.runs.launch import step_outlook
from screens.base import StepScreen


class ConfirmLaunch(ModalScreen[bool]):
    """Launch for real? (y / n). The summary repeats what will run and where."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Launch", id="launch_confirm_yes"),
        Binding("n,escape", "answer(False)", "Cancel", id="launch_confirm_no"),
    ]
    DEFAULT_CSS = """
    ConfirmLaunch { align: center middle; }
    ConfirmLaunch > Vertical {
        width: 72; height: auto; border: thick $accent; background: $surface; padding: 1 2;
    }
    ConfirmLaunch #confirm-buttons { height: auto; margin: 1 0 0 0; align-horizontal: right; }
    ConfirmLaunch Button { margin: 0 0 0 2; }
    """

    def __init__(self, summary: str) -> None:
        super().__init__()
        self.summary = summary

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.summary, id="confirm-summary")
            with Horizontal(id="confirm-buttons"):
                yield Button("Cancel (n)", id="confirm-no")
                yield Button("Launch (y)", id="confirm-yes", variant="success")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-yes")


class LaunchScreen(StepScreen):
    """Shows the plan; ``l`` asks for confirmation and launches; ``m`` opens the Monitor."""

    STEP_ID = "launch"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("l", "launch", "Launch", id="launch_start"),
        Binding("r", "replan", "Re-plan", id="launch_replan"),
        Binding("m", "monitor", "Monitor", id="launch_monitor"),
    ]
    DEFAULT_CSS = """
    LaunchScreen #launch-summary { height: auto; margin: 0 0 1 0; }
    LaunchScreen #launch-plan { height: 1fr; border: round $secondary 50%; padding: 0 1; }
    LaunchScreen #launch-status { height: auto; margin: 1 0 0 0; }
    """

    @dataclass
    class Planned(Message):
        plan: Plan | None
        error: str | None
        outlook: dict[str, str] | None = None

    @dataclass
    class Launched(Message):
        result: LaunchResult | None
        error: str | None

    def __init__(self) -> None:
        super().__init__()
        self.plan: Plan | None = None
        self.launching = False
        self.last_run: Path | None = None

    def compose_body(self) -> ComposeResult:
        yield Static(self._summary_text(), id="launch-summary")
        with VerticalScroll(id="launch-plan"):
            yield Static(Text("building the plan…", style="italic"), id="launch-plan-text")
        yield Static(self._status_text(), id="launch-status")

    def on_mount(self) -> None:
        self.action_replan()

    def preset_changed(self) -> None:
        if self.is_mounted:
            self.query_one("#launch-summary", Static).update(self._summary_text())
            self.action_replan()

    # ---- plan ----------------------------------------------------------------------------
    def action_replan(self) -> None:
        self.plan = None
        self._plan_worker()

    @work(thread=True, exclusive=True, exit_on_error=False, group="launch-plan")
    def _plan_worker(self) -> None:
        try:
            plan = build_plan(self.preset)
        except (BadInput, TrainwizError) as exc:
            self.post_message(self.Planned(None, str(exc)))
            return
        try:
            outlook: dict[str, str] | None = step_outlook(self.preset)
        except (BadInput, TrainwizError) as exc:
            outlook = {"train": f"cannot start: {exc}"}
        self.post_message(self.Planned(plan, None, outlook))

    def on_launch_screen_planned(self, message: Planned) -> None:
        target = self.query_one("#launch-plan-text", Static)
        if message.plan is None:
            target.update(Text(f"The plan cannot be built:\n{message.error}", style="bold red"))
            return
        self.plan = message.plan
        target.update(self._plan_text(message.plan, message.outlook or {}))
        self._update_status()

    def _summary_text(self) -> Text:
        p = self.preset
        text = Text()
        text.append(f"{p.name}", style="bold")
        text.append(f"  runner {p.launch.runner} · entry {p.launch.entry} · ")
        text.append(f"{p.launch.nproc_per_node} process(es) on {p.launch.device}\n")
        text.append(
            f"Runs go to {paths.runs_dir()}/<run id>/ (preset, plan, status, log, metrics). "
            "The run is detached: closing trainwiz or losing SSH does not stop it.",
            style="dim",
        )
        return text

    @staticmethod
    def _plan_text(plan: Plan, outlook: dict[str, str]) -> Text:
        text = Text()
        for number, step in enumerate(plan.steps, 1):
            text.append(f"{number}. [{step.group}] {step.title}", style="bold")
            if outlook.get(step.id):
                style = "red" if "cannot" in outlook[step.id] else "yellow"
                text.append(f"  ({outlook[step.id]})", style=style)
            text.append("\n")
            if step.note:
                text.append(f"   {step.note}\n", style="dim")
            text.append(f"   {step.display()}\n\n", style="cyan")
        return text

    # ---- launch --------------------------------------------------------------------------
    def _status_text(self) -> Text:
        if self.launching:
            return Text("Launching…", style="italic")
        if self.last_run is not None:
            return Text(
                f"Launched run {self.last_run.name}. Press m for the Monitor.", style="green"
            )
        return Text("Not launched. Press l to launch (you will be asked to confirm).")

    def _update_status(self, error: str | None = None) -> None:
        status = self.query_one("#launch-status", Static)
        status.update(Text(error, style="bold red") if error else self._status_text())

    def action_launch(self) -> None:
        if self.launching:
            return
        if self.plan is None:
            self.notify("The plan is not ready yet.", severity="warning", title="Launch")
            return
        p = self.preset
        summary = (
            f"Launch {p.name}?\n\n"
            f"{len(self.plan.steps)} steps, runner {p.launch.runner}, "
            f"{p.launch.nproc_per_node} process(es) on {p.launch.device}.\n"
            f"Output: {p.training.output_dir}\n"
            f"The model and environment steps run only if their result is missing."
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self.launching = True
                self._update_status()
                self._launch_worker()

        self.app.push_screen(ConfirmLaunch(summary), answered)

    @work(thread=True, exclusive=True, exit_on_error=False, group="launch-start")
    def _launch_worker(self) -> None:
        try:
            result = launch(self.preset)
        except BadInput as exc:
            self.post_message(self.Launched(None, "\n".join(exc.problems)))
            return
        except TrainwizError as exc:
            self.post_message(self.Launched(None, str(exc)))
            return
        self.post_message(self.Launched(result, None))

    def on_launch_screen_launched(self, message: Launched) -> None:
        self.launching = False
        if message.result is None:
            self._update_status(f"Launch refused: {message.error}")
            self.notify("Launch refused; see the message below the plan.", severity="error")
            return
        self.last_run = message.result.run_dir
        self.wizard.current_run = message.result.run_dir
        self._update_status()
        self.notify(f"Run {message.result.run_id} started.", title="Launch")
        self.wizard.goto_step("monitor")

    def action_monitor(self) -> None:
        self.wizard.goto_step("monitor")
