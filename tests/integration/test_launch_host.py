"""Real tiny trainings on the CPU through the host runner, driven through the `trainwiz` CLI.

The tiny Llama is made once per session by the model code (``make_tiny``) and copied into each
test's TRAINWIZ_HOME where the shipped ``tiny-cpu`` preset looks for it.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.monitor.metrics import MetricsFollower, StepRecord
from backend.paths import runs_dir
from backend.runs.control import refresh
from tests.faults.helpers import log_tail, run_seen
from tests.trainwiz_cli import cli, runs_records
from tests.waiting import wait_until

pytestmark = [pytest.mark.training, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def home() -> Path:
    """This test's TRAINWIZ_HOME, the tiny model in it already (tests/conftest.py)."""
    return Path(os.environ["TRAINWIZ_HOME"])


def runs_json() -> dict[str, dict]:
    return runs_records()


def _seen(run_dir: Path, record: dict | None = None) -> dict:
    """What a wait on a run saw when it gave up: its state (the record ``runs`` printed, else
    status.json as written) and the end of its train.log."""
    if record is None:
        return run_seen(run_dir)
    keys = ("state", "message", "cause", "exit_code")
    return {**{k: record.get(k) for k in keys}, "train.log": log_tail(run_dir)}


def wait_state(run_id: str, states: tuple[str, ...], timeout: float = 300) -> dict:
    """The run's record from ``trainwiz runs --json`` once its state is one of ``states``: the
    wait reads the state in-process through the backend call `runs` makes (a CLI process per
    poll would take ~0.5 s of CPU from the training), then `runs --json` gives the record."""
    run_dir = runs_dir() / run_id
    last: dict[str, object] = {}

    def reached() -> bool:
        last["state"] = refresh(run_dir).state
        return last["state"] in states

    wait_until(
        reached,
        what=f"run {run_id} in state {'/'.join(states)}",
        timeout=timeout,
        seen=lambda: _seen(run_dir, {"state": last.get("state")}),
        interval=0.2,
    )
    record = runs_json()[run_id]
    assert record["state"] in states, record
    return record


