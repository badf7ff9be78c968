"""A LoRA run end to end (docs/lora.md): `trainwiz replay tiny-cpu-lora` headless, then its exports.

One real CPU training serves every test here (module fixture): replay makes the tiny model,
trains LoRA through the entry and finishes with the adapter saved; the run's real metrics show
the method and the trainable parameters in the monitor's summary; `trainwiz export` writes the
adapter + card, and `--merge` a plain model whose logits equal base + adapter through peft.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.trainwiz_cli import cli as trainwiz

pytestmark = [pytest.mark.training, pytest.mark.slow, pytest.mark.xdist_group("lora-replay-export")]

ROOT = Path(__file__).resolve().parents[2]
STEPS = 16
# fp32 on the CPU: merging adds B·A·alpha/r into W once, peft adds x·A·B·alpha/r per call; the
# two orders of summation differ by float rounding only.
LOGIT_TOLERANCE = 1e-4


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Module-scoped: conftest's per-test TRAINWIZ_HOME is not set yet when this fixture runs,
    # so every subprocess here gets this home explicitly.
    return tmp_path_factory.mktemp("lora-home")


def cli(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return trainwiz(*args, check=check, timeout=900, env={**os.environ, "TRAINWIZ_HOME": str(home)})


@pytest.fixture(scope="module")
def lora_run(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu-lora.yaml").read_text())
    data["launch"]["master_port"] = _free_port()
    data["training"]["max_steps"] = STEPS
    preset = tmp_path_factory.mktemp("preset") / "tiny-cpu-lora-short.yaml"
    preset.write_text(yaml.safe_dump(data))
    report = json.loads(cli(home, "replay", str(preset), "--yes", "--json").stdout)
    outcomes = {s["step"]: s["outcome"] for s in report["steps"]}
    assert outcomes["launch"] == "done" and outcomes["follow"] == "done", report
    assert report["exit_code"] == 0
    return home / "runs" / report["run_id"]


def test_replay_of_tiny_cpu_lora_finishes_with_the_adapter_saved(lora_run: Path) -> None:
    status = json.loads((lora_run / "status.json").read_text())
    assert status["state"] == "finished"
    output = lora_run / "output"
    assert (output / "adapter_model.safetensors").is_file()
    assert json.loads((output / "adapter_config.json").read_text())["r"] == 16
    assert not (output / "model.safetensors").exists()
    metrics = [json.loads(x) for x in (lora_run / "metrics.jsonl").read_text().splitlines()]
    assert sum(m["kind"] == "step" for m in metrics) == STEPS


def test_monitor_summary_of_the_real_lora_run_shows_method_and_trainable(lora_run: Path) -> None:
    from backend.monitor.metrics import read_events
    from backend.monitor.tracker import RunTracker
    from widgets.throughput import render_summary

    tracker = RunTracker(source="metrics")
    tracker.update(read_events(lora_run / "metrics.jsonl"))
    summary = tracker.summary()
    start = json.loads((lora_run / "metrics.jsonl").read_text().splitlines()[0])
    pct = 100 * start["trainable_params"] / start["n_params"]
    assert summary.method == (
        f"LoRA r=16: {start['trainable_params']:,} trainable of {start['n_params']:,} ({pct:.2f} %)"
    )
    # r 16 on q/k/v/o (64x64), gate/up/down (64x176) of 2 layers and lm_head (64x512), as peft counts
    assert summary.method == "LoRA r=16: 48,640 trainable of 214,848 (22.64 %)"
    assert summary.step == STEPS and summary.finished
    assert summary.method in render_summary(summary, "finished").plain
    # real-token MFU's FLOPs: frozen weights 4 per token, adapters 6 (below the full 6N)
    embed = 512 * 64
    assert start["flops_6n"] < 6 * (start["n_params"] - embed)


def test_export_of_a_lora_run_is_the_adapter_and_a_card(lora_run: Path, home: Path) -> None:
    target = lora_run.parent.parent / "adapter-export"
    cli(home, "export", lora_run.name, "--to", str(target))
    names = {p.name for p in target.iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "README.md"} <= names
    assert "tokenizer.model" in names and "model.safetensors" not in names
    card = (target / "README.md").read_text()
    assert "LoRA r=16, alpha 32" in card and "adapter only" in card and "--merge" in card
    assert "PeftModel.from_pretrained" in card


def test_export_merge_loads_without_peft_and_equals_base_plus_adapter(
    lora_run: Path, home: Path
) -> None:
    import torch
    import transformers
    from peft import PeftModel

    target = lora_run.parent.parent / "merged-export"
    result = json.loads(
        cli(home, "export", lora_run.name, "--to", str(target), "--merge", "--json").stdout
    )
    assert "model.safetensors" in result["files"] and "tokenizer.model" in result["files"]
    base_dir = home / "models" / "tiny-llama"
    card = (target / "README.md").read_text()
    assert "LoRA r=16, alpha 32, dropout 0.0, on q_proj" in card
    assert f"merged into {base_dir}" in card

    merged = transformers.AutoModelForCausalLM.from_pretrained(target)
    assert not any("lora" in name for name, _ in merged.named_parameters())
    assert result["n_params"] == sum(p.numel() for p in merged.parameters())
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir)
    plain_logits_model = transformers.AutoModelForCausalLM.from_pretrained(base_dir)
    with_adapter = PeftModel.from_pretrained(base, str(lora_run / "output")).eval()
    ids = torch.tensor([[1, 5, 9, 42, 7, 3, 200, 11]])
    with torch.no_grad():
        got = merged(ids).logits
        want = with_adapter(ids).logits
        plain = plain_logits_model(ids).logits
    assert (got - want).abs().max().item() < LOGIT_TOLERANCE
    assert (got - plain).abs().max().item() > 100 * LOGIT_TOLERANCE  # the adapter did change it


def test_export_merge_into_an_existing_folder_writes_nothing(lora_run: Path, home: Path) -> None:
    target = lora_run.parent.parent / "taken"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    proc = cli(home, "export", lora_run.name, "--to", str(target), "--merge", check=False)
    assert proc.returncode == 2 and "not empty" in proc.stderr
    assert [p.name for p in target.iterdir()] == ["keep.txt"]
