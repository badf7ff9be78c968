"""Queue view: the run queue as ``trainwiz queue`` lists it, in the wizard.

One row per item (id, state, preset, GPUs, position, run, note: why it waits or how it failed;
a Slurm item's state also names its job id and Slurm state)
and a line for the queue itself (paused or running, --max-parallel, the scheduler's pid). The
list is read by ``backend.queue.ops.listing`` in a thread worker, every few seconds while the
view is open; pausing, resuming and removing an item are the CLI's own calls, also in a worker.
Items are added from the Launch step ("Add to queue") or with ``trainwiz queue add`` / ``sweep``.

From an item: Enter (or m) shows its run on the Monitor, f makes the Monitor follow the queue
(``FollowsQueue`` below: the Monitor inherits it, so its own module stays about one run), c
opens the Compare view on the item's sweep. Which run is the queue's and a sweep's rank order
are ``backend.queue.follow``'s, read in thread workers.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static

from backend import paths
from backend.errors import BadInput, TrainwizError
from backend.i18n import N_, _
from screens.dialogs import ConfirmDialog, extra_warnings
from widgets.footer import TranslatedFooter

if TYPE_CHECKING:
    from backend.preset import Preset
    from backend.queue.follow import QueueRun
    from backend.queue.ops import Row
    from backend.runs.plangate import PlanVerdict

REFRESH_S = 3.0
FOLLOW_POLL_S = 1.0  # the Monitor's look at the queue while it follows it


@dataclass(frozen=True)
class OpenMonitor:
    """What the Queue view asks of the App as it closes: the Monitor on ``run_dir``, or (None)
    the Monitor following the queue's running item."""

    run_dir: Path | None


