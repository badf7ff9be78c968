"""LoRA on the tiny CPU Llama through `trainwiz launch` and the entry; then a merge (docs/lora.md).

The run trains only the adapters (FastChat's train_lora semantics in ``backend/entry/lora.py``),
saves ``adapter_model.safetensors`` + ``adapter_config.json`` instead of the full model, and
``backend/entry/merge_lora.py`` (run as a subprocess, as ``trainwiz export --merge`` does) folds
them into a model that loads with AutoModelForCausalLM and answers differently from the base.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.entry import ENTRY_DIR
from tests.integration.test_launch_host import full_speed, wait_state
from tests.trainwiz_cli import cli

pytestmark = [pytest.mark.training, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
STEPS = 60


def wait_final(run_id: str, timeout: float = 400) -> dict:
    """The run's record once it has ended: ``test_launch_host.wait_state``, which says on
    time-out what it waited for and what it saw (the record, the end of train.log)."""
    return wait_state(run_id, ("finished", "failed", "stopped"), timeout)


def test_lora_run_saves_an_adapter_that_merges(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full_speed(monkeypatch)  # the test waits for the run's end only
    home = Path(os.environ["TRAINWIZ_HOME"])  # the tiny model is in it (tests/conftest.py)
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu-lora.yaml").read_text())
    data["training"]["max_steps"] = STEPS
    preset = tmp_path / "tiny-lora-short.yaml"
    preset.write_text(yaml.safe_dump(data))

    started = json.loads(cli("launch", str(preset), "--detach", "--json").stdout)
    run_id, run_dir = started["run_id"], Path(started["run_dir"])
    final = wait_final(run_id)
    assert final["state"] == "finished", (run_dir / "train.log").read_text()[-3000:]

    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [m["loss"] for m in lines if m["kind"] == "step"]
    assert len(losses) == STEPS
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5
    assert lines[-1]["kind"] == "end" and lines[-1]["ok"] is True
    # the whole model has ~0.2 M parameters; LoRA r=16 on all 7 projections of 2 layers adds
    # 2*16*(4*(64+64) + 3*(64+176)) = 39 k, the only trainable ones
    assert "trainable of" in (run_dir / "train.log").read_text()
    start = lines[0]
    assert start["kind"] == "start" and start["method"] == "lora" and start["lora_r"] == 16
    assert 0 < start["trainable_params"] < start["n_params"] / 2
    attention = 12 * 2 * 64 * 256  # 12·L·h·s of the tiny Llama at seq 256
    # frozen weights do no weight-gradient matmuls: below the full fine-tune's 6·N + attention
    assert attention < start["flops_per_token"] < 6 * start["n_params"] + attention

    output = run_dir / "output"
    assert (output / "adapter_model.safetensors").is_file()
    adapter_config = json.loads((output / "adapter_config.json").read_text())
    assert adapter_config["r"] == 16 and adapter_config["lora_alpha"] == 32
    assert set(adapter_config["target_modules"]) == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "lm_head",
    }
    assert not (output / "model.safetensors").exists()  # the adapter, not the full model

    merged = tmp_path / "merged"
    proc = subprocess.run(
        [
            sys.executable,
            str(ENTRY_DIR / "merge_lora.py"),
            "--base",
            str(home / "models" / "tiny-llama"),
            "--adapter",
            str(output),
            "--out",
            str(merged),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["ok"] is True

    import torch
    import transformers

    base = transformers.AutoModelForCausalLM.from_pretrained(home / "models" / "tiny-llama")
    model = transformers.AutoModelForCausalLM.from_pretrained(merged)
    assert not any("lora" in name for name, _ in model.named_parameters())
    ids = torch.tensor([[1, 5, 9, 42, 7, 3]])
    with torch.no_grad():
        delta = (model(ids).logits - base(ids).logits).abs().max().item()
    assert delta > 1e-3
    assert (merged / "tokenizer.model").is_file()


def test_zero_launch_writes_the_deepspeed_config_the_entry_is_given(
    tiny_model: Path, tmp_path: Path
) -> None:
    home = Path(os.environ["TRAINWIZ_HOME"])  # the tiny model is in it (tests/conftest.py)
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu-lora.yaml").read_text())
    data["training"]["max_steps"] = 2
    data["training"]["zero"] = {"stage": 2}
    preset = tmp_path / "tiny-zero.yaml"
    preset.write_text(yaml.safe_dump(data))
    # ZeRO needs CUDA: on a CPU preset the launch is refused up front, nothing written.
    refused = subprocess.run(
        [sys.executable, "-m", "tui.cli", "launch", str(preset), "--detach", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2 and "training.zero" in refused.stderr, refused.stderr
    assert not (home / "runs").exists() or not list((home / "runs").iterdir())
    # On CUDA the plan gives the entry the run's deepspeed.json (written by the launch).
    data["launch"]["device"] = "cuda"
    preset.write_text(yaml.safe_dump(data))
    shown = cli("plan", str(preset), "--json")
    train = next(s for s in json.loads(shown.stdout)["steps"] if s["id"] == "train")
    i = train["argv"].index("--deepspeed")
    assert train["argv"][i + 1].endswith("deepspeed.json")
