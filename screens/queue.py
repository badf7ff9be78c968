"""Queue view: the run queue as ``trainwiz queue`` lists it, in the wizard.

One row per item (id, state, preset, GPUs, position, run, note: why it waits or how it failed;
a Slurm item's state also names its job id and Slurm state)
and a line for the queue itself (paused or running, --max-parallel, the scheduler's pid). The
list is read by ``backend.queue.ops.listing`` in a thread worker, every few seconds while the
view is open; pausing, resuming and removing an item are the CLI's own calls, also in a worker.
Items are added from the Launch step ("Add to queue") or with ``trainwiz queue add`` / ``sweep``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static

from backend import paths
from backend.errors import BadInput, TrainwizError
from backend.i18n import N_, _
from backend.preset import Preset
from backend.runs.plangate import PlanVerdict
from screens.dialogs import ConfirmDialog, extra_warnings
from widgets.footer import TranslatedFooter

REFRESH_S = 3.0


class QueueScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", N_("Close queue"), id="queue.close"),
        Binding("p", "toggle_pause", N_("Pause/resume"), id="queue.pause"),
        Binding("d", "remove", N_("Remove item"), id="queue.remove"),
        Binding("r", "reload", N_("Refresh"), id="queue.reload", show=False),
    ]
    DEFAULT_CSS = """
    QueueScreen #queue-summary { height: auto; padding: 0 1; }
    QueueScreen #queue-table { height: 1fr; }
    QueueScreen #queue-note { height: auto; padding: 0 1; color: $text-muted; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.listed: dict[str, Any] | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(_("reading the queue…"), id="queue-summary")
        yield DataTable(id="queue-table", zebra_stripes=True, cursor_type="row")
        yield Static(
            _(
                "Add items from the Launch step (a: Add to queue) or with 'trainwiz queue add "
                "PRESET' and 'trainwiz sweep PRESET --set ...'."
            ),
            id="queue-note",
        )  # replaced by _note once the queue is read
        yield TranslatedFooter()

    def on_mount(self) -> None:
        table = self.query_one("#queue-table", DataTable)
        for label in (N_("id"), N_("state"), N_("preset"), N_("GPUs"), N_("position"),
                      N_("run"), N_("note")):  # fmt: skip
            table.add_column(_(label))
        self.action_reload()
        self.set_interval(REFRESH_S, self.action_reload)

    def action_reload(self) -> None:
        self._read()

    @work(thread=True, exclusive=True, group="queue-read", exit_on_error=False)
    def _read(self) -> None:
        from backend.queue.ops import listing  # deferred: worker thread, not at screen open

        try:
            found = listing()
        except (TrainwizError, OSError) as exc:
            self.app.call_from_thread(self._summary, str(exc))
            return
        self.app.call_from_thread(self._show, found)

    def _summary(self, text: str) -> None:
        self.query_one("#queue-summary", Static).update(text)

    def _show(self, found: dict[str, Any]) -> None:
        self.listed = found
        scheduler = found["scheduler"]
        self._summary(
            _("Queue {paused} · --max-parallel {limit} (CPU runs) · {scheduler}").format(
                paused=_("paused") if found["paused"] else _("running"),
                limit=found["max_parallel"],
                scheduler=_("scheduler pid {pid}").format(pid=scheduler["pid"])
                if scheduler["running"]
                else _("no scheduler runs"),
            )
        )
        table = self.query_one("#queue-table", DataTable)
        keep = table.cursor_row
        table.clear()
        from backend.queue.ops import shown_state  # deferred: loaded by the listing already

        for row in found["items"]:
            note = row.diagnosis if row.state == "failed" and row.diagnosis else row.message
            table.add_row(str(row.id), shown_state(row), row.preset, row.gpus,
                          str(row.position or "-"), row.run_id or "-", note or "",
                          key=str(row.id))  # fmt: skip
        if found["items"]:
            table.move_cursor(row=min(keep, len(found["items"]) - 1))
        self.query_one("#queue-note", Static).update(self._note(bool(found["items"])))

    @staticmethod
    def _note(any_items: bool) -> str:
        if not any_items:
            return _("The queue is empty. Add a preset from the Launch step (a: Add to queue).")
        return _("p pauses or resumes the queue, d removes the item under the cursor.")

    def _selected(self) -> str | None:
        table = self.query_one("#queue-table", DataTable)
        if not table.row_count:
            return None
        return str(table.get_row_at(table.cursor_row)[0])

    def action_toggle_pause(self) -> None:
        if self.listed is not None:
            self._change("pause" if not self.listed["paused"] else "resume", None)

    def action_remove(self) -> None:
        item = self._selected()
        if item is not None:
            self._change("rm", item)

    @work(thread=True, exclusive=True, group="queue-change", exit_on_error=False)
    def _change(self, what: str, item: str | None) -> None:
        from backend.queue.ops import remove, set_paused  # deferred: worker thread, on a key

        try:
            if what == "rm" and item is not None:
                remove(item)
                done = _("Item {id} removed from the queue.").format(id=item)
            else:
                paused, pid = set_paused(what == "pause")
                done = (
                    _("Queue paused: started runs go on.")
                    if paused
                    else _("Queue resumed (scheduler pid {pid}).").format(pid=pid or "-")
                )
        except TrainwizError as exc:
            self.app.call_from_thread(self.notify, str(exc), severity="error", title=_("Queue"))
            return
        self.app.call_from_thread(self.notify, done, title=_("Queue"))
        self.app.call_from_thread(self.action_reload)

    def action_close(self) -> None:
        self.dismiss(None)


def ask_to_queue(
    screen: Screen[Any], preset: Preset, verdict: PlanVerdict | None, report: Callable[[str], None]
) -> None:
    """The Launch step's "Add to queue": the confirmation (the plan's warning when it predicts
    the preset does not fit, as Launch's "anyway"), then ``backend.queue.ops.add`` in a thread
    worker; a refusal goes to ``report`` (the step's status line), success to a notification."""
    over = verdict is not None and not verdict.fits
    warnings = extra_warnings(preset)
    if verdict is not None and over:
        warnings.insert(0, _("WARNING the plan for this machine: {numbers}").format(
            numbers=verdict.numbers()))  # fmt: skip
    where = _("run directory: {runs}/<run id>/ (detached: survives closing trainwiz)").format(
        runs=paths.runs_dir()
    )
    when = (
        _("the queue hands it to Slurm at once; Slurm decides when it runs; F7 shows the queue")
        if preset.launch.scheduler == "slurm"
        else _("the queue starts it when its GPUs (or a CPU slot) are free; F7 shows the queue")
    )
    dialog = ConfirmDialog(
        _("Add {name} to the queue?").format(name=preset.name),
        [when],
        [where],
        warnings,
        yes=N_("Add to queue"),
    )

    def add() -> None:
        from backend.queue.ops import add  # deferred: worker thread, on a key

        try:
            added = add(preset, ignore_plan=over)
        except BadInput as exc:
            error = "\n".join(exc.problems)
            screen.app.call_from_thread(report, _("Not queued: {error}").format(error=error))
            return
        except TrainwizError as exc:
            screen.app.call_from_thread(report, _("Not queued: {error}").format(error=exc))
            return
        text = _("Queued as item {id}; F7 shows the queue.").format(id=added.item.id)
        if added.paused:
            text += " " + _("The queue is paused: resume it there (p).")
        screen.app.call_from_thread(screen.notify, text, title=_("Queue"))

    def answered(yes: bool | None) -> None:
        if yes:
            screen.run_worker(add, thread=True, exit_on_error=False, group="launch-queue")

    screen.app.push_screen(dialog, answered)
