"""Step 2, Model: where the weights come from, getting them, and what they turn out to be.

The form edits the preset's ``model`` section; fetching (Hub, git-lfs, tiny) and validation run
in thread workers calling ``backend.model``, progress arrives as messages. The data check runs
the preset's training data through FastChat's rules and, once a tokenizer is there, measures
lengths against ``model_max_length``. Nothing is shown that was not measured.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import ValidationError
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Label, ProgressBar, Select, Static

from backend.data.check import DataReport, check_data
from backend.errors import TrainwizError
from backend.i18n import N_, _
from backend.model.fetch import EnsureResult, ensure_model, model_dir
from backend.model.hub import FetchProgress
from backend.model.placeholders import resolve_placeholders
from backend.model.ready import ModelReadiness, model_ready
from backend.model.validate import ModelReport, validate_model_dir
from backend.preset.schema import ModelSource
from backend.units import clock, human
from screens.base import StepScreen
from widgets.model_reports import data_summary, model_summary
from widgets.steady_select import SteadySelect

SOURCES = [
    ("Hugging Face Hub", "hf"),
    (N_("git-lfs clone (the seed's way)"), "git_lfs"),
    (N_("Local directory"), "local"),
    (N_("Tiny random Llama (no network)"), "tiny"),
    (N_("ModelScope (its own client)"), "modelscope"),
]
ACTION_LABEL = {
    "hf": N_("download"),
    "git_lfs": N_("clone"),
    "local": N_("check"),
    "tiny": N_("make"),
    "modelscope": N_("download"),
}


# What a fetch did (backend.model.fetch's action words), as the status line says it.
FETCH_ACTIONS = {
    "downloaded": N_("downloaded"),
    "cloned": N_("cloned"),
    "made": N_("made"),
    "kept": N_("kept"),
    "validated": N_("validated"),
    "local": N_("local"),
}


class ModelScreen(StepScreen):
    """Source form, fetch with progress, validation summary and data check summary."""

    STEP_ID = "model"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f", "fetch", N_("Fetch"), id="model.fetch"),
        Binding("v", "validate", N_("Validate"), id="model.validate", show=False),
        Binding("d", "check_data", N_("Check data"), id="model.check_data"),
        Binding("x", "cancel", N_("Cancel"), id="model.cancel", show=False),
    ]
    DEFAULT_CSS = """
    ModelScreen .model-form-row { height: auto; }
    ModelScreen .model-form-row Label { width: 8; padding: 1 0 0 1; }
    ModelScreen .model-form-row Select { width: 1fr; max-width: 42; }
    ModelScreen .model-form-row Input { width: 1fr; }
    ModelScreen #model-status { height: auto; margin: 0 0 0 1; }
    ModelScreen #model-progress { margin: 0 1; }
    ModelScreen #model-results { height: 1fr; }
    ModelScreen .model-pane { width: 1fr; border: round $secondary 50%; padding: 0 1; }
    """

    # Every worker message carries the preset generation it was started for: a fetch or check
    # still running when another preset is opened must not paint its result onto the new one.
    @dataclass
    class Progressed(Message):
        progress: FetchProgress
        generation: int = 0

    @dataclass
    class Ready(Message):
        """A fetch (or plain validation) ended with a report."""

        report: ModelReport
        action: str
        readiness: ModelReadiness | None = None
        generation: int = 0

    @dataclass
    class DataChecked(Message):
        report: DataReport
        generation: int = 0

    @dataclass
    class Failed(Message):
        what: str
        error: str
        generation: int = 0

    def __init__(self) -> None:
        super().__init__()
        self._cancel = threading.Event()
        self.report: ModelReport | None = None
        self.data_report: DataReport | None = None
        self.generation = 0  # bumped by preset_changed; stale worker messages are dropped

    def compose_body(self) -> ComposeResult:
        m = self.preset.model
        with Horizontal(id="model-form", classes="model-form-row"):
            yield Label(_("Source"))
            yield SteadySelect(
                [(_(label), kind) for label, kind in SOURCES],
                value=m.source,
                allow_blank=False,
                id="model-source",
            )
            yield Input(
                value=m.repo or m.git_url or "",
                placeholder=_("owner/name (Hub) or git URL"),
                id="model-repo",
            )
        with Horizontal(id="model-form-2", classes="model-form-row"):
            yield Label(_("Dir"))
            yield Input(value=m.dir, id="model-dir")
            yield Input(
                value=m.endpoint or "",
                placeholder=_("endpoint/mirror, e.g. https://hf-mirror.com"),
                id="model-endpoint",
            )
        yield Static(id="model-status")
        bar = ProgressBar(total=None, show_eta=False, id="model-progress")
        bar.display = False  # an idle bar with no total pulses as if a fetch were running
        yield bar
        with Horizontal(id="model-results"):
            with VerticalScroll(classes="model-pane", id="model-report-pane"):
                yield Static(_("Not validated yet."), id="model-report")
            with VerticalScroll(classes="model-pane", id="data-report-pane"):
                yield Static(_("Data not checked yet (press d)."), id="data-report")

    def on_mount(self) -> None:
        self._start()

    def _start(self) -> None:
        """Validate what is already there (real data), or say what to press."""
        self.query_one("#model-report-pane").border_title = _("Model")
        self.query_one("#data-report-pane").border_title = _("Training data")
        self._sync_form()
        target = model_dir(self.preset.model)
        if target.is_dir():
            self._status(_("Validating {target} …").format(target=target))
            self._validate(str(target))
        else:
            verb = _(ACTION_LABEL[self.preset.model.source])
            self._status(
                _("{target} does not exist yet: press f to {verb} the model (v validates).").format(
                    target=target, verb=verb
                )
            )
            self.action_check_data()  # the structure can be checked without a tokenizer

    # ---- form ------------------------------------------------------------------------------
    def _sync_form(self) -> None:
        source = self.query_one("#model-source", Select).value
        self.query_one("#model-repo", Input).disabled = source in ("local", "tiny")
        self.query_one("#model-endpoint", Input).disabled = source not in ("hf", "modelscope")

    @on(Select.Changed, "#model-source")
    def _source_changed(self) -> None:
        self._sync_form()

    def source_from_form(self) -> ModelSource:
        """The form as a ModelSource (validated by the schema); the preset keeps the rest."""
        kind = str(self.query_one("#model-source", Select).value)
        repo = self.query_one("#model-repo", Input).value.strip()
        update: dict[str, Any] = {
            "source": kind,
            "dir": self.query_one("#model-dir", Input).value.strip(),
            "endpoint": self.query_one("#model-endpoint", Input).value.strip() or None,
        }
        if kind in ("hf", "modelscope"):
            update["repo"] = repo or None
        elif kind == "git_lfs":
            is_url = "://" in repo or repo.startswith("git@")
            update["git_url" if is_url else "repo"] = repo or None
        data = {**self.preset.model.model_dump(), **update}
        return ModelSource.model_validate(data)

    # ---- actions -----------------------------------------------------------------------------
    def form_problems(self) -> list[str]:
        """``field: rule`` for each form value the schema rejects (empty when all are valid)."""
        try:
            self.source_from_form()
        except ValidationError as exc:
            return [
                f"model.{'.'.join(str(p) for p in e['loc']) or 'source'}: "
                + e["msg"].removeprefix("Value error, ")
                for e in exc.errors()
            ]
        return []

    def leave_problems(self) -> list[str]:
        return self.form_problems() if self.is_mounted else []

    def action_fetch(self) -> None:
        if self.refuse_if_blocked(_("Fetching the model")):
            return
        try:
            source = self.source_from_form()
        except ValidationError:
            self._status(
                _("Fix the form: {items}").format(items="; ".join(self.form_problems())), error=True
            )
            return
        if source != self.preset.model:
            model = self.preset.model_copy(update={"model": source})
            self.wizard.propose_preset(model, origin=self)
        self._cancel = threading.Event()
        bar = self.query_one("#model-progress", ProgressBar)
        bar.update(total=None, progress=0)
        bar.display = True
        self._status(
            _("Starting: {action} into {dir} … (x cancels)").format(
                action=_(ACTION_LABEL[source.source]), dir=model_dir(source)
            )
        )
        self._fetch(source, self._cancel)

    def action_cancel(self) -> None:
        self._cancel.set()
        self._status(_("Cancelling … partial files are kept and the next fetch resumes."))

    def action_validate(self) -> None:
        self._validate(str(model_dir(self.preset.model, self.query_one("#model-dir", Input).value)))

    def action_check_data(self) -> None:
        training = self.preset.training
        data = resolve_placeholders(training.data_path, None)
        target = model_dir(self.preset.model)
        tokenizer_dir = (
            str(target) if self.report is not None and self.report.tokenizer_files else None
        )
        self.query_one("#data-report", Static).update(_("Checking {data} …").format(data=data))
        self._check_data(data, tokenizer_dir, training.model_max_length)

    # ---- workers -------------------------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="model-fetch")
    def _fetch(self, source: ModelSource, cancel: threading.Event) -> None:
        generation, preset = self.generation, self.preset

        def progress(p: FetchProgress) -> None:
            self.post_message(self.Progressed(p, generation))

        try:
            result: EnsureResult = ensure_model(source, progress=progress, cancel=cancel)
        except TrainwizError as exc:
            self.post_message(self.Failed("fetch", str(exc), generation))
            return
        ready = model_ready(preset)
        self.post_message(self.Ready(result.report, result.action, ready, generation))

    @work(thread=True, exclusive=True, exit_on_error=False, group="model-validate")
    def _validate(self, path: str) -> None:
        generation, preset = self.generation, self.preset
        try:
            report = validate_model_dir(path)
        except TrainwizError as exc:
            self.post_message(self.Failed("validate", str(exc), generation))
            return
        self.post_message(self.Ready(report, "validated", model_ready(preset), generation))

    @work(thread=True, exclusive=True, exit_on_error=False, group="model-data")
    def _check_data(self, data: str, tokenizer_dir: str | None, max_length: int) -> None:
        generation = self.generation
        try:
            report = check_data(data, tokenizer_dir, max_length)
        except TrainwizError as exc:
            self.post_message(self.Failed("data", str(exc), generation))
            return
        self.post_message(self.DataChecked(report, generation))

    # ---- messages ----------------------------------------------------------------------------
    def on_model_screen_progressed(self, message: Progressed) -> None:
        if message.generation != self.generation:
            return  # started for a preset that is no longer open
        p = message.progress
        bar = self.query_one("#model-progress", ProgressBar)
        bar.update(total=max(p.total, 1), progress=p.bytes)
        self._status(
            _(
                "{files_done}/{files_total} files · {size} of {size2} · {size3}/s · ETA "
                "{eta}\n{file}: {size4} of {size5} · {size6}/s · ETA {eta2}"
            ).format(
                files_done=p.files_done,
                files_total=p.files_total,
                size=human(p.bytes),
                size2=human(p.total),
                size3=human(p.speed),
                eta=clock(p.eta),
                file=p.file,
                size4=human(p.file_bytes),
                size5=human(p.file_total),
                size6=human(p.file_speed),
                eta2=clock(p.file_eta),
            )
            + (f"\n{p.message}" if p.message else "")
        )

    def on_model_screen_ready(self, message: Ready) -> None:
        if message.generation != self.generation:
            return  # started for a preset that is no longer open
        self.report = message.report
        bar = self.query_one("#model-progress", ProgressBar)
        if bar.total is None:
            bar.update(total=1, progress=1)
        self.query_one("#model-report", Static).update(model_summary(message.report))
        verdict = (
            _("valid")
            if message.report.ok
            else _("{count} problem(s)").format(count=len(message.report.problems))
        )
        ready = message.readiness
        training = ""
        if ready is not None:  # the same answer launch and replay use
            training = (
                _(" Ready for training.")
                if ready.ready
                else _(" Not ready: {reason}.").format(reason=ready.reason)
            )
        action = _(FETCH_ACTIONS.get(message.action, message.action)).capitalize()
        self._status(
            _("{action}: {path} — {verdict}.").format(
                action=action, path=message.report.path, verdict=verdict
            )
            + training
        )
        if self.data_report is None or self.data_report.tokens is None:
            self.action_check_data()  # now that a tokenizer may be there, measure the data too

    def on_model_screen_data_checked(self, message: DataChecked) -> None:
        if message.generation != self.generation:
            return  # started for a preset that is no longer open
        current = self.data_report
        if current is not None and current.tokens is not None and message.report.tokens is None:
            return  # a late structure-only result must not hide the measured lengths
        self.data_report = message.report
        self.query_one("#data-report", Static).update(data_summary(message.report))

    def on_model_screen_failed(self, message: Failed) -> None:
        if message.generation != self.generation:
            return  # started for a preset that is no longer open
        if message.what == "data":
            self.query_one("#data-report", Static).update(Text(message.error, style="bold red"))
        else:
            self._status(message.error, error=True)

    def _status(self, text: str, error: bool = False) -> None:
        self.query_one("#model-status", Static).update(
            Text(text, style="bold red") if error else Text(text)
        )

    def preset_changed(self) -> None:
        """Refill the form in place (no widget is removed, so a worker's late message always
        finds its widget), then validate what the new preset points at."""
        self.generation += 1
        self.report = None
        self.data_report = None
        if not self.is_mounted:
            return
        m = self.preset.model
        self.query_one("#model-source", Select).value = m.source
        self.query_one("#model-repo", Input).value = m.repo or m.git_url or ""
        self.query_one("#model-dir", Input).value = m.dir
        self.query_one("#model-endpoint", Input).value = m.endpoint or ""
        self.query_one("#model-report", Static).update(_("Not validated yet."))
        self.query_one("#data-report", Static).update(_("Data not checked yet (press d)."))
        self._start()
