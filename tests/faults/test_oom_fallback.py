"""A real host out-of-memory in a plain `trainwiz launch`, and the automatic OOM fallback.

The OOM is real: ``TRAINWIZ_TRAIN_AS_HEADROOM_MB`` (backend/entry/memlimit.py) lets the trainer's
address space grow by at most that much once training starts, so an 8-layer tiny-cpu Llama at
micro-batch 64 and 512-token rows fails to allocate (torch's "DefaultCPUAllocator: can't allocate
memory") while the planner's next candidate, the same batch with recompute, fits. A CPU machine
has no GPU for tune to rank by, so ``TRAINWIZ_FALLBACK_GPU=h200`` names the one the chain is for.

Measured here (2 cores, torch 2.13 CPU; VmPeak - VmSize at the first step, +~75 MiB from the
cap's point): without recompute the trainer grows by ~2,680 MiB, with recompute by ~1,085 MiB;
the test gives 1,800, some 700 MiB from either (2 layers were too close: 970 vs 650, and glibc's
arenas move the address space by tens of MiB between runs).
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest
import yaml

from backend.preset.loader import load_preset
from tests.faults.helpers import ROOT, cli, metric_lines, runs_json

pytestmark = [
    pytest.mark.training,
    pytest.mark.slow,
    pytest.mark.usefixtures("home"),
    pytest.mark.xdist_group("oom-fallback"),
]

HEADROOM_MB = "1800"
LAYERS = 8
STEPS = 1  # the next candidate only has to train past the step the first one died in


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def deep_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from backend.model.tiny import make_tiny

    target = tmp_path_factory.mktemp("deep") / "tiny-deep"
    make_tiny(target, load_preset(oom_preset(target.parent, "spec")).model.tiny)
    return target


@pytest.fixture
def squeezed(monkeypatch: pytest.MonkeyPatch, home: Path, deep_model: Path) -> None:
    shutil.copytree(deep_model, home / "models" / "tiny-deep")
    monkeypatch.setenv("TRAINWIZ_TRAIN_AS_HEADROOM_MB", HEADROOM_MB)
    monkeypatch.setenv("TRAINWIZ_FALLBACK_GPU", "h200")


def oom_preset(tmp_path: Path, name: str, **launch: object) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["name"] = name
    data["model"]["dir"] = "@home/models/tiny-deep"
    data["model"]["tiny"]["num_hidden_layers"] = LAYERS
    data["launch"].update(master_port=_port(), **launch)
    data["training"].update(
        per_device_train_batch_size=64,
        gradient_accumulation_steps=1,
        model_max_length=512,
        max_steps=STEPS,
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run_dir(stderr: str) -> Path:
    line = next(x for x in stderr.splitlines() if x.startswith("trainwiz: run ") and "(" in x)
    return Path(line.rsplit("(", 1)[1].rstrip(")"))


@pytest.mark.usefixtures("squeezed")
def test_host_oom_in_first_step_restarts_on_next_candidate(tmp_path: Path) -> None:
    proc = cli("launch", str(oom_preset(tmp_path, "tiny-oom")), timeout=600)
    run_dir = _run_dir(proc.stderr)
    log = (run_dir / "train.log").read_text(errors="replace")
    assert proc.returncode == 0, proc.stderr[-2000:] + log[-4000:]
    assert "OOM fallback: 3 smaller candidate(s) recorded" in proc.stderr
    assert "DefaultCPUAllocator: can't allocate memory" in log  # a real allocation failure
    said = "host OOM at step 1 with b64 no-recompute; restarted with b64 + recompute (candidate 2 of 4)"
    assert said in log and said in proc.stdout  # the follower printed the watcher's line

    first, second = json.loads((run_dir / "attempts.json").read_text())
    assert first["how"] == "launch" and first["diagnosis_category"] == "host_oom"
    assert second["how"] == "oom_fallback" and second["candidate"] == 2
    assert second["candidate_of"] == 4
    assert second["overrides"] == {"training.gradient_checkpointing": True}
    assert second["fallback_after"]["cause"] == "host_oom"
    assert second["fallback_after"]["attempt"] == 1 and second["exit_code"] == 0

    # The run now trains what it says: launch.json and preset.yaml are candidate 2's.
    argv = json.loads((run_dir / "launch.json").read_text())["train"]["argv"]
    assert argv[argv.index("--gradient_checkpointing") + 1] == "True"
    assert yaml.safe_load((run_dir / "preset.yaml").read_text())["training"][
        "gradient_checkpointing"
    ]
    candidates = json.loads((run_dir / "fallback.json").read_text())["candidates"]
    assert [c["number"] for c in candidates] == [1, 2, 3, 4]
    gpu = [c["predicted_gpu_gib"] for c in candidates]
    assert gpu == sorted(gpu, reverse=True) and len(set(gpu)) == 4

    # One metrics series: attempt 2 trains steps 1..STEPS and says it is attempt 2.
    lines = metric_lines(run_dir)
    steps = [m for m in lines if m["kind"] == "step"]
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    assert {s["attempt"] for s in steps} == {2}
    assert [m["attempt"] for m in lines if m["kind"] == "start"][-1] == 2

    run = runs_json()[run_dir.name]
    assert run["state"] == "finished"
    assert "on candidate 2 of 4, b64 + recompute, after an OOM fallback" in run["message"]
    assert "restarted with b64 + recompute" in run["fallback"]


@pytest.mark.usefixtures("squeezed")
def test_oom_fallback_off_fails_with_the_oom_as_cause(tmp_path: Path) -> None:
    preset = oom_preset(tmp_path, "tiny-oom-off", oom_fallback=False)
    proc = cli("launch", str(preset), timeout=600)
    run_dir = _run_dir(proc.stderr)
    assert proc.returncode != 0
    assert not (run_dir / "fallback.json").exists()
    (only,) = json.loads((run_dir / "attempts.json").read_text())
    assert only["diagnosis_category"] == "host_oom"
    run = runs_json()[run_dir.name]
    assert run["state"] == "failed" and run["cause"] == "host_oom"
    assert "fallback" not in run  # no candidates were recorded: nothing to fall back to
