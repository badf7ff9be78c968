"""From the Queue view (F7) to the Monitor and the Compare view, on real run directories and a
real queue.db (items made by ``backend.queue.ops``, sweeps by ``backend.queue.sweep``; the queue
stays paused, so no scheduler starts and nothing trains):

- Enter (or ``m``) on an item with a run opens the Monitor on exactly that run;
- ``f`` makes the Monitor follow the queue: it shows the running item's run, and when that run
  ends and the next item runs, it switches to the new run by itself and says which item it is;
- ``c`` on a sweep's item opens Compare on the variants' runs that exist, in rank order, titled
  with the sweep; with fewer than two runs it says so instead.

A "running" run here is a run directory whose status.json says running and names a live watcher
(a ``sleep`` stands in for it), so ``refresh`` (the Queue view's listing) keeps it running.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Footer

from backend.preset import load_preset
from backend.procinfo import proc_info
from backend.queue import db
from backend.queue.ops import insert, set_paused
from backend.queue.sweep import create_sweep
from backend.rundir import RunStatus, write_status
from screens.compare import CompareScreen
from screens.monitor import MonitorScreen
from screens.queue import QueueScreen
from tests.backend.test_sweep_rank import write_step_metrics
from tests.waiting import pilot_until
from tui.app import TrainwizApp
from widgets.run_header import RunHeader

SIZES = [(120, 40), (80, 24)]
size_ids = pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")


def _home() -> Path:
    return Path(os.environ["TRAINWIZ_HOME"])


@pytest.fixture
def watcher() -> Iterator[subprocess.Popen[bytes]]:
    """A live process that a running run's status.json names as its watcher."""
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def _run(name: str, state: str, losses: list[float], watcher_pid: int | None = None) -> str:
    """A run directory as a run leaves it: status.json (``state``; a running one names its live
    watcher), metrics.jsonl with one step per loss, an empty log; its run id."""
    number = len(list((_home() / "runs").glob("*"))) if (_home() / "runs").is_dir() else 0
    run_dir = _home() / "runs" / f"20261201-00000{number}-{name}"
    run_dir.mkdir(parents=True)
    info = proc_info(watcher_pid)
    write_status(run_dir, RunStatus(
        run_id=run_dir.name, preset=name, runner="host", state=state,  # type: ignore[arg-type]
        started_at=1000.0, watcher_pid=watcher_pid, watcher_start=info.start if info else None,
    ))  # fmt: skip
    write_step_metrics(run_dir, losses)
    (run_dir / "train.log").write_text("")
    return run_dir.name


def _queue_items(count: int) -> list[db.Item]:
    """``count`` tiny-cpu items on a paused queue (``ops.insert``, as ``queue add`` stores them)."""
    set_paused(True)
    conn = db.connect()
    try:
        with db.transaction(conn):
            return [insert(conn, load_preset("tiny-cpu"), ngpus=0, cwd="/") for _n in range(count)]
    finally:
        conn.close()


def _set(item_id: int, **fields: Any) -> None:
    """What the scheduler records when it starts an item or sees its run end."""
    conn = db.connect()
    try:
        with db.transaction(conn):
            db.update_item(conn, item_id, **fields)
    finally:
        conn.close()


def _run_name(item: db.Item) -> str:
    """The name an item's run carries (its preset copy's), as a launch records it."""
    return str(load_preset(item.preset_file).name)


def _rows(app: TrainwizApp) -> list[str]:
    if not isinstance(app.screen, QueueScreen):
        return []
    table = app.screen.query_one("#queue-table", DataTable)
    return [str(table.get_row_at(i)[0]) for i in range(table.row_count)]


async def _queue_view(app: TrainwizApp, pilot: Pilot[Any], count: int) -> QueueScreen:
    await pilot.press("f7")
    await pilot_until(pilot, lambda: len(_rows(app)) == count, what=f"{count} items listed",
                      timeout=20, seen=lambda: (type(app.screen).__name__, _rows(app)))  # fmt: skip
    assert isinstance(app.screen, QueueScreen)
    return app.screen


def _shown(app: TrainwizApp) -> str | None:
    """The run the Monitor shows (its RunHeader's id and its followed files' agree)."""
    screen = app.screen
    if not isinstance(screen, MonitorScreen) or screen.run is None:
        return None
    header = screen.query(RunHeader)
    if not header or header.first().run_id != screen.run.run_id:
        return None
    return screen.run.run_id


def _said(app: TrainwizApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


def _footer_line(app: TrainwizApp) -> str:
    """The footer as the terminal shows it (what fits the width, not what is bound)."""
    footer = app.screen.query_one(Footer)
    strips = app.screen._compositor.render_update(full=True).strips  # type: ignore[union-attr]
    return "".join(s.text for s in strips[footer.region.y])


@size_ids
async def test_enter_or_m_on_an_item_opens_the_monitor_on_its_run(size: tuple[int, int]) -> None:
    first, second, waiting = _queue_items(3)
    run_a = _run(_run_name(first), "finished", [3.0, 2.0])
    run_b = _run(_run_name(second), "failed", [4.0])
    _set(first.id, state="finished", run_id=run_a, started_at=10.0, ended_at=20.0)
    _set(second.id, state="failed", run_id=run_b, started_at=21.0, ended_at=30.0)
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="launch")
    async with app.run_test(size=size) as pilot:
        queue = await _queue_view(app, pilot, 3)
        line = _footer_line(app)  # all six keys fit beside the palette key, at 80 columns too
        assert "m Monitor" in line and "f Follow" in line and "c Compare" in line, line
        assert line.rstrip().endswith("^p palette"), line
        await pilot.press("down", "enter")  # item 2
        await pilot_until(pilot, lambda: _shown(app) == run_b, what="the Monitor on item 2's run",
                          timeout=20, seen=lambda: (type(app.screen).__name__, _shown(app)))  # fmt: skip
        assert app.current_run == _home() / "runs" / run_b

        await _queue_view(app, pilot, 3)
        await pilot.press("m")  # the cursor starts on item 1
        await pilot_until(pilot, lambda: _shown(app) == run_a, what="the Monitor on item 1's run",
                          timeout=20, seen=lambda: (type(app.screen).__name__, _shown(app)))  # fmt: skip

        queue = await _queue_view(app, pilot, 3)
        await pilot.press("down", "down", "enter")  # item 3: queued, no run yet
        await pilot_until(pilot, lambda: any(f"Item {waiting.id} has no run" in s for s in _said(app)),
                          what="the note that item 3 has no run", timeout=20,
                          seen=lambda: _said(app))  # fmt: skip
        assert app.screen is queue  # the view stays


