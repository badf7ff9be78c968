"""Step 4, Hyperparameters: every training argument, checked as it changes, with what follows.

The left side is the form (six groups, each field with its help and its message); the right
side is what the values imply, recomputed on every accepted edit: global batch, steps, warmup,
tokens per step, the exact torchrun command, and the planner's memory and speed estimate for
the chosen GPU. A value the schema rejects stays on screen with its error and never reaches
the preset. GPU detection and dataset counting run in thread workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import Button, Select, Static

from backend.i18n import N_, _
from backend.planner import (
    GpuSpec,
    ModelShape,
    count_records,
    derive,
    estimate,
    gpu_spec,
    settings_from_preset,
    shape_for_preset,
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
from backend.planner.gpu import ALIASES
from backend.planner.hostram import read_meminfo
from backend.planner.method_search import method_lines
from backend.planner.report import estimate_lines
from backend.preset.schema import map_container_path
from screens.base import StepScreen
from widgets.form_field import FormField

# The form's group headings (backend.planner.fields.GROUPS), marked here to be shown translated.
GROUP_TITLES = (N_("Model and data"), N_("Batch and length"), N_("Optimizer and schedule"),
                N_("Precision"), N_("Parallelism and FSDP"),
                N_("Checkpointing, eval and logging"))  # fmt: skip
NO_GPU = "__none__"
LOCAL_GPU = "__local__"


def field_id(path: str) -> str:
    return "hp-" + path.replace(".", "-").replace("_", "-")


class FieldCommands(Provider):
    """Palette (ctrl+p) on this step: "Edit field: NAME" jumps to any of the ~50 fields."""

    async def discover(self) -> Hits:
        screen = self.screen
        if isinstance(screen, HyperparamsScreen):
            for path in list(screen.fields)[:8]:
                label = _("Edit field: {path}").format(path=path)
                yield DiscoveryHit(label, lambda p=path: screen.focus_field(p))

    async def search(self, query: str) -> Hits:
        screen = self.screen
        if not isinstance(screen, HyperparamsScreen):
            return
        matcher = self.matcher(query)
        for path, info in screen.fields.items():
            label = _("Edit field: {path}").format(path=path)
            score = matcher.match(label)
            if score > 0:
                yield Hit(score, matcher.highlight(label), lambda p=path: screen.focus_field(p),
                          help=_(info.group))  # fmt: skip


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
    HyperparamsScreen.-narrow FormField { grid-size: 1; grid-columns: 1fr; }
    HyperparamsScreen.-narrow FormField .ff-note { column-span: 1; }
    """
    NARROW = 110  # below this many columns a field's label goes above its editor

    @dataclass
    class GpuFound(Message):
        gpu: GpuSpec | None

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

    # ---- layout --------------------------------------------------------------------------
    def compose_body(self) -> ComposeResult:
        plan_gpu = getattr(self.app, "plan_gpu", None)
        if self.gpu is None and plan_gpu:
            self.gpu = gpu_spec(plan_gpu)  # `trainwiz --gpu NAME`: plan for that GPU
        with Horizontal(id="hp-main"):
            with VerticalScroll(id="hp-form"):
                group = ""
                for info in self.fields.values():
                    if info.group != group:
                        group = info.group
                        yield Static(_(group), classes="section-title")
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
            with VerticalScroll(id="hp-side"):
                yield Select(self._gpu_options(), value=self._gpu_choice(), id="hp-gpu",
                             allow_blank=False, prompt=_("Plan for GPU"))  # fmt: skip
                yield Static(_("Derived"), classes="section-title")
                yield Static(id="hp-derived", markup=False)
                yield Static(_("Memory and speed"), classes="section-title")
                yield Static(id="hp-memory", markup=False)
                yield Static(_("Training command"), classes="section-title")
                yield Static(id="hp-command", markup=False)
                yield Static(self.tune_text, id="hp-tune-result", markup=False)
                with Horizontal(id="hp-buttons"):
                    yield Button(_("Tune (F5)"), id="hp-tune", variant="primary")
                    yield Button(_("Save as preset (F6)"), id="hp-save")

    def _gpu_options(self) -> list[tuple[str, str]]:
        options = [(_("no GPU chosen"), NO_GPU)]
        if self.local_gpu is not None:
            label = _("this machine: {count} x {name}").format(
                count=self.local_gpu.count, name=self.local_gpu.name
            )
            options.append((label, LOCAL_GPU))
        options += [(f"{alias}: {name}", alias) for alias, name in ALIASES.items()]
        return options

    def _gpu_choice(self) -> str:
        if self.gpu is None:
            return NO_GPU
        if self.local_gpu is not None and self.gpu == self.local_gpu:
            return LOCAL_GPU
        for alias, name in ALIASES.items():
            if name == self.gpu.name:
                return alias
        return NO_GPU

    def on_resize(self) -> None:
        self.set_class(self.size.width < self.NARROW, "-narrow")

    def on_mount(self) -> None:
        self.set_class(self.size.width < self.NARROW, "-narrow")
        self.detect_gpu()
        self._count_data()
        self.refresh_all()

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
        from backend.planner.gpu import detect_local

        self.post_message(self.GpuFound(detect_local()))

    @work(thread=True, exclusive=True, exit_on_error=False, group="hp-count")
    def count_data(self, path: str) -> None:
        records, note = count_records(path)
        self.post_message(self.RecordsCounted(path, records, note))

    def _data_path(self) -> str:
        from backend.model.placeholders import resolve_placeholders

        path = resolve_placeholders(self.preset.training.data_path, None)
        if self.preset.launch.runner == "docker":
            path = map_container_path(
                path, self.preset.container.volumes, self.preset.launch.workdir
            )
        return path

    def _count_data(self) -> None:
        path = self._data_path()
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
            select.set_options(self._gpu_options())
            select.value = self._gpu_choice()
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
        try:
            return shape_for_preset(self.preset)
        except Exception:  # a malformed config.json: the memory panel says so
            return None

    def refresh_all(self) -> None:
        rows = {row.path: row for row in self.query(FormField)}
        if len(rows) != len(self.fields) or not self.query("#hp-tune-result"):
            return  # not composed yet (or mid-recompose): the next refresh draws everything
        preset = self.preset
        shape = self._shape()
        visible = self.local_gpu.count if self.local_gpu is not None else None
        issues = cross_checks(preset, self.gpu, shape, visible)
        by_path: dict[str, tuple[str, str]] = {}
        rank = {"error": 0, "warning": 1, "info": 2}
        for issue in sorted(issues, key=lambda i: rank[i.level]):
            by_path.setdefault(issue.path, (issue.message, issue.level))
        for path in self.fields:
            if path in self.invalid:
                shown = (self.invalid[path], "error")
            else:
                shown = by_path.get(path, ("", ""))
            if self.shown.get(path) != shown:  # touch only rows whose message changed
                self.shown[path] = shown
                rows[path].set_message(shown[0], shown[1])  # type: ignore[arg-type]
        self._refresh_derived()
        self._refresh_memory(shape)
        self._refresh_command()
        self.query_one("#hp-tune-result", Static).update(self.tune_text)

    @property
    def problems(self) -> list[str]:
        """Every error now on the form (parse/range errors and cross-field errors)."""
        return [f"{p}: {m}" for p, (m, level) in self.shown.items() if level == "error"]

    def _refresh_derived(self) -> None:
        preset = self.preset
        world = preset.launch.nproc_per_node * preset.launch.nnodes
        records, note = self.records[1], self.records[2]
        d = derive(preset.training, world, records, note)

        def show(value: int | None) -> str:
            return f"{value:,}" if value is not None else _("unknown (dataset size unknown)")

        t = preset.training
        lines = [
            _("global batch: {batch} = {per_device} x {accum} accumulation x {world} GPU(s)").format(
                batch=d.global_batch, per_device=t.per_device_train_batch_size,
                accum=t.gradient_accumulation_steps, world=world),
            _("tokens per step: {tokens} (every sample padded to {length})").format(
                tokens=f"{d.tokens_per_step:,}", length=t.model_max_length),
            _("dataset: {note}").format(note=_(note)),
            _("steps per epoch: {n}").format(n=show(d.steps_per_epoch)),
            _("total steps: {n}").format(n=show(d.total_steps)),
            _("warmup steps: {n}").format(n=show(d.warmup_steps)),
        ]  # fmt: skip
        self.query_one("#hp-derived", Static).update("\n".join(lines))

    def _refresh_memory(self, shape: ModelShape | None) -> None:
        widget = self.query_one("#hp-memory", Static)
        if self.preset.launch.device == "cpu":
            widget.update(
                _(
                    "The preset trains on the CPU (launch.device: cpu): there is no GPU memory to "
                    "plan, so Tune has nothing to do. A GPU preset can be planned here: choose "
                    "its GPU."
                )
            )
        elif shape is None:
            widget.update(
                _(
                    "Model shape unknown: {dir} has no config.json yet "
                    "(fetch the model in the Model step)."
                ).format(dir=self.preset.model.dir)
            )
        elif self.gpu is None:
            widget.update(_("No GPU found here: choose one above to see the memory plan."))
        else:
            est = estimate(shape, settings_from_preset(self.preset), self.gpu)
            widget.update("\n".join(estimate_lines(est, shape, self.gpu)))

    def _refresh_command(self) -> None:
        from backend.plan import build_plan

        try:
            text = build_plan(self.preset).step("train").display()
        except Exception as exc:  # an unresolvable placeholder: say why instead of a command
            text = f"command unavailable: {exc}"
        self.query_one("#hp-command", Static).update(text)

    # ---- actions -------------------------------------------------------------------------
    @on(Button.Pressed, "#hp-tune")
    def _tune_pressed(self) -> None:
        self.action_tune()

    @on(Button.Pressed, "#hp-save")
    def _save_pressed(self) -> None:
        self.action_save_as()

    def focus_field(self, path: str) -> None:
        """Focus one field's editor and scroll it into view (the palette's "Edit field")."""
        editor = self.query_one(f"#{field_id(path)}", FormField).editor
        editor.focus()
        editor.scroll_visible()

    def leave_problems(self) -> list[str]:
        """Values typed but rejected (they never reached the preset): leaving would drop them."""
        return [f"{path}: {message}" for path, message in self.invalid.items()]

    def action_tune(self) -> None:
        shape = self._shape()
        if self.preset.launch.device == "cpu":
            self.notify(
                _(
                    "{name} trains on the CPU (launch.device: cpu): there is no GPU memory to "
                    "tune. Open a GPU preset (ctrl+o) to plan for a GPU."
                ).format(name=self.preset.name),
                severity="warning",
                timeout=8,
            )
            return
        if self.gpu is None:
            self.notify(_("Choose the GPU to plan for (the list at the top right)."),
                        severity="warning")  # fmt: skip
            return
        if shape is None:
            self.notify(
                _(
                    "The model's shape is unknown: {dir} has no config.json and the repo is not "
                    "a known one. Fetch the model in the Model step."
                ).format(dir=self.preset.model.dir),
                severity="warning",
            )
            return
        if self.invalid:
            self.notify(_("Fix the fields marked in red first: ") + "; ".join(self.leave_problems()),
                        severity="error")  # fmt: skip
            return
        # this machine's RAM when planning for its own GPU (ZeRO/FSDP offload must fit the host)
        local = self.local_gpu is not None and self.gpu == self.local_gpu
        result = tune(self.preset, self.gpu, shape, host_ram=read_meminfo() if local else None)
        self.wizard.propose_preset(
            result.preset,
            origin=self,
            note=_("Tune applied: {count} change(s)").format(count=len(result.changes)),
        )
        for change in result.changes:
            path = change.path.removeprefix("training.")
            if path.startswith("fsdp_config."):
                path = "fsdp_config"
            if path in self.fields:
                value = current_value(result.preset, path)
                info = self.fields[path]
                shown = bool(value) if info.kind == "bool" else display_value(value)
                self.query_one(f"#{field_id(path)}", FormField).set_value(shown)
        lines = [
            _("Tune: {count} change(s), x{speedup} predicted").format(
                count=len(result.changes), speedup=f"{result.speedup:.1f}"
            )
        ]
        lines += [f"- {c.path}: {c.old!r} -> {c.new!r}: {c.reason}" for c in result.changes]
        lines += result.notes
        lines += method_lines(result)  # LoRA/QLoRA/ZeRO beside the answer (issue 21)
        self.tune_text = "\n".join(lines)
        self.refresh_all()

    def action_save_as(self) -> None:
        problems = self.problems
        if problems:
            self.notify(_("Not saved: ") + "; ".join(problems), severity="error", timeout=8)
            return
        self.wizard.action_save_preset()
