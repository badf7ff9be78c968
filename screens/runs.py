"""The wizard's view of the runs on this machine: the Runs list, and the live runs of a preset.

Every question the wizard asks about runs ("which runs are there?", "is this preset training
now?", "which runs keep going when I quit?") is answered by ``run_rows`` here, the one place
that reads the run-directory API (``backend.runs``), so re-pointing it is a one-file change.
Reading runs touches the disk and ``/proc``: callers run ``run_rows`` in a thread worker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label, Static

from backend.i18n import N_, _
from backend.paths import METRICS
from backend.rundir import list_run_dirs
from backend.runstate import FINAL_STATES

TAIL_BYTES = 64 * 1024  # the last step line is near the end of metrics.jsonl


@dataclass(frozen=True)
class RunRow:
    """One run as the wizard shows it."""

    run_id: str
    run_dir: Path
    state: str
    preset: str
    step: int | None
    max_steps: int | None
    loss: float | None
    master_port: int | None
    message: str

    @property
    def live(self) -> bool:
        return self.state in ("starting", "running")

    def step_text(self) -> str:
        if self.step is None:
            return "-"
        return f"{self.step}/{self.max_steps}" if self.max_steps else str(self.step)

    def loss_text(self) -> str:
        return f"{self.loss:.4f}" if self.loss is not None else "-"

    def line(self) -> str:
        """``run-id (running, step 12/150, loss 2.3100)``: how a dialog names a run."""
        return _("{run} ({state}, step {step}, loss {loss})").format(
            run=self.run_id, state=self.state, step=self.step_text(), loss=self.loss_text()
        )


def _last_step(run_dir: Path) -> tuple[int | None, int | None, float | None]:
    """(step, max_steps, loss) of the newest step line with a loss in metrics.jsonl."""
    path = run_dir / METRICS
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - TAIL_BYTES))
            lines = handle.read().splitlines()
    except OSError:
        return None, None, None
    step: int | None = None
    max_steps: int | None = None
    for raw in reversed(lines):
        try:
            record = json.loads(raw)
        except ValueError:
            continue  # a torn last line, or the cut first one
        if not isinstance(record, dict) or record.get("kind") != "step":
            continue
        if step is None and isinstance(record.get("step"), int):
            step = record["step"]
            max_steps = (
                record.get("max_steps") if isinstance(record.get("max_steps"), int) else None
            )
        loss = record.get("loss")
        if isinstance(loss, (int, float)):
            return step, max_steps, float(loss)
    return step, max_steps, None


def run_rows() -> list[RunRow]:
    """Every run on this machine, newest first, each record refreshed (blocking: a worker)."""
    from backend.runs import list_runs  # deferred: worker thread, not at screen open

    dirs = {path.name: path for path in list_run_dirs()}
    rows = []
    for status in list_runs():
        run_dir = dirs.get(status.run_id)
        if run_dir is None:
            continue
        step, max_steps, loss = _last_step(run_dir)
        rows.append(
            RunRow(
                run_id=status.run_id,
                run_dir=run_dir,
                state=str(status.state),
                preset=status.preset,
                step=step,
                max_steps=max_steps,
                loss=loss,
                master_port=status.master_port,
                message=status.message,
            )
        )
    rows.sort(key=lambda r: r.run_id, reverse=True)  # run ids start with their start time
    return rows


def live_runs(rows: list[RunRow], preset: str | None = None) -> list[RunRow]:
    """The runs still going (of ``preset`` when named)."""
    return [r for r in rows if r.live and (preset is None or r.preset == preset)]


def newest_ended_run(rows: list[RunRow], preset: str) -> RunRow | None:
    """``preset``'s newest run that is over (finished, failed or stopped): what the Monitor shows
    when nothing trains, so a wizard opened after a run shows its final figures."""
    return next((r for r in rows if r.preset == preset and r.state in FINAL_STATES), None)


@dataclass(frozen=True)
class ServeRow:
    """A server of a run (``trainwiz serve RUN --detach``, or the Monitor's Serve key) that is up."""

    run_dir: Path
    model: str
    url: str

    def line(self) -> str:
        """How the quit dialog names it, with the way to end it."""
        return _("serving {model} at {url}: stays up (trainwiz stop {run} ends it)").format(
            model=self.model, url=self.url, run=self.run_dir.name
        )


def live_serves(run_dirs: list[Path]) -> list[ServeRow]:
    """The servers of ``run_dirs`` still up (blocking: reads /proc; a worker)."""
    from backend.results.serve_run import live_serve  # deferred: worker thread, serve helpers

    out = []
    for run_dir in run_dirs:
        record = live_serve(run_dir)
        if record is not None:
            out.append(ServeRow(run_dir, str(record.get("model") or run_dir.name),
                                str(record.get("base_url") or "?")))  # fmt: skip
    return out


class RunsScreen(ModalScreen[Path | None]):
    """Runs on this machine: state, preset, step, loss; Enter shows one on the Monitor."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss_none", N_("Close"), id="runs.close"),
        Binding("r", "reload", N_("Reload"), id="runs.reload"),
    ]
    DEFAULT_CSS = """
    RunsScreen { align: center middle; }
    RunsScreen > Vertical {
        width: 95%; max-width: 130; height: 80%; border: thick $accent;
        background: $surface; padding: 0 1;
    }
    RunsScreen DataTable { height: 1fr; }
    RunsScreen #runs-note { height: auto; color: $text-muted; }
    """

    @dataclass
    class Loaded(Message):
        rows: list[RunRow]
        error: str

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[RunRow] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(_("Runs on this machine"), classes="section-title")
            yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
            yield Static(_("reading the runs…"), id="runs-note")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns(_("run"), _("state"), _("preset"), _("step"), _("loss"))
        table.focus()
        self.action_reload()
        self.set_interval(2.0, self.action_reload)  # live runs move on while the list is open

    def action_reload(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="runs-list")
    def _load(self) -> None:
        try:
            self.post_message(self.Loaded(run_rows(), ""))
        except Exception as exc:  # one unreadable home must not crash the wizard
            self.post_message(self.Loaded([], f"{type(exc).__name__}: {exc}"))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        self.rows = message.rows
        table = self.query_one(DataTable)
        row_at = table.cursor_row  # a reload keeps the user's place in the list
        table.clear()
        for row in message.rows:
            table.add_row(
                row.run_id, row.state, row.preset, row.step_text(), row.loss_text(), key=row.run_id
            )
        if message.rows:
            table.move_cursor(row=min(row_at, len(message.rows) - 1))
        note = self.query_one("#runs-note", Static)
        if message.error:
            note.update(_("Runs could not be read: {error}").format(error=message.error))
        elif not message.rows:
            note.update(_("No runs yet: launch one in the Launch step."))
        else:
            note.update(
                _(
                    "{n} run(s), {live} live. Enter shows a run on the Monitor; Escape closes."
                ).format(n=len(message.rows), live=len(live_runs(message.rows)))
            )

    @on(DataTable.RowSelected)
    def _chosen(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value
        found = next((r for r in self.rows if r.run_id == key), None)
        self.dismiss(found.run_dir if found is not None else None)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
