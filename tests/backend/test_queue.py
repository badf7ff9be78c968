"""The run queue without trainings: GPU admission on NVML snapshots, two `queue add` racing,
the scheduler's lock, its restart (an item left "starting" by a killed scheduler goes back to
the queue or is adopted by its token, never launched twice), refusals (exit 2), and a sweep's
variants validated before anything is written."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from backend.preset import load_preset
from backend.queue import db
from backend.queue.admit import decide_cpu, decide_gpus
from backend.queue.ops import insert, run_name
from backend.queue.service import holder
from backend.rundir import RunStatus, write_status
from tests.trainwiz_cli import cli as run_cli
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
cli = functools.partial(run_cli, check=False)
GIB = 1 << 30


def home() -> Path:
    return Path(os.environ["TRAINWIZ_HOME"])


def item(**fields: object) -> db.Item:
    base: dict[str, object] = dict(
        id=1, position=1, preset_name="p", preset_file="", cwd="/", device="cuda", gpus=None,
        ngpus=1, share=False, after=None, ignore_plan=False, need_bytes=None, state="queued",
        token="q1.abcd", run_id=None, assigned=None, launches=0, message="",
        diagnosis_category=None, diagnosis_title=None, sweep_id=None, label=None, overrides=None,
        added_at=0.0, started_at=None, ended_at=None,
    )  # fmt: skip
    base.update(fields)
    return db.Item(**base)  # type: ignore[arg-type]


def gpu(index: int, used: int = 0, procs: int = 0, total: int = 80 * GIB) -> dict:
    return {"index": index, "memory_total": total, "memory_used": used,
            "processes": [{"pid": 100 + p, "owner": "python (ann)"} for p in range(procs)]}  # fmt: skip


def test_gpus_are_free_only_without_processes_other_items_or_too_little_memory() -> None:
    snap = {"gpus": [gpu(0, 5 * GIB, procs=1), gpu(1), gpu(2, 3 * GIB), gpu(3)]}
    running = item(id=9, state="running", assigned=[3])
    picked = decide_gpus(item(ngpus=1), snap, [running])
    assert picked.gpus == [1]  # 0 has a process, 3 runs another item
    assert decide_gpus(item(ngpus=2), snap, [running]).gpus is None  # 2: memory used, unseen
    assert "pid 100" in decide_gpus(item(gpus=[0, 1], ngpus=2), snap, []).why
    assert "another queue item" in decide_gpus(item(gpus=[3], ngpus=1), snap, [running]).why
    need = item(ngpus=1, need_bytes=81 * GIB)
    assert decide_gpus(need, snap, [running]).why == (
        "GPU 0 has 75.0 GiB free, the plan needs 81.0 GiB")  # fmt: skip
    shared = item(gpus=[0], ngpus=1, share=True, need_bytes=70 * GIB)
    assert decide_gpus(shared, snap, []).gpus == [0]  # --share: only the memory counts
    sharer = item(id=8, state="running", assigned=[1], share=True)
    assert "--share" in decide_gpus(item(gpus=[1], ngpus=1), snap, [sharer]).why
    assert decide_gpus(item(gpus=[1], ngpus=1, share=True), snap, [sharer]).gpus == [1]
    assert "not on this machine" in decide_gpus(item(gpus=[7], ngpus=1), snap, []).why
    assert "NVML" in decide_gpus(item(), {"error": "Driver Not Loaded"}, []).why
    cpu = [item(device="cpu", state="running"), item(device="cpu", state="starting")]
    assert decide_cpu(cpu, 2).gpus is None and decide_cpu(cpu, 3).gpus == []


def test_two_queue_adds_racing_get_their_own_ids_and_positions() -> None:
    assert cli("queue", "pause").returncode == 0
    argv = [sys.executable, "-m", "tui.cli", "queue", "add", "tiny-cpu", "--json"]
    procs = [subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _n in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    added = [json.loads(out)["item"] for out, _err in outs]
    assert sorted(a["id"] for a in added) == [1, 2]
    listed = json.loads(cli("queue", "--json").stdout)
    assert [(i["id"], i["state"], i["position"]) for i in listed["items"]] == [
        (1, "queued", 1), (2, "queued", 2)]  # fmt: skip
    assert listed["paused"] and not listed["scheduler"]["running"]
    for a in added:  # each item's own copy, named with its token
        assert load_preset(a["preset_file"]).name == f"tiny-cpu-{a['token']}"


def fake_run(token_name: str, state: str) -> Path:
    run_dir = home() / "runs" / f"20261201-000000-{token_name[:40]}"
    run_dir.mkdir(parents=True)
    write_status(run_dir, RunStatus(run_id=run_dir.name, preset=token_name, runner="host",
                                    state=state))  # fmt: skip
    (run_dir / "train.log").write_text("")
    return run_dir


def scheduler() -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "backend.queue.scheduler"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_a_restarted_scheduler_requeues_what_never_started_and_adopts_what_did() -> None:
    """Items left "starting" by a killed scheduler: B has no run and no launcher (killed
    between its claim and the launch) and goes back to the queue; C's run exists (its token in
    the run's preset name) and is adopted, not launched again. The queue is paused: nothing
    trains, and every item is still there after the restart."""
    assert cli("queue", "pause").returncode == 0
    preset = load_preset("tiny-cpu")
    conn = db.connect()
    with db.transaction(conn):
        a, b, c = (insert(conn, preset, ngpus=0) for _n in range(3))
    for it in (b, c):
        with db.transaction(conn):
            db.update_item(conn, it.id, state="starting", launches=1)
    run_dir = fake_run(run_name(preset.name, c.token), "finished")
    proc = scheduler()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    after = {i.id: i for i in db.items(conn)}
    assert after[a.id].state == "queued" and after[b.id].state == "queued"
    assert after[c.id].state == "finished" and after[c.id].run_id == run_dir.name
    assert "item 2: nothing was started for it; back in the queue" in out
    assert sorted(p.name for p in (home() / "runs").iterdir()) == [run_dir.name]  # none launched
    listed = json.loads(cli("queue", "--json").stdout)["items"]
    assert [(i["id"], i["state"], i["position"]) for i in listed] == [
        (a.id, "queued", 1), (b.id, "queued", 2), (c.id, "finished", None)]  # fmt: skip
    conn.close()


def test_one_scheduler_per_home_and_kill_9_frees_its_lock() -> None:
    """A CUDA item for a GPU this machine lacks waits (and keeps its scheduler up): a second
    scheduler refuses; after kill -9 of the first, a new one takes over."""
    conn = db.connect()
    with db.transaction(conn):
        insert(conn, load_preset("tiny-cpu"), ngpus=1, gpus=[63])
        conn.execute("UPDATE items SET device = 'cuda'")
    conn.close()
    first = scheduler()
    try:
        wait_until(lambda: holder() == first.pid, what="the scheduler's lock", timeout=30)
        second = scheduler()
        _out, err = second.communicate(timeout=60)
        assert second.returncode == 1 and f"pid {first.pid}" in err
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        third = scheduler()
        wait_until(lambda: holder() == third.pid, what="a new scheduler's lock", timeout=30)
        third.send_signal(signal.SIGKILL)
        third.wait(timeout=10)
    finally:
        first.kill()


def test_refusals_exit_2_with_one_line_each(tmp_path: Path) -> None:
    bad = cli("queue", "add", "tiny-cpu", "--gpus", "0")
    assert bad.returncode == 2 and "--gpus: tiny-cpu trains on the CPU" in bad.stderr
    assert cli("queue", "rm", "41").returncode == 2
    assert cli("queue", "rm", "nope").returncode == 2
    conn = db.connect()
    with db.transaction(conn):
        running = insert(conn, load_preset("tiny-cpu"), ngpus=0)
        db.update_item(conn, running.id, state="running", run_id="20261201-000000-x")
    conn.close()
    busy = cli("queue", "rm", str(running.id))
    assert busy.returncode == 2 and "trainwiz stop 20261201-000000-x" in busy.stderr


def test_a_bad_sweep_value_is_refused_before_anything_is_written() -> None:
    done = cli("sweep", "tiny-cpu", "--set", "training.learning_rate=1e-5,abc",
               "--set", "training.max_steps=2,3")  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2  # abc with each max_steps, one line each
    assert all("sweep variant learning_rate=abc max_steps=" in line for line in lines)
    assert all("training.learning_rate: must be a number" in line for line in lines)
    assert not (home() / "sweeps").exists() and not (home() / "queue").exists()
    bad_path = cli("sweep", "tiny-cpu", "--set", "learning_rate=1e-5")
    assert bad_path.returncode == 2 and "dotted preset path" in bad_path.stderr


def test_a_sweep_writes_named_variants_and_queues_them_paused() -> None:
    assert cli("queue", "pause").returncode == 0
    done = cli("sweep", "tiny-cpu", "--set", "training.learning_rate=1e-5,2e-5,5e-5",
               "--set", "training.max_steps=2,3", "--samples", "4", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    folder = Path(result["dir"])
    assert len(result["queued"]) == 4 and result["metric"] == "loss"
    names = sorted(p.name for p in folder.glob("*.yaml"))
    assert len(names) == 4 and "learning_rate-1e-5_max_steps-2.yaml" in names
    data = yaml.safe_load((folder / "learning_rate-1e-5_max_steps-2.yaml").read_text())
    assert data["training"]["learning_rate"] == 1e-5 and data["training"]["max_steps"] == 2
    again = cli("sweep", "tiny-cpu", "--set", "training.learning_rate=1e-5,2e-5,5e-5",
                "--set", "training.max_steps=2,3", "--samples", "4", "--json")  # fmt: skip
    same = [q[0] for q in json.loads(again.stdout)["queued"]]
    assert same == [q[0] for q in result["queued"]]  # the same draw: --seed 0
    shown = json.loads(cli("sweep", "show", result["id"], "--json").stdout)
    assert [v["state"] for v in shown["variants"]] == ["queued"] * 4
    assert not json.loads(cli("queue", "--json").stdout)["scheduler"]["running"]
    assert not (home() / "runs").exists()
