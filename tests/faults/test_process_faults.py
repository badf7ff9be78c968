"""Kill or freeze each process of a real tiny CPU training; the run must end whole and say why.

After every fault no process of the run may remain (found from /proc by the run dir, not from
trainwiz's own records) and ``trainwiz runs`` must give the true state and cause.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from backend.runs.procs import pid_alive
from tests.faults.helpers import (
    assert_nothing_left,
    cli,
    holders,
    kill,
    launch_detached,
    metrics_count,
    processes_of,
    role_pid,
    run_seen,
    runs_json,
    short_preset,
    wait_final,
    wait_steps,
)
from tests.waiting import wait_until

pytestmark = [pytest.mark.training, pytest.mark.slow]

LONG = 5000  # steps: the run never ends on its own within a test


def _assert_metrics_frozen(run_dir: Path) -> None:
    """Nothing can write metrics.jsonl any more: no process holds it open, and it did not grow
    while the last holder went away. The callers have already seen every process of the run
    gone; this also catches a writer the run-dir scan would miss (one that writes seldom would
    slip through any fixed watch, an open handle does not)."""
    before = metrics_count(run_dir)
    metrics = run_dir / "metrics.jsonl"
    wait_until(
        lambda: not holders(metrics),
        what=f"no process holding {metrics} open",
        timeout=20,
        seen=lambda: holders(metrics),
        interval=0.1,
    )
    assert metrics_count(run_dir) == before, "metrics.jsonl still grows after the run ended"


def test_sigkill_of_torchrun_takes_its_trainers_down(home: Path, tmp_path: Path) -> None:
    run_dir = launch_detached(short_preset(tmp_path, LONG))
    wait_steps(run_dir, 2)
    trainer = role_pid(run_dir, "trainer")
    kill(role_pid(run_dir, "torchrun"))
    final = wait_final(run_dir, 60)
    assert final["state"] == "failed"
    assert "killed by signal SIGKILL" in final["message"]
    assert final["cause"] == "signal"
    assert_nothing_left(run_dir)
    assert trainer not in processes_of(run_dir)
    _assert_metrics_frozen(run_dir)
    assert "left 1 process(es) running: ended them" in (run_dir / "train.log").read_text()


def test_sigkill_of_the_trainer_is_named_in_the_record(home: Path, tmp_path: Path) -> None:
    run_dir = launch_detached(short_preset(tmp_path, LONG))
    wait_steps(run_dir, 2)
    trainer = role_pid(run_dir, "trainer")
    kill(trainer)
    final = wait_final(run_dir, 90)
    assert final["state"] == "failed"
    assert f"trainer pid {trainer} killed by signal SIGKILL" in final["message"]
    assert_nothing_left(run_dir)


def test_sigkill_of_the_watcher_then_stop_ends_everything(home: Path, tmp_path: Path) -> None:
    run_dir = launch_detached(short_preset(tmp_path, LONG))
    wait_steps(run_dir, 2)
    watcher = role_pid(run_dir, "watcher")
    kill(watcher)
    wait_until(  # SIGKILL lands asynchronously: `runs` must look at a watcher really gone
        lambda: not pid_alive(watcher),
        what=f"the SIGKILLed watcher pid {watcher} gone (or a zombie)",
        timeout=20,
        seen=lambda: run_seen(run_dir),
    )
    run = runs_json()[run_dir.name]
    assert run["state"] == "running"  # training goes on without its watcher: true
    assert "watcher died" in run["message"]
    out = cli("stop", run_dir.name, "--timeout", "10")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "none of the run is left" in out.stdout
    assert runs_json()[run_dir.name]["state"] == "stopped"
    assert_nothing_left(run_dir, timeout=2)


def test_sigstop_of_the_trainer_then_stop_ends_it(home: Path, tmp_path: Path) -> None:
    run_dir = launch_detached(short_preset(tmp_path, LONG))
    wait_steps(run_dir, 2)
    trainer = role_pid(run_dir, "trainer")
    kill(trainer, signal.SIGSTOP)
    started = time.monotonic()
    out = cli("stop", run_dir.name, "--timeout", "3", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    stopped = json.loads(out.stdout)
    assert stopped["state"] == "stopped"
    assert stopped["left_processes"] == []
    assert stopped["ended_processes"] >= 2  # torchrun and the trainer at least
    assert time.monotonic() - started < 60
    assert_nothing_left(run_dir, timeout=2)  # verified by stop, so nothing may linger
    _assert_metrics_frozen(run_dir)


def test_two_launches_of_one_preset_at_once_both_run(home: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.faults.helpers import ROOT

    preset = short_preset(tmp_path, 3)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tui.cli", "launch", str(preset), "--detach", "--json"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    run_dirs = [Path(json.loads(o[0])["run_dir"]) for o in outs]
    finals = [wait_final(d, 240) for d in run_dirs]
    assert [f["state"] for f in finals] == ["finished", "finished"], [
        (d / "train.log").read_text()[-2000:] for d in run_dirs
    ]
    ports = [f["master_port"] for f in finals]
    assert None not in ports and ports[0] != ports[1]
    for d in run_dirs:
        assert_nothing_left(d)


def test_busy_master_port_is_replaced_said_and_recorded(home: Path, tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        preset = short_preset(tmp_path, 2)
        text = preset.read_text().replace("master_port: 29511", f"master_port: {port}")
        preset.write_text(text)
        out = cli("launch", str(preset), "--detach")
        assert out.returncode == 0, out.stderr
        assert f"launch.master_port {port} is in use here: using" in out.stderr
        run_dir = home / "runs" / out.stdout.strip()
        final = wait_final(run_dir, 120)
    assert final["state"] == "finished", (run_dir / "train.log").read_text()[-2000:]
    assert final["master_port"] not in (None, port)
    spec = json.loads((run_dir / "launch.json").read_text())
    assert f"--master_port={final['master_port']}" in spec["train"]["argv"]
    assert_nothing_left(run_dir)


def _poison_final_norm(model_dir: Path) -> None:
    """Weights gone NaN, as a diverged checkpoint's are: every logit, so the loss, is NaN.

    (The schema bounds learning_rate, so a preset alone can no longer make a run diverge.)
    """
    import torch
    from safetensors.torch import load_file, save_file

    for shard in model_dir.glob("*.safetensors"):
        tensors = load_file(shard)
        if "model.norm.weight" in tensors:
            tensors["model.norm.weight"] = torch.full_like(
                tensors["model.norm.weight"], float("nan")
            )
            save_file(tensors, shard, metadata={"format": "pt"})
            return
    raise AssertionError(f"no model.norm.weight in {model_dir}")


def test_non_finite_loss_stops_the_run_with_its_cause(home: Path, tmp_path: Path) -> None:
    _poison_final_norm(home / "models" / "tiny-llama")
    run_dir = launch_detached(short_preset(tmp_path, 200))
    final = wait_final(run_dir, 180)
    log = (run_dir / "train.log").read_text()
    assert final["state"] == "failed", log[-2000:]
    assert final["cause"] == "loss_nan"
    assert "non-finite loss" in final["message"]
    assert "[trainwiz-entry] non-finite loss at step" in log
    from tests.faults.helpers import metric_lines

    lines = metric_lines(run_dir)  # strict JSON: a bare NaN fails here
    steps = [m for m in lines if m["kind"] == "step"]
    assert len(steps) < 200
    assert lines[-1]["kind"] == "end" and lines[-1]["reason"] == "loss_nan"
    assert_nothing_left(run_dir)
    diag = cli("diagnose", run_dir.name)
    assert "Traceback" not in diag.stderr