@size_ids
async def test_f_follows_the_queue_to_the_next_running_item(
    size: tuple[int, int], watcher: subprocess.Popen[bytes]
) -> None:
    first, second = _queue_items(2)
    run_1 = _run(_run_name(first), "running", [3.0], watcher.pid)
    _set(first.id, state="running", run_id=run_1, started_at=10.0)
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="launch")
    async with app.run_test(size=size) as pilot:
        await _queue_view(app, pilot, 2)
        await pilot.press("f")
        await pilot_until(pilot, lambda: _shown(app) == run_1, what="the Monitor on item 1's run",
                          timeout=20, seen=lambda: (type(app.screen).__name__, _shown(app)))  # fmt: skip

        # the run ends and the scheduler starts the next item, as it records them
        run_dir = _home() / "runs" / run_1
        status = json.loads((run_dir / "status.json").read_text())
        write_status(run_dir, RunStatus(**{**status, "state": "finished", "ended_at": 20.0}))
        _set(first.id, state="finished", ended_at=20.0)
        run_2 = _run(_run_name(second), "running", [], watcher.pid)
        _set(second.id, state="running", run_id=run_2, started_at=21.0)

        await pilot_until(pilot, lambda: _shown(app) == run_2,
                          what="the Monitor to switch to item 2's run by itself", timeout=20,
                          seen=lambda: (type(app.screen).__name__, _shown(app)))  # fmt: skip
        assert app.current_run == run_dir.parent / run_2
        await pilot_until(pilot, lambda: any(f"Item {second.id} (tiny-cpu)" in s
                                             for s in _said(app)),
                          what="the note naming item 2", timeout=20, seen=lambda: _said(app))  # fmt: skip
        monitor = app.screen
        assert isinstance(monitor, MonitorScreen) and monitor.queue_following
        assert f"item {second.id}" in str(monitor.sub_title)

        await _queue_view(app, pilot, 2)  # choosing a run ends following the queue
        await pilot.press("m")
        await pilot_until(pilot, lambda: _shown(app) == run_1, what="the Monitor on item 1's run",
                          timeout=20, seen=lambda: (type(app.screen).__name__, _shown(app)))  # fmt: skip
        await pilot_until(pilot, lambda: not monitor.queue_following, what="following stopped",
                          timeout=20, seen=lambda: monitor.sub_title)  # fmt: skip
        assert monitor.sub_title is None


@size_ids
async def test_c_on_a_sweep_item_compares_its_runs_in_rank_order(size: tuple[int, int]) -> None:
    set_paused(True)
    sweep = create_sweep("tiny-cpu", ["training.learning_rate=1e-3,2e-3,3e-3,4e-3"], metric="loss")
    ids = [item_id for _label, item_id, _file in sweep.queued]
    conn = db.connect()
    try:
        items = {i.id: i for i in db.items(conn)}
    finally:
        conn.close()
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="launch")
    async with app.run_test(size=size) as pilot:
        queue = await _queue_view(app, pilot, 4)
        await pilot.press("c")  # nothing ran yet: no comparison, a note
        await pilot_until(pilot, lambda: any("needs two" in s for s in _said(app)),
                          what="the note that there is nothing to compare", timeout=20,
                          seen=lambda: _said(app))  # fmt: skip
        assert app.screen is queue

        runs = {}
        for item_id, (state, losses) in zip(ids, [("finished", [5.0, 3.0]),
                                                  ("finished", [5.0, 2.0]),
                                                  ("failed", [5.0, 4.0]), ("queued", None)]):  # fmt: skip
            if losses is None:
                continue
            runs[item_id] = _run(_run_name(items[item_id]), state, losses)
            _set(item_id, state=state, run_id=runs[item_id])
        gone = _home() / "runs" / runs[ids[2]]  # the third ran, but its directory is gone
        for path in gone.iterdir():
            path.unlink()
        gone.rmdir()

        await pilot.press("down", "c")  # any of the sweep's items
        await pilot_until(pilot, lambda: isinstance(app.screen, CompareScreen)
                          and app.screen.figures is not None,
                          what="Compare with its figures", timeout=30,
                          seen=lambda: (type(app.screen).__name__, _said(app)))  # fmt: skip
        compare = app.screen
        assert isinstance(compare, CompareScreen)
        assert [r.run_id for r in compare.figures.runs] == [runs[ids[1]], runs[ids[0]]]
        assert sweep.id in str(compare.title)
        table = compare.query_one("#compare-table", DataTable)
        assert [str(c.label) for c in table.columns.values()][1:] == [runs[ids[1]], runs[ids[0]]]
