"""The queue's Slurm path without Slurm or a training: an item whose preset says
``launch.scheduler: slurm`` is handed over at once (Slurm queues it; the local --max-parallel
and free-GPU rules are for runs on this machine), ``--gpus``/``--share`` on one are refused at
once naming the flag and the fix, ``trainwiz queue`` shows the run's Slurm job id and state, and
a queue.db made before the item recorded how it runs still opens."""

from __future__ import annotations

import functools
import json
import os
import socket
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from backend.preset import load_preset
from backend.procinfo import start_time
from backend.queue import db
from backend.queue import scheduler as scheduler_module
from backend.queue.ops import insert
from backend.rundir import RunStatus, write_status
from tests.trainwiz_cli import cli as run_cli

ROOT = Path(__file__).resolve().parents[2]
cli = functools.partial(run_cli, check=False)


def home() -> Path:
    return Path(os.environ["TRAINWIZ_HOME"])


def slurm_yaml(tmp_path: Path) -> Path:
    """tiny-cpu through Slurm (never submitted here)."""
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["name"] = "tiny-slurm"
    data["launch"].update(scheduler="slurm", nnodes=1, slurm={"partition": "ci"})
    path = tmp_path / "tiny-slurm.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ("queue", "add", "{preset}", "--gpus", "0"),
        ("queue", "add", "{preset}", "--share"),
        ("sweep", "{preset}", "--set", "training.learning_rate=1e-4,2e-4", "--gpus", "0,1"),
    ],
)
def test_gpus_and_share_on_a_slurm_item_are_refused_naming_the_flag(
    tmp_path: Path, argv: tuple[str, ...]
) -> None:
    preset = slurm_yaml(tmp_path)
    done = cli(*(a.format(preset=preset) for a in argv))
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    flag = "--share" if "--share" in argv else "--gpus"
    assert f"{flag}: tiny-slurm runs through Slurm" in line, line
    assert "launch.scheduler: slurm" in line and "launch.slurm." in line, line
    assert not (home() / "queue").exists() and not (home() / "sweeps").exists()


class Spawned:
    """What the scheduler's ``subproc.spawn`` was given for one launcher (none is started)."""

    def __init__(self, argv: list[str], **kwargs: Any) -> None:
        self.argv, self.env = argv, dict(kwargs["env"])

    def poll(self) -> int:
        return 0


