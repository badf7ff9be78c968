"""Step 3, Image: which image this machine can train in, pulling it, building the environment once.

A host-runner preset trains in a Python venv, not a container: the step then speaks of that venv
only (where it is, whether it is built) and ``b`` builds it and makes it the preset's
``environment.venv``, so Launch trains in exactly what was built.

The table is ``backend.images.survey_images``: the catalog plus local images, each judged against
this machine's driver and GPUs and the preset. Enter makes the highlighted image the preset's;
pulling shows each layer; building streams the builder's log and, on failure, the diagnosis
findings. Everything blocking runs in thread workers; the screen only renders their messages.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import ClassVar

from rich.cells import cell_len
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, RichLog, Static

from backend.diagnosis.build_log import build_explained
from backend.errors import TrainwizError
from backend.i18n import N_, _
from backend.images.build import BuildResult, env_image_tag
from backend.images.events import BuildStep, LayerProgress, LogLine
from backend.images.host import HostGpus
from backend.images.plan import plan_environment
from backend.images.pull import PullResult, pull_image
from backend.images.survey import ENV_PREFIX, ImageRow, ImagesSurvey, own_suggestion, survey_images
from backend.images.venv import VenvResult, build_host_env
from screens.base import StepScreen
from screens.dialogs import ConfirmDialog, extra_warnings
from widgets.image_text import (
    VERDICT_MARK,
    VERDICT_STYLE,
    VERDICT_WORDS,
    build_result_lines,
    build_summary,
    host_line,
    layers_text,
    reasons_text,
    venv_text,
)


def _cell_width(cell: str | Text) -> int:
    return cell.cell_len if isinstance(cell, Text) else cell_len(cell)


class ImageScreen(StepScreen):
    """Image table with verdicts, reasons for the highlighted image, pull and build log."""

    STEP_ID = "image"
    # Tests pin the machine facts and skip the daemon so the screen is reproducible.
    HOST_OVERRIDE: ClassVar[HostGpus | None] = None
    INCLUDE_LOCAL: ClassVar[bool] = True
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "use", N_("Use"), id="image.use"),
        Binding("p", "pull", N_("Pull"), id="image.pull"),
        Binding("b", "build", N_("Build"), id="image.build"),
        Binding("a", "toggle_all", N_("Show all"), id="image.toggle_all", show=False),
        Binding("r", "refresh", N_("Refresh"), id="image.refresh", show=False),
        Binding("x", "cancel", N_("Cancel"), id="image.cancel", show=False),
    ]
    DEFAULT_CSS = """
    ImageScreen #image-host { height: auto; padding: 0 1; }
    ImageScreen #image-main { height: 1fr; }
    ImageScreen #image-table { width: 2fr; }
    ImageScreen #image-reasons { width: 1fr; max-width: 50; border: round $secondary 50%; padding: 0 1; }
    ImageScreen #image-activity { height: 9; border: round $secondary 50%; }
    ImageScreen #image-layers { height: auto; max-height: 4; padding: 0 1; display: none; }
    ImageScreen #image-log { height: 1fr; }
    """

    @dataclass
    class Surveyed(Message):
        survey: ImagesSurvey

    @dataclass
    class Event(Message):
        event: object

    @dataclass
    class Pulled(Message):
        result: PullResult

    @dataclass
    class Built(Message):
        result: BuildResult | VenvResult

    @dataclass
    class Failed(Message):
        what: str
        error: str

    def __init__(self, *, step_id: str | None = None) -> None:
        super().__init__(step_id=step_id)
        self.survey: ImagesSurvey | None = None
        self.show_all = False
        self.pull_layers: dict[str, LayerProgress] = {}
        self.last_build: BuildResult | VenvResult | None = None
        self._cancel = threading.Event()

    def compose_body(self) -> ComposeResult:
        yield Static(_("Judging images against this machine…"), id="image-host")
        with Horizontal(id="image-main"):
            yield DataTable(id="image-table", cursor_type="row", zebra_stripes=True)
            yield Static("", id="image-reasons")
        with Vertical(id="image-activity"):
            yield Static("", id="image-layers")
            yield RichLog(id="image-log", max_lines=2000, wrap=False, markup=False)

    def on_mount(self) -> None:
        self._set_columns([])
        if self.host_runner:
            self._log(_("b builds the training venv once (cached by a hash of its inputs)"), "dim")
        else:
            # one hint per line: the log does not wrap (build output), so a long line is cut
            for hint in (
                _("Enter uses the highlighted image · p pulls it"),
                _("b builds the environment image once (cached by a hash of its inputs)"),
                _("a shows all · r refreshes · x cancels"),
            ):
                self._log(hint, "dim")
        self.action_refresh()

    # ---- survey ------------------------------------------------------------------------
    def action_refresh(self) -> None:
        self.refresh_bindings()
        host = self.host_runner
        self.query_one("#image-main").display = not host
        if host:
            self._venv_state()
        else:
            self._survey()

    @work(thread=True, exclusive=True, exit_on_error=False, group="image-survey")
    def _survey(self) -> None:
        try:
            survey = survey_images(self.preset, self.HOST_OVERRIDE, self.INCLUDE_LOCAL)
        except TrainwizError as exc:
            self.post_message(self.Failed("survey", str(exc)))
            return
        self.post_message(self.Surveyed(survey))

    @dataclass
    class VenvState(Message):
        text: Text

    @property
    def host_runner(self) -> bool:
        return self.preset.launch.runner == "host"

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A host preset has no image to use, pull or list: those keys leave the footer."""
        return not (action in ("use", "pull", "toggle_all") and self.host_runner)

    @work(thread=True, exclusive=True, exit_on_error=False, group="image-survey")
    def _venv_state(self) -> None:
        from backend.images.ready import (  # deferred: worker thread, not at screen open
            environment_ready,
            training_bin,
            trains_in_built_venv,
        )

        p = self.preset
        wanted: list[str] | None = None
        try:
            plan = plan_environment(p, self.HOST_OVERRIDE)
            wanted = [s for s in (plan.torch_spec, plan.fastchat_spec) if s] + plan.requirements
        except (TrainwizError, OSError):
            pass
        ready = environment_ready(p)
        torchrun = str(training_bin(p)) if ready else None
        # whether Launch trains in the venv b builds (else in trainwiz's own environment or PATH)
        own = bool(p.environment.venv) or (ready and trains_in_built_venv(p))
        self.post_message(self.VenvState(venv_text(p.name, wanted, torchrun, own,
                                                   p.environment.venv)))  # fmt: skip

    @on(VenvState)
    def _show_venv(self, message: VenvState) -> None:
        self.query_one("#image-host", Static).update(message.text)

    def _own_tag(self) -> str | None:
        try:
            return env_image_tag(self.preset, self.HOST_OVERRIDE)
        except (TrainwizError, OSError):
            return None

    @on(Surveyed)
    def _show_survey(self, message: Surveyed) -> None:
        self.survey = message.survey
        suggestion = own_suggestion(message.survey, self._own_tag())
        self.query_one("#image-host", Static).update(host_line(message.survey, suggestion))
        self._fill_table()

    def _visible_rows(self) -> list[ImageRow]:
        """The preset's own image first (marked ●, the cursor on it), then the survey's order
        (newest first). Pinned at the top it is seen without scrolling: a cursor on a row far
        down made the table scroll once its size settled, by a row more or less with timing."""
        if self.survey is None:
            return []
        current = self.preset.environment.image
        own = self._own_tag()
        rows = sorted(self.survey.rows, key=lambda r: r.image.ref != current)
        return [
            r
            for r in rows
            if self.show_all
            or r.image.ref == current
            or (r.compat.verdict != "incompatible"
                and (not r.image.ref.startswith(ENV_PREFIX) or r.image.ref == own))
        ]  # fmt: skip

    def _set_columns(self, cells: list[tuple[str | Text, ...]]) -> None:
        """The table's columns, each as wide as its widest cell or label: measured here, so
        the header and the rows are laid out at once (a DataTable measures auto-width columns
        only when the app is next idle, and a frame drawn before that had a header at the
        old widths above rows at the new ones)."""
        labels = ("", _("verdict"), _("image"), "torch", "CUDA", _("flavor"), _("local"))
        table = self.query_one(DataTable)
        table.clear(columns=True)
        for index, label in enumerate(labels):
            widths = [cell_len(label)] + [_cell_width(row[index]) for row in cells]
            table.add_column(label, width=max(widths))

    def _fill_table(self) -> None:
        table = self.query_one(DataTable)
        current = self.preset.environment.image
        cells: list[tuple[str | Text, ...]] = []
        keys: list[str] = []
        for row in self._visible_rows():
            verdict = row.compat.verdict
            style = VERDICT_STYLE[verdict]
            cells.append((
                "●" if row.image.ref == current else "",
                Text(f"{VERDICT_MARK[verdict]} {_(VERDICT_WORDS[verdict])}", style=style),
                row.image.ref,
                row.image.torch or "?",
                row.image.cuda or "-",
                row.image.flavor or "?",
                "yes" if row.image.local else "",
            ))  # fmt: skip
            keys.append(row.image.ref)
        self._set_columns(cells)
        for key, row_cells in zip(keys, cells, strict=True):
            table.add_row(*row_cells, key=key)
        if table.row_count:  # the preset's own image, when listed (_visible_rows)
            table.move_cursor(row=0)
            self._show_reasons(0)

    def _selected(self) -> ImageRow | None:
        rows = self._visible_rows()
        cursor = self.query_one(DataTable).cursor_row
        return rows[cursor] if 0 <= cursor < len(rows) else None

    def _show_reasons(self, index: int) -> None:
        rows = self._visible_rows()
        if 0 <= index < len(rows):
            text = reasons_text(rows[index], self.preset.environment.image)
            self.query_one("#image-reasons", Static).update(text)

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_reasons(event.cursor_row)

    @on(DataTable.RowSelected)
    def _selected_row(self, event: DataTable.RowSelected) -> None:
        """Enter on the table selects the row there; it means the same as the screen's Enter."""
        event.stop()
        self.action_use()

    def action_toggle_all(self) -> None:
        self.show_all = not self.show_all
        self._fill_table()

    def action_use(self) -> None:
        row = self._selected()
        if row is None:
            return
        env = self.preset.environment.model_copy(update={"image": row.image.ref})
        self.wizard.propose_preset(
            self.preset.model_copy(update={"environment": env}),
            origin=self,
            note=f"Image chosen: {row.image.ref} ({row.compat.verdict})",
        )
        self._fill_table()
        self.action_refresh()

    # ---- pull and build ----------------------------------------------------------------
    def _log(self, text: str, style: str = "") -> None:
        self.query_one("#image-log", RichLog).write(Text(text, style=style))

    def action_cancel(self) -> None:
        self._cancel.set()

    def action_pull(self) -> None:
        if self.host_runner:
            self.notify(_("This preset trains in a host venv: there is no image to pull."))
            return
        if self.refuse_if_blocked(_("Pulling an image")):
            return
        row = self._selected()
        if row is None:
            return
        self._cancel = threading.Event()
        self.pull_layers = {}
        self._log(_("pulling {ref}").format(ref=row.image.ref), "bold")
        self._pull(row.image.ref, self._cancel)

    @work(thread=True, exclusive=True, exit_on_error=False, group="image-job")
    def _pull(self, ref: str, cancel: threading.Event) -> None:
        def emit(event: object) -> None:
            self.post_message(self.Event(event))

        try:
            result = pull_image(ref, progress=emit, cancel=cancel)
        except TrainwizError as exc:
            self.post_message(self.Failed("pull", str(exc)))
            return
        self.post_message(self.Pulled(result))

    def action_build(self) -> None:
        """Say what will be built and where, then build only after a yes."""
        if self.refuse_if_blocked(_("Building the environment")):
            return
        p = self.preset
        runner = p.launch.runner
        try:
            target = env_image_tag(p, self.HOST_OVERRIDE) if runner == "docker" else "a venv"
        except TrainwizError as exc:
            self._log(str(exc), "bold red")
            return
        runs, where = build_summary(p, target)
        question = _("Build the {runner} environment for {name}?").format(
            runner=runner, name=p.name
        )
        dialog = ConfirmDialog(question, runs, where, extra_warnings(p), yes=N_("Build"))

        def answered(yes: bool | None) -> None:
            if yes:
                self._cancel = threading.Event()
                self._log(
                    _("building the {runner} environment ({target})").format(
                        runner=runner, target=target
                    ),
                    "bold",
                )
                self._build(self._cancel)

        self.app.push_screen(dialog, answered)

    @work(thread=True, exclusive=True, exit_on_error=False, group="image-job")
    def _build(self, cancel: threading.Event) -> None:
        def emit(event: object) -> None:
            self.post_message(self.Event(event))

        result: BuildResult | VenvResult
        try:
            if self.preset.launch.runner == "docker":
                result = build_explained(
                    self.preset, progress=emit, cancel=cancel, host=self.HOST_OVERRIDE
                )
            else:
                result = build_host_env(
                    self.preset, progress=emit, cancel=cancel, host=self.HOST_OVERRIDE
                )
        except TrainwizError as exc:
            self.post_message(self.Failed("build", str(exc)))
            return
        self.post_message(self.Built(result))

    @on(Event)
    def _event(self, message: Event) -> None:
        event = message.event
        if isinstance(event, LayerProgress):
            self.pull_layers[event.layer] = event
            layers = self.query_one("#image-layers", Static)
            layers.display = True
            layers.update(layers_text(self.pull_layers))
        elif isinstance(event, BuildStep):
            self._log(f"[{event.index}/{event.total}] {event.instruction[:200]}", "bold cyan")
        elif isinstance(event, LogLine):
            self._log(event.text)

    @on(Pulled)
    def _pulled(self, message: Pulled) -> None:
        result = message.result
        if result.ok:
            self._log(
                _("✓ pulled {ref} ({count} layers)").format(
                    ref=result.ref, count=len(result.layers)
                ),
                "bold green",
            )
            self.action_refresh()
        else:
            self._log(
                _("✗ pull of {ref} failed: {error}").format(ref=result.ref, error=result.error),
                "bold red",
            )

    @on(Built)
    def _built(self, message: Built) -> None:
        result = self.last_build = message.result
        for line, style in build_result_lines(result):
            self._log(line, style)
        if isinstance(result, VenvResult) and result.ok:
            if self.preset.environment.venv != result.path:  # Launch uses what was built
                env = self.preset.environment.model_copy(update={"venv": result.path})
                self.wizard.propose_preset(
                    self.preset.model_copy(update={"environment": env}),
                    origin=self,
                    note=f"environment.venv = {result.path}",
                )
            self.action_refresh()

    @on(Failed)
    def _failed(self, message: Failed) -> None:
        self._log(f"✗ {message.what}: {message.error}", "bold red")
        if message.what == "survey":
            self.query_one("#image-host", Static).update(Text(message.error, style="bold red"))

    def preset_changed(self) -> None:
        if self.is_mounted:
            self.action_refresh()
