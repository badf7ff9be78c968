"""What the wizard's views take from the queue: the run the queue is running now (the Monitor's
"follow the queue" mode) and a sweep's runs in rank order (the Compare view opened on a sweep).

Both are decided here, not in the screens, so the wizard and the CLI read one rule: the items
as the scheduler recorded them in ``queue.db``, the ranking as ``trainwiz sweep show`` ranks it
(``backend.queue.ranking.rank_sweep``). Both read files and SQLite: callers run them in a
thread, never on the UI thread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from backend import paths
from backend.queue import db
from backend.queue.ranking import rank_sweep
from backend.rundir import FINAL_STATES, RunDir


@dataclass(frozen=True)
class QueueRun:
    """The queue item running now and its run (what the Monitor names when it switches)."""

    item_id: int
    run_id: str
    preset: str  # as the user queued it (the run's name adds the item's token)
    label: str | None  # a sweep variant's values (``learning_rate=2e-5``), else None
    sweep_id: str | None


def running_now(items: list[db.Item]) -> QueueRun | None:
    """The queue's current run among ``items``: a running item whose run directory exists and
    whose status.json does not say it ended, the one started first (ties: the lower id). The
    run's own record counts over the item's: a run that just ended is passed over before the
    scheduler records it, so with two running the Monitor goes on to the other at once."""
    found: list[tuple[float, int, QueueRun]] = []
    for item in items:
        if item.state != "running" or not item.run_id:
            continue
        run_dir = paths.runs_dir() / item.run_id
        if not run_dir.is_dir():
            continue
        status = RunDir(run_dir).status_dict() or {}
        if status.get("state") in FINAL_STATES:
            continue
        started = item.started_at if item.started_at is not None else math.inf
        found.append((started, item.id, QueueRun(item.id, item.run_id, item.preset_name,
                                                 item.label, item.sweep_id)))  # fmt: skip
    return min(found, key=lambda f: (f[0], f[1]))[2] if found else None


def queue_run() -> QueueRun | None:
    """The run the queue is running now, or None (nothing runs, or only ended runs are left
    for the scheduler to record)."""
    conn = db.connect()
    try:
        items = db.items(conn)
    finally:
        conn.close()
    return running_now(items)


@dataclass
class SweepRuns:
    """A sweep's variants that have a run directory, best first (``sweep show``'s order)."""

    sweep_id: str
    metric: str  # eval_loss or loss
    rank_by: str  # best or final
    run_ids: list[str] = field(default_factory=list)
    variants: int = 0  # all the sweep's variants, run or not


def sweep_runs(sweep_id: str) -> SweepRuns:
    """The runs to compare for a sweep: its variants in rank order (ranked ones by the sweep's
    metric, then those without a value in queue order), keeping only runs whose directory
    exists (a variant not started yet, or a run deleted since, has nothing to compare).
    KeyError when there is no such sweep."""
    conn = db.connect()
    try:
        ranking = rank_sweep(conn, sweep_id)
    finally:
        conn.close()
    out = SweepRuns(ranking.id, ranking.metric, ranking.rank_by, variants=len(ranking.variants))
    for variant in ranking.variants:
        run_id = variant.item.run_id
        if run_id and (paths.runs_dir() / run_id).is_dir() and run_id not in out.run_ids:
            out.run_ids.append(run_id)
    return out
