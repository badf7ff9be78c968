"""What the CLI and the wizard do to the queue: add, remove, pause, resume, list.

An item is refused when it is added, not when its turn comes: the preset is validated by the
schema, the launch's own preflight runs (a missing torchrun, data file or model), and the
planner's verdict gates it as it gates a launch (``backend.runs.plangate``). What passes is
copied into ``queue/items/<id>.yaml`` under the name the run will carry (the preset's name and
the item's token), so editing or deleting the preset file later does not change what runs.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from typing import Any

from backend import paths
from backend.atomicfile import write_private
from backend.errors import BadInput
from backend.i18n import _
from backend.plan.resolve import resolve_preset
from backend.preset.loader import preset_to_yaml
from backend.preset.schema import Preset
from backend.queue import db
from backend.queue.service import ensure_scheduler, holder
from backend.rundir import RunDir
from backend.runs.control import find_run, refresh
from backend.runs.launch import preflight
from backend.runs.plangate import plan_verdict

NAME_MAX = 100  # the schema's limit on a preset name


def run_name(preset_name: str, token: str) -> str:
    """The name the item's run carries: the preset's, then the token (the link to the item)."""
    keep = NAME_MAX - len(token) - 1
    return f"{preset_name[:keep].rstrip('._-') or 'run'}-{token}"


def admission(preset: Preset, *, ref: str | None, ignore_plan: bool) -> int | None:
    """Refuse now what the launch would refuse later (BadInput); the plan's predicted peak
    per GPU in bytes (None where the planner has no verdict: CPU, Slurm's nodes, an unknown
    model). Local one-node runs and Slurm jobs are queued; SSH multi-node runs are not (the
    queue would have to judge every node's GPUs)."""
    launch = preset.launch
    if launch.scheduler == "ssh" or (launch.scheduler == "local" and launch.nnodes != 1):
        raise BadInput(
            _(
                "launch.scheduler {scheduler} with {nnodes} node(s): the queue starts runs on "
                "this machine or hands them to Slurm (launch.scheduler: slurm): launch it with "
                "'trainwiz launch'"
            ).format(scheduler=launch.scheduler, nnodes=launch.nnodes)
        )
    preflight(resolve_preset(preset, None), ignore_plan=True, ref=ref)
    verdict = plan_verdict(preset, with_fix=not ignore_plan)
    if verdict is None:
        return None
    if not verdict.fits and not ignore_plan:
        raise BadInput(verdict.refusal(preset.name, ref))
    return int(verdict.estimate.memory.total_per_gpu)


def check_gpus(preset: Preset, gpus: list[int] | None, share: bool = False) -> int:
    """How many GPUs of this machine the item needs; BadInput when ``--gpus`` does not fit the
    preset, or when ``--gpus``/``--share`` is given for a Slurm job (Slurm picks its nodes and
    GPUs: the preset's launch.slurm block asks for them, so the flags would be silently
    ignored)."""
    if preset.launch.scheduler == "slurm":
        if gpus is not None:
            raise BadInput(
                _(
                    "--gpus: {name} runs through Slurm (launch.scheduler: slurm), which assigns "
                    "its GPUs: drop --gpus and ask for GPUs with launch.slurm.gpus_per_node"
                ).format(name=preset.name)
            )
        if share:
            raise BadInput(
                _(
                    "--share: {name} runs through Slurm (launch.scheduler: slurm), which decides "
                    "what shares a node: drop --share (launch.slurm.extra_options: "
                    "[--oversubscribe] lets jobs share nodes)"
                ).format(name=preset.name)
            )
        return 0
    if preset.launch.device != "cuda":
        if gpus is not None:
            raise BadInput(
                _("--gpus: {name} trains on the CPU (launch.device: cpu): drop --gpus").format(
                    name=preset.name
                )
            )
        return 0
    need = preset.launch.nproc_per_node
    if gpus is not None and len(gpus) != need:
        raise BadInput(
            _(
                "--gpus names {count} GPU(s) but {name} trains on launch.nproc_per_node {need}: "
                "name {need} GPUs or change nproc_per_node"
            ).format(count=len(gpus), name=preset.name, need=need)
        )
    return need


def parse_gpus(text: str | None) -> list[int] | None:
    """``--gpus 0,1`` as a list; BadInput naming the flag otherwise."""
    if text is None:
        return None
    words = [w.strip() for w in text.split(",")]
    if (
        not words
        or not all(w.isdigit() and len(w) <= 3 for w in words)
        or len(set(words)) != len(words)
    ):
        raise BadInput(
            _("--gpus {text}: give GPU indexes separated by commas, e.g. --gpus 0,1").format(
                text=text[:40]
            )
        )
    return [int(w) for w in words]


def resolve_after(conn: sqlite3.Connection, ref: str | None) -> str | None:
    """``--after``: a queue item (``q7``, ``7``) or a run (id, prefix, 'last')."""
    if ref is None:
        return None
    try:
        item_id = db.parse_item_id(ref)
    except BadInput:
        item_id = None
    if item_id is not None and db.item(conn, item_id) is not None:
        return f"item:{item_id}"
    return f"run:{find_run(ref).name}"


def runs_through(preset: Preset) -> str:
    """The item's ``scheduler``: "slurm" for a Slurm job, else "local" (this machine)."""
    return "slurm" if preset.launch.scheduler == "slurm" else "local"


def insert(conn: sqlite3.Connection, preset: Preset, **fields: Any) -> db.Item:
    """Add one item inside the caller's transaction, its preset copy written before COMMIT."""
    item = db.insert_item(
        conn, preset_name=preset.name, preset_file="", cwd=fields.pop("cwd", os.getcwd()),
        device=preset.launch.device, scheduler=runs_through(preset), **fields,
    )  # fmt: skip
    target = db.queue_dir() / "items" / f"{item.id}.yaml"
    db.queue_dir().mkdir(exist_ok=True, mode=0o700)
    target.parent.mkdir(exist_ok=True, mode=0o700)
    copy = preset.model_copy(update={"name": run_name(preset.name, item.token)})
    write_private(target, preset_to_yaml(copy))
    db.update_item(conn, item.id, preset_file=str(target))
    found = db.item(conn, item.id)
    assert found is not None
    return found


@dataclass
class Added:
    item: db.Item
    scheduler: int | None  # the scheduler's pid (None: paused, or it had nothing to do)
    paused: bool


def add(preset: Preset, *, ref: str | None = None, gpus: list[int] | None = None,
        share: bool = False, after: str | None = None, ignore_plan: bool = False,
        max_parallel: int | None = None, cwd: str | None = None) -> Added:  # fmt: skip
    """Check, queue and (unless paused) make sure the scheduler runs."""
    ngpus = check_gpus(preset, gpus, share)
    need = admission(preset, ref=ref, ignore_plan=ignore_plan)
    conn = db.connect()
    try:
        with db.transaction(conn):
            waits = resolve_after(conn, after)
            if max_parallel is not None:
                db.set_meta(conn, "max_parallel", str(max_parallel))
            item = insert(
                conn, preset, gpus=gpus, ngpus=ngpus, share=int(share), after=waits,
                ignore_plan=int(ignore_plan), need_bytes=need, cwd=cwd or os.getcwd(),
            )  # fmt: skip
        is_paused = db.paused(conn)
    finally:
        conn.close()
    return Added(item, None if is_paused else ensure_scheduler(), is_paused)


def remove(ref: str) -> db.Item:
    """Take a queued item out (a finished one leaves the list); a starting or running one is
    refused: its run is stopped with ``trainwiz stop``."""
    item_id = db.parse_item_id(ref)
    conn = db.connect()
    try:
        with db.transaction(conn):
            item = db.item(conn, item_id)
            if item is None or item.state == "removed":
                raise BadInput(
                    _("queue item {id}: no such item (see 'trainwiz queue')").format(id=item_id)
                )
            if item.state in db.ACTIVE:
                raise BadInput(
                    _(
                        "queue item {id} is {state} as run {run}: stop the run with 'trainwiz "
                        "stop {run}' (the queue then goes on)"
                    ).format(id=item_id, state=item.state, run=item.run_id or "-")
                )
            db.update_item(conn, item_id, state="removed", message=item.message or item.state)
        found = db.item(conn, item_id)
        assert found is not None
        return found
    finally:
        conn.close()


def set_paused(value: bool, max_parallel: int | None = None) -> tuple[bool, int | None]:
    """Pause (items already started go on) or resume (the scheduler starts again, also after
    a reboot); (paused, the scheduler's pid)."""
    conn = db.connect()
    try:
        with db.transaction(conn):
            db.set_meta(conn, "paused", "1" if value else "0")
            if max_parallel is not None:
                db.set_meta(conn, "max_parallel", str(max_parallel))
    finally:
        conn.close()
    return value, (holder() if value else ensure_scheduler())


@dataclass
class Row:
    """An item as ``trainwiz queue`` shows it: the run's live state where it has one."""

    id: int
    state: str
    preset: str
    gpus: str
    position: int | None
    run_id: str | None
    message: str
    diagnosis: str | None
    sweep_id: str | None
    label: str | None
    scheduler: str = "local"  # "slurm": a Slurm job (its id and state below, once submitted)
    slurm_job_id: str | None = None  # from the run's status.json (the watcher writes them)
    slurm_state: str | None = None  # Slurm's word: PENDING, RUNNING, COMPLETED, ...


def shown_state(row: Row) -> str:
    """The state column: the item's state, and a Slurm item's job id and Slurm state (the
    item "running" while Slurm holds its job PENDING says so)."""
    if row.slurm_job_id is None:
        return row.state
    return _("{state} · slurm {job} {slurm_state}").format(
        state=row.state, job=row.slurm_job_id, slurm_state=row.slurm_state or "?"
    )


def _gpus_text(item: db.Item) -> str:
    if item.scheduler == "slurm":
        return "slurm"  # Slurm assigns the nodes and GPUs
    if item.device != "cuda":
        return "cpu"
    if item.assigned is not None:
        return ",".join(map(str, item.assigned)) + (" shared" if item.share else "")
    named = ",".join(map(str, item.gpus)) if item.gpus is not None else f"any {item.ngpus}"
    return named + (" shared" if item.share else "")


def _run_view(item: db.Item) -> tuple[str, dict[str, Any]]:
    """The item's state as shown and, for a Slurm item, its run's status.json. A running
    item's run is refreshed (its own record is the newer word: it may have ended since the
    scheduler looked); an ended Slurm item's record is only read."""
    state = item.state
    if not item.run_id:
        return state, {}
    run_dir = paths.runs_dir() / item.run_id
    if not run_dir.is_dir():
        return state, {}
    if item.state == "running":
        live = refresh(run_dir)
        state = live.state if live.state in db.FINAL else state
        if item.scheduler != "slurm":
            return state, {}
        return state, {**(live.model_extra or {}), "message": live.message}
    if item.scheduler != "slurm":
        return state, {}
    return state, RunDir(run_dir).status_dict() or {}


def listing() -> dict[str, Any]:
    """The queue as ``trainwiz queue --json`` prints it (and the wizard's Queue view shows)."""
    conn = db.connect()
    try:
        found = db.items(conn)
        is_paused, limit = db.paused(conn), db.max_parallel(conn)
    finally:
        conn.close()
    rows, place = [], 0
    for item in found:
        state, run = _run_view(item)
        position = None
        if item.state == "queued":
            place += 1
            position = place
        diagnosis = (
            f"{item.diagnosis_category}: {item.diagnosis_title}"
            if item.diagnosis_category
            else None
        )
        job = run.get("slurm_job_id")
        message = item.message
        if run.get("slurm_state") == "PENDING" and item.state in db.ACTIVE:
            message = str(run.get("message") or message)  # why Slurm holds it back
        rows.append(Row(item.id, state, item.preset_name, _gpus_text(item), position,
                        item.run_id, message, diagnosis, item.sweep_id, item.label,
                        item.scheduler, None if job is None else str(job),
                        run.get("slurm_state")))  # fmt: skip
    pid = holder()
    return {
        "paused": is_paused,
        "max_parallel": limit,
        "scheduler": {"running": pid is not None, "pid": pid if pid and pid > 0 else None},
        "items": rows,
    }
