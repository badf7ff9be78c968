"""Step 4, Hyperparameters: every training argument, checked as it changes, with what follows.

The left side is the form (six groups, each field with its help and its message); the right
side is what the values imply, recomputed on every accepted edit: global batch, steps, warmup,
tokens per step, the exact torchrun command, and the planner's memory and speed estimate for
the chosen GPU. A value the schema rejects stays on screen with its error and never reaches
the preset. GPU detection and dataset counting run in thread workers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.message import Message
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Button, Select, Static

import backend.planner.gpu as planner_gpu
from backend.i18n import N_, _
from backend.planner import (
    GpuSpec,
    ModelShape,
    count_records,
    gpu_spec,
    tune,
)
from backend.planner.fields import (
    FieldInfo,
    apply,
    cross_checks,
    current_value,
    display_value,
    form_fields,
)
from backend.planner.hostram import read_meminfo
from backend.preset import Preset
from screens.base import StepScreen, freeze_long_lived
from screens.hp_commands import FieldCommands
from screens.hp_side import (
    LOCAL_GPU,
    NO_GPU,
    command_text,
    cross_by_path,
    data_path_of,
    derived_text,
    gpu_choice,
    gpu_options,
    memory_text,
    shape_of,
)
from screens.hp_tune import tune_refusal, tune_report, tuned_values
from widgets.form_field import FormField, FormScroll
from widgets.steady_select import SteadySelect

# The form's group headings (backend.planner.fields.GROUPS), marked here to be shown translated.
GROUP_TITLES = (N_("Model and data"), N_("Batch and length"), N_("Optimizer and schedule"),
                N_("Precision"), N_("Parallelism and FSDP"),
                N_("Checkpointing, eval and logging"))  # fmt: skip


def field_id(path: str) -> str:
    return "hp-" + path.replace(".", "-").replace("_", "-")


class HyperparamsScreen(StepScreen):
    """The form plus live derived values, command preview, memory plan, tune and save."""

    STEP_ID = "hyperparams"
    COMMANDS: ClassVar = {FieldCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f5", "tune", N_("Tune"), id="hyperparams.tune"),
        Binding("f6", "save_as", N_("Save as"), id="hyperparams.save"),
    ]
    DEFAULT_CSS = """
    HyperparamsScreen #hp-main { height: 1fr; }
    HyperparamsScreen #hp-form { width: 3fr; border: round $primary 50%; padding: 0 1; }
    HyperparamsScreen #hp-side { width: 2fr; border: round $secondary 50%; padding: 0 1; }
    HyperparamsScreen #hp-side Static { margin: 0 0 1 0; }
    HyperparamsScreen #hp-buttons { height: auto; }
    HyperparamsScreen #hp-buttons Button { margin: 0 1 0 0; }
    HyperparamsScreen #hp-command { color: $text-muted; }
    HyperparamsScreen.-narrow FormField > .ff-editor { margin: 1 0 0 0; }
    """
    NARROW = 110  # below this many columns a field's label goes above its editor
    # Rows built with the step; the rest are mounted a few at a time after the first frame.
    # Composing, styling and laying out all ~50 rows took 0.7-0.9 s of UI-thread time at load
    # 2-3 with the old step still on screen; the first rows fill the view at 120x40.
    FIRST_ROWS = 12
    ROWS_PER_FRAME = 8
    FIRST_FRAME_S = 0.15

    @dataclass
    class GpuFound(Message):
        gpu: GpuSpec | None

    @dataclass
    class SideComputed(Message):
        """The side pane and the cross-field messages for edit number ``seq``."""

        seq: int
        issues: dict[str, tuple[str, str]]
        derived: str
        memory: str
        command: str

    @dataclass
    class RecordsCounted(Message):
        path: str
        records: int | None
        note: str

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, FieldInfo] = {f.path: f for f in form_fields()}
        self.invalid: dict[str, str] = {}
        self.local_gpu: GpuSpec | None = None
        self.gpu: GpuSpec | None = None
        self.records: tuple[str, int | None, str] = ("", None, N_("dataset not counted yet"))
        self.tune_text = ""
        self.shown: dict[str, tuple[str, str]] = {}
        self.cross: dict[str, tuple[str, str]] = {}  # the last cross-field result, by path
        self._side_seq = 0
        self._applied_seq = -1
        self._side_timer: Timer | None = None
        self._rows_built = 0

    # ---- layout --------------------------------------------------------------------------
    def compose_body(self) -> ComposeResult:
        plan_gpu = getattr(self.app, "plan_gpu", None)
        if self.gpu is None and plan_gpu:
            self.gpu = gpu_spec(plan_gpu)  # `trainwiz --gpu NAME`: plan for that GPU
        with Horizontal(id="hp-main"):
            with FormScroll(id="hp-form"):
                self._rows_built = 0
                yield from self._form_rows(self.FIRST_ROWS)
                if self.is_mounted:  # composed again: the rest follows as on the first visit
                    self.call_after_refresh(self._build_more_rows)
            with FormScroll(id="hp-side"):
                yield SteadySelect(gpu_options(self.local_gpu), value=gpu_choice(self.gpu, self.local_gpu), id="hp-gpu",
                             allow_blank=False, prompt=_("Plan for GPU"))  # fmt: skip
                yield Static(_("Derived"), classes="section-title")
                yield Static(_("computing…"), id="hp-derived", markup=False)
                yield Static(_("Memory and speed"), classes="section-title")
                yield Static(id="hp-memory", markup=False)
                yield Static(_("Training command"), classes="section-title")
                yield Static(id="hp-command", markup=False)
                yield Static(self.tune_text, id="hp-tune-result", markup=False)
                with Horizontal(id="hp-buttons"):
                    yield Button(_("Tune (F5)"), id="hp-tune", variant="primary")
                    yield Button(_("Save as preset (F6)"), id="hp-save")

    def _form_rows(self, count: int) -> Iterator[Widget]:
        """The next ``count`` rows not built yet (with their group's heading), showing the
        preset's values as they are now: a row built late shows every edit made before it."""
        infos = list(self.fields.values())
        start, stop = self._rows_built, min(self._rows_built + count, len(infos))
        self._rows_built = stop
        for index in range(start, stop):
            info = infos[index]
            if index == 0 or infos[index - 1].group != info.group:
                yield Static(_(info.group), classes="section-title")
            value = current_value(self.preset, info.path)
            shown: str | bool = bool(value) if info.kind == "bool" else display_value(value)
            yield FormField(
                info.path,
                info.path,
                info.kind,
                shown,
                _(info.help),
                info.choices,
                id=field_id(info.path),
            )

    def on_resize(self) -> None:
        self.set_class(self.size.width < self.NARROW, "-narrow")

    def on_mount(self) -> None:
        self.set_class(self.size.width < self.NARROW, "-narrow")
        self.detect_gpu()
        self._count_data()
        # After the first frame: Textual holds a new screen's first paint back for 50 ms (its
        # switch masks the transition), and a batch mounted before would be painted with it.
        self.set_timer(self.FIRST_FRAME_S, self._build_more_rows)

    @property
    def built(self) -> bool:
        """Every row is mounted (a few are built with the step, the rest after its frame)."""
        return self._rows_built == len(self.fields)

    def _build_more_rows(self) -> None:
        """Mount the next few rows, then again after they are drawn; keys typed meanwhile are
        handled between two batches (no row is ever rebuilt, so nothing typed is lost)."""
        if not self.is_mounted or not self.query("#hp-form"):
            return
        if self.built:
            self.refresh_all()  # the messages and the side pane need every row
            self.call_after_refresh(freeze_long_lived)
            return
        self.query_one("#hp-form", FormScroll).mount(*self._form_rows(self.ROWS_PER_FRAME))
        self.call_after_refresh(self._build_more_rows)

    def _row(self, path: str) -> FormField:
        """A field's row, built now if it is not yet (the palette's "Edit field" may name a
        row still waiting for its batch)."""
        found = self.query(f"#{field_id(path)}")
        if not found:
            self.query_one("#hp-form", FormScroll).mount(*self._form_rows(len(self.fields)))
        return self.query_one(f"#{field_id(path)}", FormField)

    def preset_changed(self) -> None:
        self.invalid.clear()
        self.shown.clear()
        self.tune_text = ""
        if not self.is_mounted:
            return
        # Values set in place: recomposing ~50 rows while a second change lands raced Textual's
        # own Select mounting, and focus and scroll position are kept this way.
        for row in self.query(FormField):
            info = self.fields[row.path]
            value = current_value(self.preset, info.path)
            row.set_value(bool(value) if info.kind == "bool" else display_value(value))
        self._count_data()
        self.refresh_all()

    # ---- workers -------------------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="hp-gpu")
    def detect_gpu(self) -> None:
        self.post_message(self.GpuFound(planner_gpu.detect_local()))

    @work(thread=True, exclusive=True, exit_on_error=False, group="hp-count")
    def count_data(self, path: str) -> None:
        records, note = count_records(path)
        self.post_message(self.RecordsCounted(path, records, note))

    def _count_data(self) -> None:
        path = data_path_of(self.preset)
        if path != self.records[0]:
            self.records = (path, None, N_("counting records…"))
            self.count_data(path)

    @on(GpuFound)
    def _gpu_found(self, message: GpuFound) -> None:
        self.local_gpu = message.gpu
        if message.gpu is not None and self.gpu is None:
            self.gpu = message.gpu
        if not self.query("#hp-gpu"):
            return  # mid-recompose: the new body is composed with these values
        select = self.query_one("#hp-gpu", Select)
        with select.prevent(Select.Changed):
            select.set_options(gpu_options(self.local_gpu))
            select.value = gpu_choice(self.gpu, self.local_gpu)
        self.refresh_all()

    @on(RecordsCounted)
    def _counted(self, message: RecordsCounted) -> None:
        if message.path == self.records[0]:
            self.records = (message.path, message.records, message.note)
            self.refresh_all()

    # ---- edits ---------------------------------------------------------------------------
    @on(FormField.Edited)
    def _edited(self, event: FormField.Edited) -> None:
        info = self.fields[event.path]
        updated, error = apply(self.preset, info, event.raw)
        if updated is None:
            self.invalid[event.path] = error
        else:
            self.invalid.pop(event.path, None)
            if current_value(updated, info.path) != current_value(self.preset, info.path):
                self.wizard.propose_preset(updated, origin=self)
                self.tune_text = ""
        if event.path == "data_path":
            self._count_data()
        self._show_message(event.field, event.path)  # the typed value's verdict, at once
        self.refresh_all()

    @on(Select.Changed, "#hp-gpu")
    def _gpu_chosen(self, event: Select.Changed) -> None:
        choice = str(event.value)
        if choice == NO_GPU:
            self.gpu = None
        elif choice == LOCAL_GPU:
            self.gpu = self.local_gpu
        else:
            self.gpu = gpu_spec(choice)
        self.refresh_all()

    # ---- what the values imply -----------------------------------------------------------
    def _shape(self) -> ModelShape | None:
        return shape_of(self.preset)

    def refresh_all(self) -> None:
        """Recompute what the values imply, off the UI thread, shortly after the last edit.

        The planner, the cross-field rules and the printed command take tens of milliseconds
        (more on a loaded machine); run per keystroke on the UI thread they held keys back.
        A burst of edits starts one computation; an older result never overwrites a newer one.
        """
        self._side_seq += 1
        if self._side_timer is not None:
            self._side_timer.stop()
        self._side_timer = self.set_timer(0.05, self._start_side)

    def _start_side(self) -> None:
        self._side_timer = None
        if not self.is_mounted:
            return
        self._side_worker(self._side_seq, self.preset, self.gpu, self.local_gpu, self.records)

    @work(thread=True, exclusive=True, exit_on_error=False, group="hp-side")
    def _side_worker(
        self,
        seq: int,
        preset: Preset,
        gpu: GpuSpec | None,
        local_gpu: GpuSpec | None,
        records: tuple[str, int | None, str],
    ) -> None:
        shape = shape_of(preset)
        visible = local_gpu.count if local_gpu is not None else None
        self.post_message(
            self.SideComputed(
                seq,
                cross_by_path(preset, gpu, shape, visible),
                derived_text(preset, records),
                memory_text(preset, shape, gpu),
                command_text(preset),
            )
        )

    @on(SideComputed)
    def _side_computed(self, message: SideComputed) -> None:
        if message.seq != self._side_seq:
            return  # an edit landed meanwhile: its own computation follows
        rows = {row.path: row for row in self.query(FormField)}
        if len(rows) != len(self.fields) or not self.query("#hp-tune-result"):
            return
        self.cross = message.issues
        for path in self.fields:
            self._show_message(rows[path], path)
        self.query_one("#hp-derived", Static).update(message.derived)
        self.query_one("#hp-memory", Static).update(message.memory)
        self.query_one("#hp-command", Static).update(message.command)
        self.query_one("#hp-tune-result", Static).update(self.tune_text)
        self._applied_seq = message.seq

    @property
    def settled(self) -> bool:
        """The side pane and the messages show the latest edit (nothing still computing)."""
        return self._applied_seq == self._side_seq

    def _show_message(self, row: FormField, path: str) -> None:
        if path in self.invalid:
            shown = (self.invalid[path], "error")
        else:
            shown = self.cross.get(path, ("", ""))
        if self.shown.get(path) != shown:  # touch only rows whose message changed
            self.shown[path] = shown
            row.set_message(shown[0], shown[1])  # type: ignore[arg-type]

    @property
    def problems(self) -> list[str]:
        """Every error on the form now: values the schema rejects, and cross-field errors
        computed here and now (not the last background result, which may lag an edit)."""
        out = [f"{path}: {message}" for path, message in self.invalid.items()]
        visible = self.local_gpu.count if self.local_gpu is not None else None
        for issue in cross_checks(self.preset, self.gpu, self._shape(), visible):
            if issue.level == "error" and issue.path not in self.invalid:
                out.append(f"{issue.path}: {issue.message}")
        return out

    def first_problem_path(self) -> str | None:
        """The field a refusal sends the focus to (a rejected value first)."""
        if self.invalid:
            return next(iter(self.invalid))
        for path, (_message, level) in self.shown.items():
            if level == "error":
                return path
        return None

    # ---- actions -------------------------------------------------------------------------
    @on(Button.Pressed, "#hp-tune")
    def _tune_pressed(self) -> None:
        self.action_tune()

    @on(Button.Pressed, "#hp-save")
    def _save_pressed(self) -> None:
        self.action_save_as()

    def focus_field(self, path: str) -> None:
        """Focus one field's editor and scroll it into view (the palette's "Edit field")."""
        row = self._row(path)
        # At once, not in a later callback (``Widget.focus``): the keys typed right after a
        # refusal or "Edit field" are handled next, and they must land in this field. The
        # whole row is scrolled into view (its note says what is wrong) in one jump: an animated
        # scroll repaints the form for every frame, which over SSH or on a loaded machine keeps
        # the typed keys' echo waiting behind it.
        self.set_focus(row.editor)
        row.scroll_visible(animate=False)

    def leave_problems(self) -> list[str]:
        """Values typed but rejected (they never reached the preset): leaving would drop them."""
        return [f"{path}: {message}" for path, message in self.invalid.items()]

    def focus_problem(self) -> None:
        """Send the focus to the first field whose value is rejected (a refusal's pointer)."""
        path = self.first_problem_path()
        if path is not None:
            self.focus_field(path)

    def action_tune(self) -> None:
        if self.refuse_if_form_invalid(_("Tune")):
            return
        shape = self._shape()
        refusal = tune_refusal(self.preset, self.gpu, shape)
        if refusal is not None:
            self.notify(refusal, severity="warning", timeout=8)
            return
        assert self.gpu is not None and shape is not None  # tune_refusal said why otherwise
        # this machine's RAM when planning for its own GPU (ZeRO/FSDP offload must fit the host)
        local = self.local_gpu is not None and self.gpu == self.local_gpu
        result = tune(self.preset, self.gpu, shape, host_ram=read_meminfo() if local else None)
        self.wizard.propose_preset(
            result.preset,
            origin=self,
            note=_("Tune applied: {count} change(s)").format(count=len(result.changes)),
        )
        for path, shown in tuned_values(result, self.fields).items():
            self._row(path).set_value(shown)
        self.tune_text = tune_report(result)
        self.refresh_all()

    def action_save_as(self) -> None:
        self.wizard.action_save_preset()
