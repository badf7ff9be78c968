"""Step 5, Launch: the exact plan, one confirmation, a detached run, then the Monitor.

The plan is built in a worker (naming the environment image can ask the Docker daemon) and shown
command by command, as ``trainwiz plan`` prints it. Launching writes the run directory and starts
the detached watcher; the training then belongs to the watcher, so leaving the wizard (or losing
SSH) never stops it.

The planner's verdict for this machine (``backend.runs.plangate``, the launch's own gate) is
shown above the plan; a preset predicted not to fit is launched only after the confirmation says
so and the user chooses "Launch anyway" (the CLI's ``--ignore-plan``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static

from backend import paths
from backend.errors import BadInput, TrainwizError
from backend.i18n import N_, _
from backend.plan import Plan
from backend.runs.launch import LaunchResult, launch
from backend.runs.plangate import PlanVerdict, plan_verdict
from backend.runs.spec import plan_spec
from backend.steps import STEPS, Readiness, blockers
from screens.base import StepScreen
from screens.dialogs import ConfirmDialog, extra_warnings
from screens.queue import ask_to_queue

# plan step id -> the step-table step whose readiness it shows
PLAN_TO_STEP = {"model": "model", "environment": "image", "image": "image", "train": "launch"}
READY_STYLE = {"ready": "green", "needs-action": "yellow", "blocked": "bold red"}


class LaunchScreen(StepScreen):
    """Shows the plan; ``l`` asks for confirmation and launches; ``m`` opens the Monitor."""

    STEP_ID = "launch"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("l", "launch", N_("Launch"), id="launch.start"),
        Binding("a", "add_to_queue", N_("Add to queue"), id="launch.queue"),
        Binding("r", "replan", N_("Re-plan"), id="launch.replan", show=False),
        Binding("m", "monitor", N_("Monitor"), id="launch.monitor"),
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
        readiness: dict[str, Readiness] | None = None
        verdict: PlanVerdict | None = None

    @dataclass
    class Launched(Message):
        result: LaunchResult | None
        error: str | None

    def __init__(self) -> None:
        super().__init__()
        self.plan: Plan | None = None
        self.verdict: PlanVerdict | None = None  # None: not knowable here (no gate)
        self.launching = False
        self._launch_pending = False
        self.last_run: Path | None = None

    def compose_body(self) -> ComposeResult:
        yield Static(self._summary_text(), id="launch-summary")
        with VerticalScroll(id="launch-plan"):
            yield Static(Text(_("building the plan…"), style="italic"), id="launch-plan-text")
        yield Static(self._status_text(), id="launch-status")

    def on_mount(self) -> None:
        self.action_replan()

    def on_screen_resume(self) -> None:
        if self.is_mounted and self.query("#launch-status"):
            self._update_status()  # a run started elsewhere (Run all) since the last visit

    def preset_changed(self) -> None:
        if self.is_mounted:
            self.query_one("#launch-summary", Static).update(self._summary_text())
            self.action_replan()

    # ---- plan ----------------------------------------------------------------------------
    def action_replan(self) -> None:
        self.plan = None
        self.verdict = None
        self._plan_worker()

    @work(thread=True, exclusive=True, exit_on_error=False, group="launch-plan")
    def _plan_worker(self) -> None:
        try:
            plan = plan_spec(self.preset).plan  # the launch's own decisions, as trainwiz plan
        except (BadInput, TrainwizError) as exc:
            self.post_message(self.Planned(None, str(exc)))
            return
        machine = self.machine
        readiness: dict[str, Readiness] = {}
        for s in STEPS:  # the step table's answer, as launch's prepare will see it
            try:
                readiness[s.id] = s.ready(self.preset, machine)
            except (BadInput, TrainwizError) as exc:
                readiness[s.id] = Readiness("needs-action", [str(exc)])
        verdict = plan_verdict(self.preset)  # the launch's gate, asked before the launch is
        self.post_message(self.Planned(plan, None, readiness, verdict))

    def on_launch_screen_planned(self, message: Planned) -> None:
        target = self.query_one("#launch-plan-text", Static)
        if message.plan is None:
            target.update(
                Text(_("The plan cannot be built:") + f"\n{message.error}", style="bold red")
            )
            return
        self.plan = message.plan
        self.verdict = message.verdict
        self.query_one("#launch-summary", Static).update(self._summary_text())
        target.update(self._plan_text(message.plan, message.readiness or {}))
        self._update_status()
        if self._launch_pending:
            self._launch_pending = False
            self.action_launch()

    def _summary_text(self) -> Text:
        p = self.preset
        text = Text()
        text.append(f"{p.name}", style="bold")
        text.append(
            _("  runner {runner} · entry {entry} · ").format(
                runner=p.launch.runner, entry=p.launch.entry
            )
        )
        text.append(
            _("{n} process(es) on {device}").format(
                n=p.launch.nproc_per_node, device=p.launch.device
            )
            + "\n"
        )
        text.append(
            _(
                "Runs go to {runs}/<run id>/ (preset, plan, status, log, metrics). "
                "The run is detached: closing trainwiz or losing SSH does not stop it."
            ).format(runs=paths.runs_dir()),
            style="dim",
        )
        verdict = self.verdict
        if verdict is not None:
            text.append("\n" + _("Plan for this machine: {numbers}").format(
                numbers=verdict.numbers()), style="green" if verdict.fits else "bold red")  # fmt: skip
            if not verdict.fits:
                text.append("\n" + self._verdict_fix(verdict), style="red")
        return text

    def _verdict_fix(self, verdict: PlanVerdict) -> str:
        return _(
            "'trainwiz tune {name}' (or Tune, F5 on the Hyperparameters step) {fix}. Press l "
            "to launch anyway: it will likely run out of memory."
        ).format(name=self.preset.name, fix=verdict.fix)

    @staticmethod
    def _plan_text(plan: Plan, readiness: dict[str, Readiness]) -> Text:
        text = Text()
        for number, step in enumerate(plan.steps, 1):
            text.append(f"{number}. [{step.group}] {step.title}", style="bold")
            ready = readiness.get(PLAN_TO_STEP.get(step.id, ""))
            if ready is not None:
                words = {"ready": N_("ready: skipped"), "needs-action": N_("runs first"),
                         "blocked": N_("blocked")}  # fmt: skip
                if step.id == "train":
                    words = {"ready": N_("ready"), "needs-action": N_("after the steps above"),
                             "blocked": N_("blocked")}  # fmt: skip
                text.append(f"  ({_(words[ready.state])})", style=READY_STYLE[ready.state])
                if ready.state == "blocked":
                    text.append("\n   " + "; ".join(ready.reasons), style="red")
            text.append("\n")
            if step.note:
                text.append(f"   {step.note}\n", style="dim")
            text.append(f"   {step.display()}\n\n", style="cyan")
        return text

    # ---- launch --------------------------------------------------------------------------
    def _status_text(self) -> Text:
        if self.launching:
            return Text(_("Launching…"), style="italic")
        session_run = getattr(self.app, "last_launched", None)
        if isinstance(session_run, Path) and session_run != self.last_run:
            self.last_run = session_run  # Run all launched it (the same launch, another way in)
        text = Text()
        if self.last_run is not None:
            text.append(
                _("Launched run {run}. Press m for the Monitor.").format(run=self.last_run.name),
                style="green",
            )
        gate = self._checks_gate()
        if gate is None:
            if self.last_run is None:
                text.append(_("Not launched. Press l to launch (you will be asked to confirm)."))
            return text
        if self.last_run is None:
            text.append(_("Not launched."))
        return text.append("\n").append_text(gate)  # never l past a blocker or before checks

    def _checks_gate(self) -> Text | None:
        """Why l is not offered: a failed check that blocks Launch (named), or this preset's
        checks not done yet; None once they ran and nothing blocks."""
        machine = self.machine
        found = blockers(self.step_id, machine)
        if found:
            named = "; ".join(f"{r.id}: {r.summary}" for r in found)
            return Text(
                _("Launch is blocked by {checks}. Fix it, then re-run the checks (step 1).").format(
                    checks=named
                ),
                style="bold red",
            )
        if machine.checks is None:
            return Text(
                _(
                    "The checks have not run for this preset: Checks (step 1) runs them; "
                    "Launch is offered once they are done."
                ),
                style="yellow",
            )
        if not machine.complete:
            return Text(
                _("The checks for this preset are running… Launch is offered once they are done."),
                style="italic",
            )
        return None

    def show_blockers(self) -> None:
        """New check results (or a new preset's, none yet) change what the status line offers."""
        super().show_blockers()
        if self.query("#launch-status"):
            self._update_status()

    def _update_status(self, error: str | None = None) -> None:
        status = self.query_one("#launch-status", Static)
        status.update(Text(error, style="bold red") if error else self._status_text())

    def confirm_dialog(self, live: list[str] | None = None) -> ConfirmDialog:
        """What will run and where, as the plan says it; ``live``: this preset's runs now."""
        assert self.plan is not None
        p = self.preset
        runs = [f"{n}. {step.title}" for n, step in enumerate(self.plan.steps, 1)]
        runs.append(_("(the model and environment steps run only if their result is missing)"))
        where = [
            _("this machine, runner {runner}: {n} process(es) on {device}").format(
                runner=p.launch.runner, n=p.launch.nproc_per_node, device=p.launch.device
            ),
            _("run directory: {runs}/<run id>/ (detached: survives closing trainwiz)").format(
                runs=paths.runs_dir()
            ),
            _("output: {dir}").format(dir=p.training.output_dir),
        ]
        over = self.verdict is not None and not self.verdict.fits
        title = _("Launch {name} anyway?") if over else _("Launch {name}?")
        warnings = extra_warnings(p)
        if self.machine.checks is None or not self.machine.complete:  # l pressed before them
            warnings.insert(0, _("the checks have not finished for this preset: what this "
                                 "machine lacks is not known yet (Checks, step 1)"))  # fmt: skip
        if self.verdict is not None and over:  # said first: the plan predicts it runs out
            warnings.insert(0, _("WARNING the plan for this machine: {numbers}").format(
                numbers=self.verdict.numbers()))  # fmt: skip
            warnings.insert(1, self._verdict_fix(self.verdict))
        return ConfirmDialog(
            "\n".join([title.format(name=p.name), *(live or [])]),  # seen first
            runs,
            where,
            warnings,
            yes=N_("Launch anyway") if over else N_("Launch"),
        )

    def request_launch(self) -> None:
        """Launch (after the confirmation) as soon as the plan is built: relaunch's way in."""
        if self.plan is None:
            self._launch_pending = True
        else:
            self.action_launch()

    def action_launch(self) -> None:
        if self.launching:
            return
        if self.refuse_if_form_invalid(_("Launch")):
            return
        if self.refuse_if_blocked(_("Launching")):
            return
        if self.plan is None:
            self.notify(_("The plan is not ready yet."), severity="warning", title=_("Launch"))
            return

        # the confirmation said what the plan predicts: "Launch anyway" is the override
        ignore_plan = self.verdict is not None and not self.verdict.fits

        def answered(yes: bool | None) -> None:
            if yes and not self.refuse_if_form_invalid(_("Launch")):
                self.launching = True
                self._update_status()
                self._launch_worker(ignore_plan)

        def ask(rows: list[object]) -> None:
            warn = getattr(self.app, "live_run_warnings", None)
            live = warn(rows) if callable(warn) else []
            self.app.push_screen(self.confirm_dialog(live), answered)

        with_runs = getattr(self.app, "with_runs", None)
        if callable(with_runs):
            with_runs(ask)  # is this preset training already? said in the dialog
        else:
            ask([])

    @work(thread=True, exclusive=True, exit_on_error=False, group="launch-start")
    def _launch_worker(self, ignore_plan: bool = False) -> None:
        try:
            result = launch(self.preset, ignore_plan=ignore_plan)
        except BadInput as exc:
            self.post_message(self.Launched(None, "\n".join(exc.problems)))
            return
        except TrainwizError as exc:
            self.post_message(self.Launched(None, str(exc)))
            return
        self.post_message(self.Launched(result, None))

    def action_add_to_queue(self) -> None:
        """Queue the preset (screens/queue.py asks as Launch does, "anyway" included): it
        starts when its GPUs (or a CPU slot) are free."""
        if not self.refuse_if_form_invalid(_("Add to queue")):
            ask_to_queue(self, self.preset, self.verdict, self._update_status)

    def on_launch_screen_launched(self, message: Launched) -> None:
        self.launching = False
        if message.result is None:
            self._update_status(_("Launch refused: {error}").format(error=message.error))
            self.notify(_("Launch refused; see the message below the plan."), severity="error")
            return
        self.last_run = message.result.run_dir
        self.wizard.current_run = message.result.run_dir
        if hasattr(self.app, "last_launched"):
            self.app.last_launched = message.result.run_dir
        self._update_status()
        self.notify(_("Run {run} started.").format(run=message.result.run_id), title=_("Launch"))
        for note in message.result.notes:
            # What launch changed on its own (a busy master_port replaced): said, not silent.
            self.notify(note, severity="warning", title=_("Launch"), timeout=20)
        self.wizard.goto_step("monitor")

    def action_monitor(self) -> None:
        self.wizard.goto_step("monitor")