class QueueScreen(Screen[OpenMonitor | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        # Short labels and a compact footer: all six keys fit 80 columns beside ^p palette
        # (the note line under the table says what m, f and c do).
        Binding("escape", "close", N_("Close"), id="queue.close"),
        Binding("p", "toggle_pause", N_("Pause/resume"), id="queue.pause"),
        Binding("d", "remove", N_("Remove item"), id="queue.remove"),
        Binding("m", "monitor", N_("Monitor"), id="queue.monitor"),
        Binding("f", "follow", N_("Follow"), id="queue.follow"),
        Binding("c", "compare_sweep", N_("Compare"), id="queue.compare_sweep"),
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
        yield TranslatedFooter(compact=True)

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
        return _(
            "p pauses or resumes the queue, d removes the item under the cursor; Enter shows its "
            "run on the Monitor, f makes the Monitor follow the queue, c compares its sweep."
        )

    def _selected(self) -> str | None:
        table = self.query_one("#queue-table", DataTable)
        if not table.row_count:
            return None
        return str(table.get_row_at(table.cursor_row)[0])

    def _selected_row(self) -> Row | None:
        """The listed item under the cursor (as last read: its run and sweep)."""
        item = self._selected()
        rows = self.listed["items"] if self.listed is not None else []
        return next((row for row in rows if str(row.id) == item), None)

    @on(DataTable.RowSelected, "#queue-table")
    def _row_chosen(self) -> None:
        self.action_monitor()

    def action_monitor(self) -> None:
        """Enter or m: the item's run on the Monitor (the App switches to it)."""
        row = self._selected_row()
        if row is None:
            return
        if not row.run_id:
            self.notify(_("Item {id} has no run yet: it is {state}.").format(
                id=row.id, state=row.state), title=_("Queue"))  # fmt: skip
            return
        self.dismiss(OpenMonitor(paths.runs_dir() / row.run_id))

    def action_follow(self) -> None:
        """f: the Monitor shows whichever item runs now, and the next one when it starts."""
        self.dismiss(OpenMonitor(None))

    def action_compare_sweep(self) -> None:
        row = self._selected_row()
        if row is None:
            return
        if not row.sweep_id:
            self.notify(_("Item {id} is not part of a sweep: c compares a sweep's variants.")
                        .format(id=row.id), title=_("Queue"))  # fmt: skip
            return
        self._sweep_runs(row.sweep_id)

    @work(thread=True, exclusive=True, group="queue-sweep", exit_on_error=False)
    def _sweep_runs(self, sweep_id: str) -> None:
        from backend.queue.follow import sweep_runs  # deferred: worker thread, on a key

        try:
            found = sweep_runs(sweep_id)
        except (KeyError, TrainwizError, OSError, sqlite3.Error) as exc:
            self.app.call_from_thread(self.notify, _("Sweep {id}: {error}").format(
                id=sweep_id, error=exc), severity="error", title=_("Queue"))  # fmt: skip
            return
        if len(found.run_ids) < 2:
            text = _(
                "Sweep {id}: {count} of its {variants} variants have a run; Compare needs two."
            ).format(id=sweep_id, count=len(found.run_ids), variants=found.variants)
            self.app.call_from_thread(self.notify, text, title=_("Queue"))
            return
        title = _("Compare · sweep {id} · ranked by {rank_by} {metric}").format(
            id=sweep_id, rank_by=found.rank_by, metric=found.metric
        )
        self.app.call_from_thread(self._open_compare, found.run_ids, title)

    def _open_compare(self, run_ids: list[str], title: str) -> None:
        from screens.compare import CompareScreen  # deferred: loaded when opened

        self.app.push_screen(CompareScreen(run_ids, title=title))

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


class QueueRunChanged(Message):
    """The queue's running item changed (None: no item runs now); posted by the follow worker."""

    def __init__(self, found: QueueRun | None) -> None:
        super().__init__()
        self.found = found


class FollowsQueue(Screen[None]):
    """The Monitor's "follow the queue" mode (the Queue view's f): a thread worker looks at
    the queue every second (``backend.queue.follow.queue_run``) and posts when its running item
    changes; the handler makes that run the App's current run and shows it, saying which item
    and preset it is. It lasts until another run is chosen (Runs, Enter on an item, a launch):
    the next change then finds the Monitor on a run it did not pick, and stops following."""

    queue_following: bool = False
    _queue_run: Path | None = None  # the run this mode last showed
    _queue_stop: threading.Event | None = None

    def follow_queue(self, follow: bool = True) -> None:
        """Start (or, ``follow`` False, stop) following the queue."""
        if self._queue_stop is not None:
            self._queue_stop.set()
        self.queue_following, self._queue_run, self._queue_stop = follow, None, None
        self.sub_title = None
        if follow:
            self._queue_stop = threading.Event()
            self._queue_worker(self._queue_stop)

    @on(events.Unmount)
    def _stop_following_queue(self) -> None:
        if self._queue_stop is not None:
            self._queue_stop.set()

    @work(thread=True, exclusive=True, exit_on_error=False, group="monitor-queue")
    def _queue_worker(self, stop: threading.Event) -> None:
        from backend.queue.follow import queue_run  # deferred: worker thread, on the f key

        last: str | bool | None = False  # nothing posted yet: the first look always posts
        while True:
            try:
                found = queue_run()
            except (TrainwizError, OSError, sqlite3.Error):
                found = None  # unreadable now: keep the run shown, look again
            if (found.run_id if found else None) != last:
                last = found.run_id if found else None
                self.post_message(QueueRunChanged(found))
            if stop.wait(FOLLOW_POLL_S):
                return

    async def on_queue_run_changed(self, message: QueueRunChanged) -> None:
        found = message.found
        if not self.queue_following:
            return
        if found is None:
            if self._queue_run is None:
                self.notify(_("No queue item runs now: the Monitor shows the next one when it "
                              "starts."), title=_("Following the queue"))  # fmt: skip
            return
        current = getattr(self.app, "current_run", None)
        if self._queue_run is not None and current != self._queue_run:
            self.follow_queue(False)  # another run was chosen since: it stays
            return
        what = found.preset + (f" · {found.label}" if found.label else "")
        self._queue_run = paths.runs_dir() / found.run_id
        self.app.current_run = self._queue_run  # type: ignore[attr-defined]
        self.sub_title = _("following the queue: item {id} ({what})").format(
            id=found.item_id, what=what
        )
        self.notify(_("Item {id} ({what}) runs now: run {run}.").format(
            id=found.item_id, what=what, run=found.run_id), title=_("Following the queue"))  # fmt: skip
        if self.is_current:  # else when next shown (the Monitor's resume shows the current run)
            await self.follow_current_run()

    async def follow_current_run(self) -> None:
        """The Monitor's: show the App's current run."""
        raise NotImplementedError


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
