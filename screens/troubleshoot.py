"""Troubleshoot view: pick a run (or a log path, or paste a log), read what went wrong, fix it.

Reachable from anywhere (ctrl+t, the palette, the monitor's log pane). Diagnosis runs in a
thread worker; a chosen fix is never applied silently: a dialog shows the preset diff first,
then "apply and relaunch" calls the relaunch callback the app provides, or, where launching is
not available, saves the fixed preset and says where.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from rich.cells import cell_len
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Header, Input, OptionList, Static, TextArea
from textual.widgets.option_list import Option

from backend.diagnosis import Diagnosis, Finding, Fix, apply_fixes, diagnose_file, diagnose_text
from backend.diagnosis import preset_diff as make_diff
from backend.errors import TrainwizError
from backend.i18n import N_, _
from backend.paths import home, runs_dir
from backend.preset import Preset, load_preset, save_preset
from backend.rundir import RunDir
from backend.runs.diagnose_run import DiagnosableRun, diagnosable_runs, diagnose_run
from screens.fix_review import FixReviewDialog
from widgets.footer import TranslatedFooter

Relaunch = Callable[[Preset], None]
SEVERITY_COLOUR = {"error": "red", "warning": "yellow", "info": "cyan"}
# Severity words as shown (the same words as `trainwiz diagnose`).
SEVERITY_WORDS = {"error": N_("ERROR"), "warning": N_("WARNING"), "info": N_("INFO")}


def _pad_cells(text: str, width: int) -> str:
    """Pad to ``width`` terminal cells (错误 is two characters but four cells)."""
    return text + " " * max(0, width - cell_len(text))


class DiagnosisReady(Message):
    def __init__(
        self, diagnosis: Diagnosis, source: str, resume: tuple[Fix, Path] | None = None
    ) -> None:
        super().__init__()
        self.diagnosis = diagnosis
        self.source = source
        self.resume = resume  # the "resume from checkpoint-N" fix and its run, when it has one


class DiagnosisProgress(Message):
    def __init__(self, source: str, done: int, total: int | None) -> None:
        super().__init__()
        self.source = source
        self.done = done
        self.total = total

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, DiagnosisProgress)


class DiagnosisFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class TroubleshootScreen(Screen[None]):
    """Runs and a log source on the left; findings, explanation and fixes on the right."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", N_("Back"), id="troubleshoot.close"),
        Binding("ctrl+r", "diagnose_paste", N_("Diagnose pasted log"), id="troubleshoot.paste"),
        Binding("f5", "refresh_runs", N_("Refresh runs"), id="troubleshoot.refresh"),
    ]
    DEFAULT_CSS = """
    TroubleshootScreen #ts-left { width: 46; padding: 0 1; }
    TroubleshootScreen #ts-right { width: 1fr; padding: 0 1; }
    TroubleshootScreen #ts-runs { height: 1fr; min-height: 4; }
    TroubleshootScreen #ts-paste { height: 8; }
    TroubleshootScreen #ts-findings { height: auto; max-height: 10; }
    TroubleshootScreen #ts-detail { height: 1fr; }
    TroubleshootScreen #ts-fixes { height: auto; max-height: 10; }
    TroubleshootScreen #ts-status { height: auto; color: $text-muted; }
    """

    def __init__(
        self,
        run_id: str | None = None,
        log_path: Path | None = None,
        *,
        relaunch: Relaunch | None = None,
    ) -> None:
        super().__init__()
        self._initial = (run_id, log_path)
        self._relaunch = relaunch
        self._runs: list[DiagnosableRun] = []
        self._preset: Preset | None = None
        self._preset_source = ""
        self.diagnosis: Diagnosis | None = None
        self._finding: Finding | None = None
        self._resume: tuple[Fix, Path] | None = None
        self._cancel = threading.Event()

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Horizontal():
            with Vertical(id="ts-left"):
                yield Static(_("Runs"), classes="section-title")
                yield OptionList(id="ts-runs")
                yield Input(placeholder=_("…or a log file path, then Enter"), id="ts-path")
                yield Static(_("…or paste a log below, then ctrl+r"), classes="muted")
                yield TextArea(id="ts-paste")
            with Vertical(id="ts-right"):
                yield Static(_("Pick a run or a log to diagnose."), id="ts-status")
                yield OptionList(id="ts-findings")
                with VerticalScroll(id="ts-detail"):
                    yield Static("", id="ts-explain")
                yield Static(_("Fixes"), classes="section-title")
                yield OptionList(id="ts-fixes")
        yield TranslatedFooter()

    def on_mount(self) -> None:
        self.action_refresh_runs()
        run_id, log_path = self._initial
        entry = next((r for r in self._runs if r.run_id == run_id), None)
        if entry is not None:
            self._diagnose_run(entry)
        elif log_path is not None:
            self._start(Path(log_path), None, str(log_path))

    # ---- sources ------------------------------------------------------------------------
    def action_refresh_runs(self) -> None:
        self._runs = diagnosable_runs()
        runs = self.query_one("#ts-runs", OptionList)
        runs.clear_options()
        if not self._runs:
            empty = _("No runs with a train.log under {path}").format(path=runs_dir())
            runs.add_option(Option(empty, disabled=True))
            return
        for entry in self._runs:
            runs.add_option(Option(f"{entry.run_id}  [{entry.state}]", id=entry.run_id))
        runs.highlighted = 0

    @on(OptionList.OptionSelected, "#ts-runs")
    def _run_chosen(self, event: OptionList.OptionSelected) -> None:
        entry = next((r for r in self._runs if r.run_id == event.option.id), None)
        if entry is not None:
            self._diagnose_run(entry)

    def _diagnose_run(self, entry: DiagnosableRun) -> None:
        self._start(entry.log, entry.preset, _("run {id}").format(id=entry.run_id))

    @on(Input.Submitted, "#ts-path")
    def _path_given(self, event: Input.Submitted) -> None:
        if event.value.strip():
            path = Path(event.value.strip()).expanduser()
            self._start(path, None, str(path))

    def action_diagnose_paste(self) -> None:
        text = self.query_one("#ts-paste", TextArea).text
        if not text.strip():
            self._status(_("The paste box is empty: paste a log into it first."))
            return
        self._start(None, None, _("pasted log"), text=text)

    def _start(
        self, log: Path | None, preset_file: Path | None, source: str, text: str = ""
    ) -> None:
        self._preset, self._preset_source = self._choose_preset(preset_file)
        self._status(_("Diagnosing {source}…").format(source=source))
        self._cancel.set()  # a newer request replaces a running scan
        self._cancel = threading.Event()
        self._diagnose(log, text, self._preset, source, self._cancel)

    def _choose_preset(self, preset_file: Path | None) -> tuple[Preset | None, str]:
        """The run's own preset when it has one, else the preset open in the wizard."""
        if preset_file is not None:
            try:
                return load_preset(preset_file), str(preset_file)
            except TrainwizError:
                pass
        app_preset = getattr(self.app, "preset", None)
        if isinstance(app_preset, Preset):
            return app_preset, str(getattr(self.app, "preset_source", app_preset.name))
        return None, ""

    @work(thread=True, exclusive=True, exit_on_error=False)
    def _diagnose(
        self,
        log: Path | None,
        text: str,
        preset: Preset | None,
        source: str,
        cancel: threading.Event,
    ) -> None:
        def progress(done: int, total: int | None) -> None:
            self.post_message(DiagnosisProgress(source, done, total))

        resume = None
        try:
            if log is not None and RunDir(log.parent).status_file.is_file():
                # A run: its record's cause and the resume fix join the log's findings.
                run_result = diagnose_run(
                    log.parent, cancel=cancel, progress=progress, preset=preset
                )
                result = run_result.diagnosis
                if run_result.resume is not None:  # resuming beats a relaunch
                    resume = (run_result.resume, log.parent)
            elif log is not None:
                result = diagnose_file(log, cancel=cancel, progress=progress, preset=preset)
            else:
                result = diagnose_text(text, preset=preset)
        except TrainwizError as exc:
            self.post_message(DiagnosisFailed(str(exc)))
            return
        if not cancel.is_set():
            self.post_message(DiagnosisReady(result, source, resume))

    # ---- results ------------------------------------------------------------------------
    def _status(self, text: str) -> None:
        self.query_one("#ts-status", Static).update(text)

    def on_diagnosis_progress(self, message: DiagnosisProgress) -> None:
        if message.total and message.done < message.total:
            share = 100 * message.done // message.total
            self._status(
                _("Diagnosing {source}… {share}% of {size} MiB").format(
                    source=message.source, share=share, size=message.total >> 20
                )
            )

    def on_unmount(self) -> None:
        self._cancel.set()

    def on_diagnosis_failed(self, message: DiagnosisFailed) -> None:
        self._status(message.error)

    def on_diagnosis_ready(self, message: DiagnosisReady) -> None:
        self.diagnosis = message.diagnosis
        self._resume = message.resume
        findings = self.query_one("#ts-findings", OptionList)
        findings.clear_options()
        self.query_one("#ts-fixes", OptionList).clear_options()
        self.query_one("#ts-explain", Static).update("")
        against = (
            _("; fixes against preset {name}").format(name=self._preset.name)
            if self._preset
            else ""
        )
        if not message.diagnosis.findings:
            self._status(
                _("{source}: no known failure found{against}.").format(
                    source=message.source, against=against
                )
            )
            return
        self._status(
            _("{source}: {count} finding(s){against}.").format(
                source=message.source, count=len(message.diagnosis.findings), against=against
            )
        )
        for number, finding in enumerate(message.diagnosis.findings):
            label = Text()
            severity = _(SEVERITY_WORDS.get(finding.severity, finding.severity.upper()))
            label.append(_pad_cells(severity, 7), style=SEVERITY_COLOUR[finding.severity])
            node = f"{finding.node.split()[0]}  " if finding.node else ""
            where = _("line {line}").format(line=finding.line)
            label.append(f" {finding.category}  {node}{where}  {finding.title}")
            findings.add_option(Option(label, id=str(number)))
        findings.highlighted = 0
        self._show(message.diagnosis.findings[0])
        findings.focus()

    @on(OptionList.OptionHighlighted, "#ts-findings")
    @on(OptionList.OptionSelected, "#ts-findings")
    def _finding_chosen(
        self, event: OptionList.OptionHighlighted | OptionList.OptionSelected
    ) -> None:
        if self.diagnosis is not None and event.option.id is not None:
            self._show(self.diagnosis.findings[int(event.option.id)])
            if isinstance(event, OptionList.OptionSelected):
                self.query_one("#ts-fixes", OptionList).focus()

    def _show(self, finding: Finding) -> None:
        self._finding = finding
        detail = Text()
        if finding.node:  # a multi-node run: whose log this line is from
            detail.append(_("on {node}").format(node=finding.node) + ", ", style="bold cyan")
        detail.append(_("line {line}").format(line=finding.line), style="bold")
        if finding.count > 1:
            detail.append(_(" (+{count} more)").format(count=finding.count - 1))
        detail.append(f"\n{finding.text}\n\n", style="italic")
        detail.append(finding.explanation)
        self.query_one("#ts-explain", Static).update(detail)
        fixes = self.query_one("#ts-fixes", OptionList)
        fixes.clear_options()
        for number, fix in enumerate(finding.fixes):
            kind = _("preset change") if fix.changes else _("advice")
            if self._resume is not None and fix is self._resume[0]:
                kind = _("resume: asks first")
            label = _("{number}. {title}  ({kind})").format(
                number=number + 1, title=fix.title, kind=kind
            )
            fixes.add_option(Option(label, id=str(number)))
        if finding.fixes:
            fixes.highlighted = 0
        else:
            fixes.add_option(Option(_("No fix known for this finding."), disabled=True))

    @on(OptionList.OptionSelected, "#ts-fixes")
    def _fix_chosen(self, event: OptionList.OptionSelected) -> None:
        if self._finding is None or event.option.id is None:
            return
        fix = self._finding.fixes[int(event.option.id)]
        resume_run = getattr(self.app, "resume_run", None)
        if self._resume is not None and fix is self._resume[0] and callable(resume_run):
            resume_run(self._resume[1])  # the Monitor's Resume: confirmation, then the attempt
            return
        if not fix.changes or self._preset is None:
            why = _("no preset is open") if self._preset is None else _("it is not a preset change")
            self.notify(f"{fix.title}: {fix.reason}", title=_("Advice ({why})").format(why=why))
            return
        try:
            fixed = apply_fixes(self._preset, fix)
        except TrainwizError as exc:
            self.notify(str(exc), severity="error", title=_("Fix"))
            return
        relaunch = self._relaunch_callback()
        action = (
            _("Apply: the fixed preset is launched again.")
            if relaunch
            else _(
                "Apply: launching is not available here, so the fixed preset is saved and loaded."
            )
        )
        self.app.push_screen(
            FixReviewDialog(fix, make_diff(self._preset, fixed), action),
            lambda ok: self._apply(fixed) if ok else None,
        )

    def _relaunch_callback(self) -> Relaunch | None:
        if self._relaunch is not None:
            return self._relaunch
        found = getattr(self.app, "relaunch", None)
        return found if callable(found) else None

    def _apply(self, fixed: Preset) -> None:
        relaunch = self._relaunch_callback()
        if relaunch is not None:
            relaunch(fixed)
            self.notify(
                _("Relaunching with the fixed preset {name}").format(name=fixed.name),
                title=_("Fix applied"),
            )
            return
        target = home() / "presets" / f"{fixed.name}.fixed.yaml"
        try:
            path = save_preset(fixed, target)
        except (TrainwizError, OSError) as exc:
            self.notify(
                _("Could not save the fixed preset: {error}").format(error=exc), severity="error"
            )
            return
        setter = getattr(self.app, "set_preset", None)
        if callable(setter):
            setter(fixed, str(path))
        self._preset, self._preset_source = fixed, str(path)
        self._status(
            _(
                "Launch is not available here: saved the fixed preset to {path} and loaded it."
            ).format(path=path)
        )

    def action_close(self) -> None:
        self.app.pop_screen()
