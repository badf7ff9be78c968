"""Run all: the wizard's replay — the same ``backend.replay.Replay`` pipeline as `trainwiz
replay`, in a thread worker, stopping after launch so the Monitor step follows the run live."""

from __future__ import annotations

import threading
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Label, RichLog, Static

from backend.errors import BadInput
from backend.i18n import N_, _
from backend.preset import Preset
from backend.replay import Replay, ReplayResult, StepReport

_STYLE = {"done": "green", "skipped": "cyan", "warned": "yellow", "failed": "bold red"}


class RunAllScreen(ModalScreen[ReplayResult | None]):
    """Checks → model → environment → launch for the open preset, with each step's outcome.

    Warnings stop the run the first time; ``y`` runs again accepting them (the CLI's --yes).
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "accept_warnings", N_("Accept warnings and run"), id="run_all.accept"),
        Binding("escape", "close", N_("Close"), id="run_all.close"),
    ]
    DEFAULT_CSS = """
    RunAllScreen { align: center middle; }
    RunAllScreen > Vertical { width: 100; height: 30; border: thick $accent; padding: 0 1; background: $surface; }
    RunAllScreen RichLog { height: 1fr; }
    RunAllScreen #run-all-status { height: auto; color: $text-muted; }
    """

    class Reported(Message):
        def __init__(self, report: StepReport) -> None:
            super().__init__()
            self.report = report

    class Progressed(Message):
        def __init__(self, step: str, text: str) -> None:
            super().__init__()
            self.step = step
            self.text = text

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, RunAllScreen.Progressed) and message.step == self.step

    class Finished(Message):
        def __init__(self, result: ReplayResult | None, error: str | None) -> None:
            super().__init__()
            self.result = result
            self.error = error

    def __init__(self, preset: Preset) -> None:
        super().__init__()
        self.preset = preset
        self.result: ReplayResult | None = None
        self.running = False
        self._cancel = threading.Event()

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(
                _("Run all: {name} — checks → model → environment → launch").format(
                    name=self.preset.name
                )
            )
            yield RichLog(id="run-all-log", wrap=True, markup=False, max_lines=2000)
            yield Static("", id="run-all-status")

    def on_mount(self) -> None:
        self._start(accept_warnings=False)

    def _start(self, *, accept_warnings: bool) -> None:
        self.running = True
        self._cancel = threading.Event()
        self.query_one("#run-all-status", Static).update(_("running… (escape cancels)"))
        self._run(accept_warnings)

    @work(thread=True, exclusive=True, exit_on_error=False, group="run-all")
    def _run(self, accept_warnings: bool) -> None:
        def progress(step: str, text: str) -> None:
            self.post_message(self.Progressed(step, text))

        def emit(report: StepReport) -> None:
            self.post_message(self.Reported(report))

        replay = Replay(
            self.preset,
            accept_warnings=accept_warnings,
            detach=True,  # the Monitor step follows the run; closing the wizard never stops it
            cancel=self._cancel,
            progress=progress,
        )
        try:
            result = replay.run(emit=emit)
        except BadInput as exc:
            self.post_message(self.Finished(None, "\n".join(exc.problems)))
            return
        self.post_message(self.Finished(result, None))

    @on(Reported)
    def _reported(self, message: Reported) -> None:
        report = message.report
        line = Text()
        line.append(f"{report.outcome:>7} ", style=_STYLE[report.outcome])
        line.append(f"{report.step}: ", style="bold")
        line.append(report.message)
        log = self.query_one(RichLog)
        log.write(line)
        for detail in report.details:
            log.write(Text(f"          {detail}"))

    @on(Progressed)
    def _progressed(self, message: Progressed) -> None:
        self.query_one("#run-all-status", Static).update(f"{message.step}: {message.text}")

    @on(Finished)
    def _finished(self, message: Finished) -> None:
        self.running = False
        self.result = message.result
        status = self.query_one("#run-all-status", Static)
        if message.error is not None:
            status.update(_("refused: {error}").format(error=message.error))
            return
        result = message.result
        assert result is not None
        if result.failed_step == "checks" and any(
            "warnings need" in r.message for r in result.reports
        ):
            status.update(_("Stopped on warnings: press y to accept them and run again."))
            return
        if result.failed_step:
            lines = [_("Stopped at {step}.").format(step=result.failed_step), *result.findings[:5]]
            status.update("\n".join(lines))
            return
        status.update(_("Run {run_id} started: opening the Monitor.").format(run_id=result.run_id))
        self.dismiss(result)

    def action_accept_warnings(self) -> None:
        if not self.running:
            self.query_one(RichLog).write(Text(_("— accepting warnings —"), style="yellow"))
            self._start(accept_warnings=True)

    def action_close(self) -> None:
        self._cancel.set()
        self.dismiss(None)
