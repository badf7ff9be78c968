"""``trainwiz sweep PRESET --set ...``: write the variants, plan them, queue them in one go.

Order matters and is the point: every variant is validated (``backend.queue.grid``) before any
file is written; then each is judged as a queued item is (the launch's preflight and the
planner's verdict, ``backend.queue.ops.admission``), and a variant refused there is named with
the reason and left out; then the sweep's folder (``TRAINWIZ_HOME/sweeps/<id>/``: one preset
per variant, named by its values, and ``sweep.json``) is written and all its items are queued
in one transaction, so a sweep is in the queue whole or not at all.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from backend.atomicfile import write_json, write_private
from backend.errors import BadInput
from backend.i18n import _
from backend.preset.loader import load_preset
from backend.preset.schema import Preset
from backend.queue import db, grid
from backend.queue.ops import admission, check_gpus, insert
from backend.queue.service import ensure_scheduler
from backend.rundir import run_id_name

Metric = Literal["eval_loss", "loss"]
RankBy = Literal["best", "final"]
SWEEP_FILE = "sweep.json"


@dataclass
class SweepResult:
    id: str
    dir: Path
    metric: str
    rank_by: str
    queued: list[tuple[str, int, str]] = field(default_factory=list)  # label, item id, file
    refused: list[tuple[str, str]] = field(default_factory=list)  # label, why
    scheduler: int | None = None
    paused: bool = False


def default_metric(preset: Preset) -> Metric:
    """eval_loss where the preset evaluates, else the training loss."""
    training = preset.training
    evaluates = training.eval_strategy != "no" and bool(
        training.eval_data_path or training.eval_split
    )
    return "eval_loss" if evaluates else "loss"


def _new_folder(base: str) -> tuple[str, Path]:
    root = db.sweeps_dir()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    number = 1
    while True:
        sweep_id = f"{stamp}-{run_id_name(base)}" + (f"-{number}" if number > 1 else "")
        try:
            (root / sweep_id).mkdir(mode=0o700)
        except FileExistsError:
            number += 1
            continue
        return sweep_id, root / sweep_id


def create_sweep(ref: str, sets: list[str], *, samples: int | None = None, seed: int = 0,
                 metric: Metric | None = None, rank_by: RankBy = "best",
                 max_parallel: int | None = None, gpus: list[int] | None = None,
                 share: bool = False, ignore_plan: bool = False) -> SweepResult:  # fmt: skip
    """Validate, plan and queue a sweep (module docstring); BadInput before anything is
    written when a variant is invalid, or when the planner refuses every variant."""
    base = load_preset(ref)
    if not sets:
        raise BadInput(_("sweep: give at least one --set path=v1,v2"))
    combos = grid.combinations([grid.parse_set(s) for s in sets], samples, seed)
    ngpus = check_gpus(base, gpus, share)
    folder_hint = db.sweeps_dir() / "<id>"
    variants = grid.build_variants(base, combos, folder_hint)  # raises before any write
    admitted: list[tuple[grid.Variant, int | None]] = []
    refused: list[tuple[str, str]] = []
    for variant in variants:
        try:
            need = admission(variant.preset, ref=None, ignore_plan=ignore_plan)
        except BadInput as exc:
            refused.append((variant.label, "; ".join(exc.problems)))
            continue
        admitted.append((variant, need))
    if not admitted:
        raise BadInput(
            [_("sweep variant {label}: refused: {why}").format(label=label, why=why)
             for label, why in refused]
        )  # fmt: skip
    chosen = metric or default_metric(base)
    sweep_id, folder = _new_folder(base.name)
    result = SweepResult(sweep_id, folder, chosen, rank_by, refused=refused)
    for variant in variants:
        write_private(folder / f"{variant.stem}.yaml", variant.text)
    conn = db.connect()
    try:
        with db.transaction(conn):
            conn.execute(
                "INSERT INTO sweeps (id, base, metric, rank_by, dir, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (sweep_id, base.name, chosen, rank_by, str(folder), time.time()),
            )
            if max_parallel is not None:
                db.set_meta(conn, "max_parallel", str(max_parallel))
            for variant, need in admitted:
                item = insert(
                    conn, variant.preset, gpus=gpus, ngpus=ngpus, share=int(share),
                    ignore_plan=int(ignore_plan), need_bytes=need, cwd=os.getcwd(),
                    sweep_id=sweep_id, label=variant.label, overrides=variant.overrides,
                )  # fmt: skip
                result.queued.append((variant.label, item.id, str(folder / f"{variant.stem}.yaml")))
        result.paused = db.paused(conn)
    finally:
        conn.close()
    write_json(folder / SWEEP_FILE, {
        "id": sweep_id, "base": ref, "base_name": base.name, "sets": sets, "samples": samples,
        "seed": seed, "metric": chosen, "rank_by": rank_by,
        "variants": [{"label": v.label, "file": f"{v.stem}.yaml", "values": v.overrides}
                     for v in variants],
        "queued": [{"label": label, "item": item_id} for label, item_id, _f in result.queued],
        "refused": [{"label": label, "why": why} for label, why in refused],
    })  # fmt: skip
    result.scheduler = None if result.paused else ensure_scheduler()
    return result


def sweep_ids() -> list[str]:
    """Every sweep of this home, oldest first."""
    conn = db.connect()
    try:
        return [row["id"] for row in conn.execute("SELECT id FROM sweeps ORDER BY created_at")]
    finally:
        conn.close()


def find_sweep(ref: str) -> str:
    """A sweep by id, unique prefix or suffix, or 'last'."""
    known = sweep_ids()
    if ref in ("last", "latest") and known:
        return known[-1]
    if ref in known:
        return ref
    found = [s for s in known if s.startswith(ref) or s.endswith(ref)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise BadInput(_("sweep '{ref}': no such sweep (see 'trainwiz sweep show')").format(
            ref=ref[:80]))  # fmt: skip
    raise BadInput(_("sweep '{ref}' is ambiguous ({names}): give more of the id").format(
        ref=ref[:80], names=", ".join(found[:5])))  # fmt: skip


def sweep_record(sweep_id: str) -> dict[str, object]:
    """sweep.json of a sweep ({} when it cannot be read)."""
    try:
        data = json.loads((db.sweeps_dir() / sweep_id / SWEEP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
