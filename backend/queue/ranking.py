"""A sweep's variants ranked by its metric, and the ``sweep_finished`` webhook message.

The value a variant is ranked by is compare's (``backend.results.compare.run_figures``, which
reads ``backend.monitor.figures``'s one definition of a run's figures and its continued metrics
series): ``best`` is the lowest value the run reached, ``final`` its last one; lower ranks
first, and a variant without a value (failed before it logged one, not run yet) comes after the
ranked ones in queue order. ``trainwiz sweep show``, its ``--json``, the wizard and the webhook
all read ``rank_sweep``, so they agree.

The notification goes through the webhooks of the sweep's preset (its ``notify:`` block,
event ``sweep_finished``), delivered by ``backend.runs.notify`` exactly as a run's end is; the
outcome is logged in the sweep's folder (``notify.log``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from backend import paths
from backend.preset.loader import load_preset
from backend.queue import db
from backend.results.compare import RunFigures, run_figures
from backend.runs import notify

TOP = 3


@dataclass
class RankedVariant:
    rank: int | None  # 1 = best; None: no value to rank by
    item: db.Item
    value: float | None
    figures: RunFigures | None  # None until the variant has a run


@dataclass
class SweepRanking:
    id: str
    base: str
    metric: str
    rank_by: str
    dir: str
    notified_at: float | None
    variants: list[RankedVariant] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return bool(self.variants) and all(v.item.final for v in self.variants)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for variant in self.variants:
            out[variant.item.state] = out.get(variant.item.state, 0) + 1
        return out


def metric_value(fig: RunFigures, metric: str, rank_by: str) -> float | None:
    if metric == "eval_loss":
        return fig.min_eval_loss if rank_by == "best" else fig.final_eval_loss
    return fig.min_loss if rank_by == "best" else fig.final_loss


def rank_sweep(conn: sqlite3.Connection, sweep_id: str) -> SweepRanking:
    row = conn.execute("SELECT * FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
    if row is None:
        raise KeyError(sweep_id)
    out = SweepRanking(row["id"], row["base"], row["metric"], row["rank_by"], row["dir"],
                       row["notified_at"])  # fmt: skip
    for item in (i for i in db.items(conn) if i.sweep_id == sweep_id):
        figures = None
        run_dir = paths.runs_dir() / item.run_id if item.run_id else None
        if run_dir is not None and run_dir.is_dir():
            try:
                figures = run_figures(run_dir)
            except Exception:  # one unreadable run never hides the others
                figures = None
        value = metric_value(figures, out.metric, out.rank_by) if figures else None
        out.variants.append(RankedVariant(None, item, value, figures))
    ranked = sorted((v for v in out.variants if v.value is not None), key=lambda v: v.value or 0)
    for number, variant in enumerate(ranked, 1):
        variant.rank = number
    out.variants = ranked + [v for v in out.variants if v.value is None]
    return out


def sweep_message(ranking: SweepRanking) -> notify.Message:
    """``sweep_finished``: the top three with their values, what failed, where to see all."""
    what = f"{ranking.rank_by} {ranking.metric}"
    top = [v for v in ranking.variants if v.rank is not None][:TOP]
    lines = [f"{v.rank}. {v.item.label} = {v.value:.4f} (run {v.item.run_id})" for v in top]
    failed = [v for v in ranking.variants if v.item.state == "failed"]
    counts = ", ".join(f"{n} {state}" for state, n in sorted(ranking.counts().items()))
    text = "\n".join([f"ranked by {what} ({counts}):", *lines] + [
        f"failed: {v.item.label}" + (f" ({v.item.diagnosis_category}: {v.item.diagnosis_title})"
                                     if v.item.diagnosis_category else "")
        for v in failed
    ] + [f"trainwiz sweep show {ranking.id}"])  # fmt: skip
    fields: dict[str, Any] = {
        "sweep_id": ranking.id,
        "metric": ranking.metric,
        "rank_by": ranking.rank_by,
        "variants": len(ranking.variants),
        "states": ranking.counts(),
        "top": [
            {
                "rank": v.rank,
                "label": v.item.label,
                "values": v.item.overrides,
                "run_id": v.item.run_id,
                "value": v.value,
            }
            for v in top
        ],
    }
    title = f"trainwiz: sweep {ranking.id} finished"
    return notify.Message("sweep_finished", ranking.id, title, text, fields)


def notify_finished_sweeps(conn: sqlite3.Connection, say: Callable[[str], None]) -> bool:
    """Send ``sweep_finished`` once for each sweep whose variants all ended: the sweep is
    marked notified in a transaction first, so a restart never sends it twice."""
    changed = False
    pending = [r["id"] for r in conn.execute("SELECT id FROM sweeps WHERE notified_at IS NULL")]
    for sweep_id in pending:
        ranking = rank_sweep(conn, sweep_id)
        if not ranking.done:
            continue
        with db.transaction(conn):
            claimed = conn.execute(
                "UPDATE sweeps SET notified_at = ? WHERE id = ? AND notified_at IS NULL",
                (time.time(), sweep_id),
            ).rowcount
        if not claimed:
            continue
        changed = True
        say(f"sweep {sweep_id} finished: " + ", ".join(
            f"{v.rank}. {v.item.label}" for v in ranking.variants if v.rank)[:400])  # fmt: skip
        settings = _settings(ranking)
        if settings is None or not settings.webhooks:
            continue
        try:
            notify.send(paths.home() / db.SWEEPS_DIR / sweep_id, sweep_message(ranking),
                        settings, logs=(notify.NOTIFY_LOG,))  # fmt: skip
        except Exception as exc:  # a notifier bug never stops the queue
            say(f"sweep {sweep_id}: not sent ({type(exc).__name__})")
    return changed


def _settings(ranking: SweepRanking) -> Any:
    """The notify block of the sweep's variants (they share the base preset's)."""
    for variant in ranking.variants:
        try:
            return load_preset(variant.item.preset_file, host_files=False).notify
        except Exception:
            continue
    return None
