"""Real tiny CPU trainings that crash and resume (docs/checkpoints.md); chat, export and the
refused resume of a finished run are walked on the shipped preset's run in test_launch_host.py.

The crash is real: the test SIGKILLs the training worker (the python running the run's
train_entry.py; torchrun starts it in its own session) once a complete checkpoint exists, as the
kernel's OOM killer would. Resumed runs are compared with an uninterrupted run of the same seed; the resumed one also adds
up (its summary line's mean is over every step once, as the Trainer's and the metrics' end lines
say), its kill is not blamed on host RAM, and a second resume of it, finished, is refused.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest
import yaml

from backend.entry.checkpoints import MARKER
from backend.monitor.figures import mean_loss
from backend.monitor.metrics import RunEnd, RunStart, StepRecord, continued_series, read_events
from backend.results.offers import resume_offer
from backend.runs.resume import trainer_pids
from tests.integration.test_launch_host import (  # noqa: F401 (fixtures)
    ROOT,
    cli,
    full_speed,
    home,
    runs_json,
    wait_state,
)

pytestmark = [pytest.mark.training, pytest.mark.slow, pytest.mark.usefixtures("home")]

FINAL = ("finished", "failed", "stopped")
# CPU float32, same seed, same batches: resumed steps repeat the same arithmetic. Measured
# differences are 0; the tolerance only allows for a different summation order in a BLAS.
LOSS_TOL = 1e-5
PARAM_TOL = 1e-5


def free_port() -> int:
    """tiny-cpu's fixed rendezvous port is shared by every test run on this machine."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def preset_file(
    tmp_path: Path, name: str, report_to: str = "none", *, plain: bool = False, **launch: object
) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["name"] = name
    data["launch"].update(launch, master_port=free_port())
    if plain:  # the shipped preset as it is (but for the port)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        return path
    data["training"]["report_to"] = report_to
    data["training"].update(
        max_steps=60,
        save_strategy="steps",
        save_steps=10,
        save_total_limit=2,
        eval_split=0.05,
        eval_strategy="steps",
        eval_steps=20,
        seed=11,
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def worker_pids(run_dir: Path) -> list[int]:
    """The training workers (not torchrun itself)."""
    out = []
    for pid in trainer_pids(run_dir):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not any(b"torchrun" in a for a in argv[:2]):
            out.append(pid)
    return out


def kill_after_checkpoint(run_dir: Path, timeout: float = 180) -> int:
    """SIGKILL the worker as soon as a complete checkpoint exists; return the step it was at."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if list((run_dir / "output").glob(f"checkpoint-*/{MARKER}")):
            pids = worker_pids(run_dir)
            if pids:
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                steps = [e.step for e in read_events(run_dir / "metrics.jsonl")
                         if isinstance(e, StepRecord)]  # fmt: skip
                return steps[-1] if steps else 0
        time.sleep(0.02)
    raise AssertionError(f"no checkpoint in {run_dir} within {timeout} s")


def launch(preset: Path) -> Path:
    out = json.loads(cli("launch", str(preset), "--detach", "--json").stdout)
    return Path(out["run_dir"])


def weights(model_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


def losses(run_dir: Path) -> dict[int, float]:
    steps, _ = continued_series(read_events(run_dir / "metrics.jsonl"))
    return {s.step: s.loss for s in steps if s.loss is not None}


def test_sigkill_then_resume_matches_an_uninterrupted_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full_speed(monkeypatch)  # every run here is waited on to its end (or killed at a marker)
    whole = launch(preset_file(tmp_path, "whole"))
    assert wait_state(whole.name, FINAL)["state"] == "finished"

    broken = launch(preset_file(tmp_path, "broken"))
    killed_at = kill_after_checkpoint(broken)
    failed = wait_state(broken.name, FINAL)
    assert failed["state"] == "failed", failed
    assert killed_at < 60

    attempt_one = json.loads((broken / "attempts.json").read_text())[0]
    assert attempt_one.get("diagnosis_category") != "host_oom", attempt_one  # kill -9, RAM free

    out = cli("resume", broken.name)  # follows the log to the end
    assert_resume_adds_up(broken, out.stderr, 60)
    assert runs_json()[broken.name]["state"] == "finished"

    events = read_events(broken / "metrics.jsonl")
    starts = [e for e in events if isinstance(e, RunStart)]
    assert [s.attempt for s in starts] == [1, 2]
    resumed_from = starts[1].resumed_from
    assert resumed_from is not None and resumed_from % 10 == 0 and resumed_from <= killed_at
    steps, evals = continued_series(events)
    assert [s.step for s in steps] == list(range(1, 61))  # same final step, no gap, no repeat
    assert {s.attempt for s in steps if s.step > resumed_from} == {2}
    assert [e.step for e in evals] == [20, 40, 60]

    a, b = losses(whole), losses(broken)
    assert a.keys() == b.keys()
    loss_diff = max(abs(a[k] - b[k]) for k in a)
    wa, wb = weights(whole / "output"), weights(broken / "output")
    assert wa.keys() == wb.keys()
    param_diff = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    print(f"resumed at step {resumed_from}: max |loss diff| {loss_diff}, |param diff| {param_diff}")
    assert loss_diff <= LOSS_TOL and param_diff <= PARAM_TOL

    attempts = json.loads((broken / "attempts.json").read_text())
    assert [(x["attempt"], x["how"]) for x in attempts] == [(1, "launch"), (2, "resume")]
    assert attempts[0]["exit_code"] not in (0, None) and attempts[0]["cause"]
    assert attempts[1]["exit_code"] == 0 and attempts[1]["resumed_from"] == resumed_from
    # save_total_limit 2, rotation after the marker: the two newest, both complete
    kept = sorted(p.name for p in (broken / "output").glob("checkpoint-*"))
    assert kept == ["checkpoint-50", "checkpoint-60"]
    assert all((broken / "output" / k / MARKER).is_file() for k in kept)

    listed = {r["run_id"]: r for r in json.loads(cli("runs", "--json").stdout)}
    assert listed[broken.name]["last_checkpoint"] == 60
    assert listed[broken.name]["best_eval_loss"] == min(e.eval_loss for e in evals)
    assert "ckpt 60" in cli("runs").stdout

    again = cli("resume", broken.name, check=False)  # a finished run: the Monitor's reason
    assert again.returncode == 2
    assert again.stderr.strip().endswith(resume_offer(broken, "finished").reason)


def assert_resume_adds_up(run_dir: Path, stderr: str, total: int) -> None:
    """Resume ends as launch does: the state line, then the summary line with the mean over
    every step once. The Trainer's own end line and the metrics end line say the same mean
    (HF alone would divide the resumed attempt's sum by every step)."""
    lines = stderr.strip().splitlines()
    assert lines[-2] == f"trainwiz: run {run_dir.name} finished: finished", lines[-3:]
    steps, _evals = continued_series(read_events(run_dir / "metrics.jsonl"))
    mean = mean_loss(steps)
    assert mean is not None
    assert lines[-1].startswith(f"trainwiz: {total}/{total} steps, loss "), lines[-1]
    assert f"(mean {mean:.3g}), " in lines[-1] and " real tokens/s (attempt 2: " in lines[-1]
    assert ", wall time " in lines[-1] and ", model in " in lines[-1]
    end_lines = [ln for ln in (run_dir / "train.log").read_text().splitlines()
                 if "'train_runtime'" in ln]  # fmt: skip
    hf_end = ast.literal_eval(end_lines[-1][end_lines[-1].index("{'train_runtime'") :])
    assert hf_end["train_loss"] == pytest.approx(mean, abs=1e-3)
    ends = [e for e in read_events(run_dir / "metrics.jsonl") if isinstance(e, RunEnd)]
    assert ends[-1].train_loss == pytest.approx(mean, abs=1e-3)


def test_max_restarts_resumes_once_by_itself(tmp_path: Path) -> None:
    preset = preset_file(tmp_path, "restarts", "tensorboard", max_restarts=1)
    data = yaml.safe_load(preset.read_text())
    # Checkpoints by the clock only (save_minutes; save_strategy "no"): 0.6 s apart.
    data["training"].update(save_strategy="no", save_minutes=0.01)
    preset.write_text(yaml.safe_dump(data))
    run_dir = launch(preset)
    kill_after_checkpoint(run_dir)
    final = wait_state(run_dir.name, FINAL)
    assert final["state"] == "finished", (run_dir / "train.log").read_text()[-3000:]
    attempts = json.loads((run_dir / "attempts.json").read_text())
    assert [(x["attempt"], x["how"]) for x in attempts] == [(1, "launch"), (2, "auto")]
    assert attempts[0]["exit_code"] not in (0, None) and attempts[0]["cause"]
    assert attempts[1]["resumed_from"] and attempts[1]["exit_code"] == 0
    steps, _ = continued_series(read_events(run_dir / "metrics.jsonl"))
    assert [s.step for s in steps] == list(range(1, 61))
    assert "restart 1 of 1" in (run_dir / "train.log").read_text()
    kept = [p for p in (run_dir / "output").glob("checkpoint-*") if (p / MARKER).is_file()]
    assert len(kept) == 2  # save_total_limit, with time-based saves too
    # report_to tensorboard: the Trainer's event files, in the run dir, one folder for all attempts
    events = list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 2 and all(e.stat().st_size > 0 for e in events)
