"""The App's flows that cross steps: Troubleshoot and Compare from anywhere, Run all (asked
first, then the CLI's own replay pipeline), and the resume / apply-and-relaunch that Troubleshoot
hands back to the Monitor and the Launch step (one resume and one launch mechanism each).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.app import App

from backend.i18n import N_, _

if TYPE_CHECKING:
    from textual.screen import Screen

    from backend.preset import Preset


class FlowsMixin(App[int]):
    """Mixed into ``TrainwizApp``; the attributes below are the App's."""

    current_run: Path | None
    last_launched: Path | None
    resume_requested: Path | None

    if TYPE_CHECKING:  # the App's own (tui.app.TrainwizApp, tui.app_runs.RunsMixin)
        preset: Preset

        def goto_step(self, step_id: str) -> bool: ...

        def step_screen(self, step_id: str) -> Screen[Any] | None: ...

        def refuse_if_form_invalid(self, what: str) -> bool: ...

        def set_preset(self, preset: Preset, source: str) -> None: ...

        def with_runs(self, then: Any) -> None: ...

        def live_run_warnings(self, rows: list[Any]) -> list[str]: ...

    # ---- troubleshoot, run all, relaunch -----------------------------------------------
    def action_troubleshoot(self) -> None:
        run_id = self.current_run.name if self.current_run is not None else None
        self._open_troubleshoot(run_id, None)

    def action_compare(self) -> None:
        """Runs side by side (screens/compare.py), the Monitor's run ticked first."""
        from screens.compare import CompareScreen  # deferred: loaded when opened

        if not isinstance(self.screen, CompareScreen):
            first = [self.current_run.name] if self.current_run is not None else None
            self.push_screen(CompareScreen(first))

    def action_queue(self) -> None:
        """The run queue (screens/queue.py): F7 or the palette's "Run queue"."""
        from screens.queue import QueueScreen  # deferred: loaded when opened

        if not isinstance(self.screen, QueueScreen):
            self.push_screen(QueueScreen(), self._queue_closed)

    def _queue_closed(self, chosen: Any) -> None:
        """The Queue view's Enter/m (an item's run) or f (follow the queue): the Monitor, on
        that run or following the queue (``screens.queue.FollowsQueue``)."""
        run_dir = getattr(chosen, "run_dir", None)
        if chosen is None:
            return
        if run_dir is not None:
            self.current_run = run_dir
        if not self.goto_step("monitor"):
            return
        monitor = self.step_screen("monitor")
        follow = getattr(monitor, "follow_queue", None)
        if monitor is not None and callable(follow):  # after it mounted, when it is new
            monitor.call_later(follow, run_dir is None)

    def on_open_troubleshoot(self, message: object) -> None:
        """The log pane's request: troubleshoot this run (or this log file)."""
        self._open_troubleshoot(
            getattr(message, "run_id", None), getattr(message, "log_path", None)
        )

    def _open_troubleshoot(self, run_id: str | None, log_path: Path | None) -> None:
        from screens.troubleshoot import TroubleshootScreen  # deferred: loads the diagnosis

        if isinstance(self.screen, TroubleshootScreen):
            return
        self.push_screen(TroubleshootScreen(run_id=run_id, log_path=log_path))

    def action_run_all(self) -> None:
        """Replay the open preset with the CLI's own pipeline, after saying what will run (and
        that this preset is training already, when it is)."""
        if self.refuse_if_form_invalid(_("Run all")):
            return
        self.with_runs(self._ask_run_all)

    def _ask_run_all(self, rows: list[Any]) -> None:
        from backend import paths  # deferred: Run all only
        from backend.replay import STEP_ORDER  # deferred: loaded on Run all
        from screens.dialogs import ConfirmDialog, extra_warnings  # deferred: with Run all

        p = self.preset
        dialog = ConfirmDialog(
            "\n".join([_("Run all steps for {name}?").format(name=p.name),
                       *self.live_run_warnings(rows)]),
            [" → ".join(s for s in STEP_ORDER if s != "follow")
             + _(" (steps already done are skipped)"),
             _("training: {nproc} process(es) on {device}, runner {runner}").format(
                 nproc=p.launch.nproc_per_node, device=p.launch.device, runner=p.launch.runner)],
            [_("this machine; model in {dir}").format(dir=p.model.dir),
             _("run directory under {path}").format(path=paths.runs_dir()),
             _("output: {path}").format(path=p.training.output_dir)],
            extra_warnings(p),
            yes=N_("Run all"),
        )  # fmt: skip

        def answered(yes: bool | None) -> None:
            if yes and not self.refuse_if_form_invalid(_("Run all")):
                self._start_run_all()

        self.push_screen(dialog, answered)

    def _start_run_all(self) -> None:
        from backend.replay import ReplayResult  # deferred: loaded on Run all
        from screens.replay import RunAllScreen  # deferred: with Run all

        def finished(result: ReplayResult | None) -> None:
            if result is not None and result.run_dir is not None:
                self.current_run = result.run_dir
                self.last_launched = result.run_dir
                self.goto_step("monitor")

        self.push_screen(RunAllScreen(self.preset), finished)

    def resume_run(self, run_dir: Path) -> None:
        """Resume from Troubleshoot: the run on the Monitor, whose Resume asks first (the one
        resume flow: ``screens.run_actions``); it picks up ``resume_requested`` once it knows
        whether the run can resume."""
        from screens.troubleshoot import TroubleshootScreen  # deferred: loads the diagnosis

        if isinstance(self.screen, TroubleshootScreen):
            self.pop_screen()
        self.current_run = run_dir
        self.resume_requested = run_dir
        self.goto_step("monitor")
        monitor = self.step_screen("monitor")
        for bar in monitor.query("RunActions") if monitor is not None else []:
            if getattr(bar, "run_dir", None) == run_dir:  # already shown: ask it again now
                bar.refresh_offers()  # type: ignore[attr-defined]

    def relaunch(self, preset: Preset) -> None:
        """Apply-and-relaunch from Troubleshoot: load the fixed preset, then the Launch step's
        own confirm-and-launch (one launch mechanism; the plan is shown before anything runs)."""
        from screens.troubleshoot import TroubleshootScreen  # deferred: loads the diagnosis

        if self.refuse_if_form_invalid(_("Apply and relaunch")):
            return
        self.set_preset(preset, f"{preset.name} (fixed)")
        if isinstance(self.screen, TroubleshootScreen):
            self.pop_screen()
        self.goto_step("launch")
        start = getattr(self.step_screen("launch"), "request_launch", None)
        if callable(start):
            self.call_after_refresh(start)