def test_a_slurm_item_is_handed_to_slurm_past_the_local_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--max-parallel 1 with a local CPU run going, and NVML saying no GPU here: a local CPU
    item waits, the Slurm items (a CPU one and a CUDA one) start at once, on no local GPU; a
    Slurm item that runs holds no CPU slot."""
    spawned: dict[str, Spawned] = {}

    def spawn(argv: list[str], **kwargs: Any) -> Spawned:
        spawned[argv[-1]] = Spawned(argv, **kwargs)
        return spawned[argv[-1]]

    monkeypatch.setattr(scheduler_module.subproc, "spawn", spawn)
    monkeypatch.setattr(scheduler_module, "gpu_snapshot", lambda: {"error": "Driver Not Loaded"})
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    local, slurm = load_preset("tiny-cpu"), load_preset(str(slurm_yaml(tmp_path)))
    conn = db.connect()
    with db.transaction(conn):
        db.set_meta(conn, "max_parallel", "1")
        going = insert(conn, local, ngpus=0)
        db.update_item(conn, going.id, state="running", run_id="20261201-000000-x")
        waits = insert(conn, local, ngpus=0)
        on_cpu = insert(conn, slurm, ngpus=0)
        on_cuda = insert(conn, slurm, ngpus=0)
        conn.execute("UPDATE items SET device = 'cuda', ngpus = 2 WHERE id = ?", (on_cuda.id,))
    assert db.item(conn, on_cpu.id).scheduler == "slurm"  # type: ignore[union-attr]
    assert db.item(conn, waits.id).scheduler == "local"  # type: ignore[union-attr]

    sched = scheduler_module.Scheduler(conn)
    assert sched.start_ready(db.items(conn))
    after = {i.id: i for i in db.items(conn)}
    assert sorted(spawned) == [str(on_cpu.id), str(on_cuda.id)]
    for it in (on_cpu, on_cuda):
        assert after[it.id].state == "starting" and after[it.id].assigned is None
        assert "CUDA_VISIBLE_DEVICES" not in spawned[str(it.id)].env  # Slurm assigns GPUs
        assert spawned[str(it.id)].env[scheduler_module.MARKER] == it.token
    assert after[waits.id].state == "queued"
    assert after[waits.id].message == "1 of --max-parallel 1 CPU runs are running"

    with db.transaction(conn):  # the local run ended; the Slurm ones run: the slot is free
        db.update_item(conn, going.id, state="finished")
        for it in (on_cpu, on_cuda):
            db.update_item(conn, it.id, state="running")
    assert sched.start_ready(db.items(conn))
    assert str(waits.id) in spawned
    assert db.item(conn, waits.id).state == "starting"  # type: ignore[union-attr]
    conn.close()


def fake_slurm_run(name: str, state: str, job: str, slurm_state: str, message: str) -> Path:
    """A Slurm run's status.json as the watcher writes it; a "running" one names this test's
    process as its watcher on this host, so the CLI trusts it without asking Slurm."""
    run_dir = home() / "runs" / f"20261201-000000-{name}"
    run_dir.mkdir(parents=True)
    me = os.getpid()
    extra = {"slurm_job_id": job, "slurm_state": slurm_state, "scheduler": "slurm",
             "watcher_host": socket.gethostname()}  # fmt: skip
    write_status(run_dir, RunStatus(run_id=run_dir.name, preset=name, runner="host", state=state,
                                    watcher_pid=me, watcher_start=start_time(me),
                                    message=message, **extra))  # fmt: skip
    (run_dir / "train.log").write_text("")
    return run_dir


def test_the_queue_shows_a_slurm_items_job_id_and_state(tmp_path: Path) -> None:
    assert cli("queue", "pause").returncode == 0
    slurm = load_preset(str(slurm_yaml(tmp_path)))
    conn = db.connect()
    with db.transaction(conn):
        pending, done = insert(conn, slurm, ngpus=0), insert(conn, slurm, ngpus=0)
    held = "slurm job 123 pending: held by its user (scontrol release JOBID) (JobHeldUser)"
    runs = [fake_slurm_run("a", "running", "123", "PENDING", held),
            fake_slurm_run("b", "finished", "124", "COMPLETED", "finished")]  # fmt: skip
    with db.transaction(conn):
        db.update_item(conn, pending.id, state="running", run_id=runs[0].name)
        db.update_item(conn, done.id, state="finished", run_id=runs[1].name)
    conn.close()
    listed = json.loads(cli("queue", "--json").stdout)["items"]
    shown = [(r["id"], r["state"], r["scheduler"], r["gpus"], r["slurm_job_id"], r["slurm_state"])
             for r in listed]  # fmt: skip
    assert shown == [
        (pending.id, "running", "slurm", "slurm", "123", "PENDING"),
        (done.id, "finished", "slurm", "slurm", "124", "COMPLETED"),
    ]
    text = cli("queue").stdout
    assert "running · slurm 123 PENDING" in text and "finished · slurm 124 COMPLETED" in text
    assert "held by its user" in text  # why Slurm holds it back, in the note


OLD_ITEMS = """CREATE TABLE items (
    id INTEGER PRIMARY KEY AUTOINCREMENT, position INTEGER NOT NULL,
    preset_name TEXT NOT NULL, preset_file TEXT NOT NULL, cwd TEXT NOT NULL,
    device TEXT NOT NULL, gpus TEXT, ngpus INTEGER NOT NULL DEFAULT 0,
    share INTEGER NOT NULL DEFAULT 0, after TEXT, ignore_plan INTEGER NOT NULL DEFAULT 0,
    need_bytes INTEGER, state TEXT NOT NULL DEFAULT 'queued', token TEXT NOT NULL DEFAULT '',
    run_id TEXT, assigned TEXT, launches INTEGER NOT NULL DEFAULT 0,
    message TEXT NOT NULL DEFAULT '', diagnosis_category TEXT, diagnosis_title TEXT,
    sweep_id TEXT, label TEXT, overrides TEXT, added_at REAL NOT NULL, started_at REAL,
    ended_at REAL)"""


def test_a_queue_db_from_before_the_scheduler_column_still_opens() -> None:
    home().mkdir(parents=True, exist_ok=True)
    old = sqlite3.connect(db.db_path())
    old.execute(OLD_ITEMS)
    old.execute(
        "INSERT INTO items (position, preset_name, preset_file, cwd, device, state, token, "
        "added_at) VALUES (1, 'tiny-cpu', '/nowhere.yaml', '/', 'cpu', 'finished', 'q1.ab12', 0)"
    )
    old.commit()
    old.close()
    conn = db.connect()
    (only,) = db.items(conn)
    assert (only.preset_name, only.scheduler, only.state) == ("tiny-cpu", "local", "finished")
    conn.close()
    listed = json.loads(cli("queue", "--json").stdout)["items"]
    assert [(r["id"], r["scheduler"], r["slurm_job_id"]) for r in listed] == [(1, "local", None)]