def metric_lines(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def wait_steps(run_dir: Path, n: int, timeout: float = 180) -> None:
    """Until the run has logged ``n`` metric steps (a line mid-write is read again next time)."""
    wait_until(
        lambda: sum(1 for m in metric_lines(run_dir) if m["kind"] == "step") >= n,
        what=f"{n} metric steps in {run_dir}",
        timeout=timeout,
        seen=lambda: _seen(run_dir),
        interval=0.1,
    )


def full_speed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs this test launches train without the suite's pause between steps (tests/conftest.py):
    the test only waits for them to end, and 130 paused steps of a 150-step run held a worker
    idle for 32 s."""
    monkeypatch.setenv("TRAINWIZ_STEP_PAUSE_S", "0")


def short_preset(tmp_path: Path, max_steps: int) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["training"]["max_steps"] = max_steps
    path = tmp_path / "tiny-short.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def assert_every_step(lines: list[dict]) -> list[dict]:
    steps = [m for m in lines if m["kind"] == "step"]
    assert lines[0]["kind"] == "start" and lines[-1]["kind"] == "end"
    assert [s["step"] for s in steps] == list(range(1, steps[0]["max_steps"] + 1))
    return steps


def test_tiny_cpu_detached_end_to_end_then_chat_export_and_no_resume(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded default as a user runs it, then what a user does with the finished run:
    chat, export, a model card that names the data, and a resume that is refused (one run for
    the whole walk: each of these once trained the same 150 steps again)."""
    full_speed(monkeypatch)
    out = cli("launch", "tiny-cpu", "--detach", "--json")
    started = json.loads(out.stdout)
    run_id, run_dir = started["run_id"], Path(started["run_dir"])
    assert run_dir.parent == home / "runs"
    assert runs_json()[run_id]["state"] in ("starting", "running")
    wait_steps(run_dir, 1)
    assert runs_json()[run_id]["state"] == "running"
    final = wait_state(run_id, ("finished", "failed", "stopped"))
    assert final["state"] == "finished", (run_dir / "train.log").read_text()[-3000:]
    assert final["exit_code"] == 0
    lines = metric_lines(run_dir)
    steps = assert_every_step(lines)
    assert len(steps) == 150  # 200 conversations / batch 4 x 3 epochs
    losses = [s["loss"] for s in steps]
    assert all(isinstance(x, float) for x in losses)
    assert sum(losses[-10:]) / 10 < sum(losses[:10]) / 10 - 1.0
    assert all(s["tokens"] == 4 * 256 and 0 < s["tokens_nonpad"] <= s["tokens"] for s in steps)
    assert lines[0]["attn_implementation"] == "sdpa" and lines[0]["world_size"] == 1
    # The real-token ETA's total is exact for whole epochs: every conversation, 3 times.
    assert lines[0]["real_tokens_source"] == "counted" and lines[0]["steps_per_epoch"] == 50
    assert lines[0]["real_tokens_total"] == 3 * lines[0]["real_tokens_per_epoch"]
    assert sum(s["tokens_nonpad"] for s in steps) == lines[0]["real_tokens_total"]
    assert lines[-1]["ok"] is True
    assert (run_dir / "output" / "model.safetensors").is_file()
    assert (run_dir / "output" / "tokenizer.model").is_file()
    for name in ("preset.yaml", "plan.json", "status.json", "train.log", "entry/train_entry.py"):
        assert (run_dir / name).is_file(), name
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["steps"][-1]["id"] == "train"
    assert "@" not in (run_dir / "preset.yaml").read_text().split("training:")[1]
    assert "model saved" in cli("logs", run_id).stdout
    chat_export_then_refused_resume(run_dir, tmp_path)


def chat_export_then_refused_resume(run_dir: Path, tmp_path: Path) -> None:
    """Chat with and export a finished run of the shipped tiny-cpu (150 steps, no checkpoint)."""
    chat = json.loads(cli("chat", run_dir.name, "--prompt", "What is 2+2?", "--json").stdout)
    assert chat["device"] == "cpu"
    assert chat["turns"][0]["reply"].strip()

    target = tmp_path / "exported"
    cli("export", run_dir.name, "--to", str(target))
    names = {p.name for p in target.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.model", "README.md"} <= names
    card = (target / "README.md").read_text()
    data = ROOT / "presets" / "data" / "sample_conversations.json"
    assert hashlib.sha256(data.read_bytes()).hexdigest() in card
    assert f"{data.stat().st_size} bytes" in card and "| steps | 150 of 150 |" in card
    load = (
        "import sys, transformers; "
        "m = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1]); "
        "t = transformers.AutoTokenizer.from_pretrained(sys.argv[1], use_fast=False); "
        "print(type(m).__name__, sum(p.numel() for p in m.parameters()), len(t))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", load, str(target)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "LlamaForCausalLM"

    again = cli("export", run_dir.name, "--to", str(target), check=False)
    assert again.returncode == 2 and "not empty" in again.stderr
    missing = cli("chat", run_dir.name, "--checkpoint", "7", "--prompt", "x", check=False)
    assert missing.returncode == 2 and "checkpoint-7" in missing.stderr

    # save_strategy "no": nothing to resume from. A finished run is refused first as finished
    # (the Monitor's reason); a failed one without a checkpoint for the lack of one
    # (test_results_add_up, test_resume_records). Nothing of the run changes.
    before = (run_dir / "status.json").read_text()
    refused = cli("resume", run_dir.name, check=False)
    assert refused.returncode == 2
    assert "the run finished: nothing to resume" in refused.stderr
    assert (run_dir / "status.json").read_text() == before


def test_sigkill_of_the_launcher_leaves_training_running(home: Path, tmp_path: Path) -> None:
    preset = short_preset(tmp_path, 60)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tui.cli", "launch", str(preset)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_until(
        lambda: list((home / "runs").glob("*/metrics.jsonl")),
        what=f"the launched run's metrics.jsonl under {home / 'runs'}",
        timeout=60,
        seen=lambda: {
            "launcher exit": launcher.poll(),
            "runs": sorted(str(p) for p in (home / "runs").glob("*/*")),
        },
        interval=0.1,
    )
    (run_dir,) = (home / "runs").iterdir()
    wait_steps(run_dir, 3)
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=10)
    assert launcher.returncode == -signal.SIGKILL
    assert runs_json()[run_dir.name]["state"] == "running"
    final = wait_state(run_dir.name, ("finished", "failed", "stopped"))
    assert final["state"] == "finished" and final["exit_code"] == 0
    steps = assert_every_step(metric_lines(run_dir))
    assert len(steps) == 60
    # What the monitor reads when attached afterwards: every step from the first.
    events = MetricsFollower(run_dir / "metrics.jsonl").poll()
    seen = [e.step for e in events if isinstance(e, StepRecord)]
    assert seen == list(range(1, 61))


def test_stop_ends_a_run_and_records_it(home: Path, tmp_path: Path) -> None:
    preset = short_preset(tmp_path, 5000)
    run_id = cli("launch", str(preset), "--detach").stdout.strip()
    run_dir = home / "runs" / run_id
    wait_steps(run_dir, 2)
    status = json.loads((run_dir / "status.json").read_text())
    out = cli("stop", run_id, "--timeout", "20", "--json")
    stopped = json.loads(out.stdout)
    assert stopped["state"] == "stopped"
    assert runs_json()[run_id]["state"] == "stopped"
    with pytest.raises(ProcessLookupError):
        os.kill(status["pid"], 0)
    steps = [m for m in metric_lines(run_dir) if m["kind"] == "step"]
    assert 2 <= len(steps) < 5000
