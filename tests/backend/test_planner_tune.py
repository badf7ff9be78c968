"""tune(), derived training values and `trainwiz plan --tune`, on real presets and files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.planner import count_records, derive, gpu_spec, shape_from_config, tune
from backend.planner.settings import settings_from_preset
from backend.preset.loader import load_preset, parse_preset_text, preset_to_yaml

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
SHAPE = shape_from_config(
    json.loads((FIXTURES / "planner" / "llama-1.35b-config.json").read_text())
)
ROWS = [
    json.loads(line)
    for line in (FIXTURES / "h200" / "fastchat-1b-throughput.jsonl").read_text().splitlines()
]


def seed_on(nproc: int):
    """The seed's training settings (offload, batch 1, grad ckpt) on ``nproc`` H200s."""
    preset = load_preset("vicuna-13b-v1.3-8xa100").model_copy(deep=True)
    preset.launch.nproc_per_node = nproc
    preset.environment.transformers = "4.57.6"
    return preset


@pytest.mark.parametrize("nproc", [1, 2])
def test_tune_beats_every_measured_h200_configuration(nproc: int) -> None:
    result = tune(seed_on(nproc), gpu_spec("h200"), SHAPE, free_batch=True, max_micro_batch=8)
    best_measured = max(r["tokens_per_s"] for r in ROWS if r["world"] == nproc)
    after = result.after
    assert after.memory.fits
    assert not after.settings.offload
    assert after.throughput.tokens_per_s >= 0.95 * best_measured
    paths = {c.path for c in result.changes}
    assert "training.fsdp" in paths and "training.per_device_train_batch_size" in paths
    assert all(c.reason for c in result.changes)
    assert "offload" not in result.preset.training.fsdp
    # The tuned preset is a valid preset that loads back.
    assert parse_preset_text(preset_to_yaml(result.preset)).training == result.preset.training


def test_tune_keeps_the_global_batch_by_default() -> None:
    preset = seed_on(2)
    preset.training.gradient_accumulation_steps = 8
    result = tune(preset, gpu_spec("h200"), SHAPE)
    before, after = result.before.settings, result.after.settings
    assert after.global_batch == before.global_batch == 16
    assert after.micro_batch > 1
    assert after.micro_batch * after.grad_accum == 8


def test_tune_uses_fsdp_checkpointing_when_recompute_is_needed() -> None:
    # A 13B on 8 x A100-40G only fits with recompute: FSDP's, which avoids the extra all-gather.
    preset = load_preset("vicuna-13b-v1.3-8xa100").model_copy(deep=True)
    preset.environment.transformers = "4.57.6"
    shape = shape_from_config(
        {"hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 40,
         "intermediate_size": 13824, "vocab_size": 32000}
    )  # fmt: skip
    result = tune(preset, gpu_spec("a100-40g"), shape)
    assert result.after.memory.fits
    assert result.after.settings.fsdp_ac and not result.after.settings.trainer_gc
    assert result.preset.training.fsdp_config == {"activation_checkpointing": True}
    assert result.preset.training.gradient_checkpointing is False
    reasons = {c.path: c.reason for c in result.changes}
    assert "all-gather" in reasons["training.fsdp_config.activation_checkpointing"]


def test_tune_reports_when_nothing_fits() -> None:
    preset = seed_on(1)
    shape = shape_from_config(
        {"hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64,
         "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 32000}
    )  # fmt: skip
    result = tune(preset, gpu_spec("a100-40g"), shape)
    assert not result.after.memory.fits
    assert any("no configuration fits" in n for n in result.notes)


def test_count_records_json_and_jsonl(tmp_path: Path) -> None:
    conv = {"id": "x", "conversations": [{"from": "human", "value": "hi"}]}
    data = tmp_path / "train.json"
    data.write_text(json.dumps([conv] * 37))
    assert count_records(data)[0] == 37
    lines = tmp_path / "train.jsonl"
    lines.write_text("\n".join(json.dumps(conv) for _ in range(5)) + "\n")
    assert count_records(lines)[0] == 5
    missing, note = count_records(tmp_path / "nope.json")
    assert missing is None and "not readable" in note
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert count_records(bad)[0] is None


def test_derived_values_follow_hf_trainer_arithmetic() -> None:
    preset = load_preset("vicuna-7b-4xa100-40g")
    tr = preset.training  # batch 2, accumulation 16, 3 epochs, warmup 0.03, 4 GPUs
    d = derive(tr, world=4, records=1000)
    assert d.global_batch == 128
    assert d.tokens_per_step == 128 * 2048
    # 250 samples per rank -> 125 micro-batches -> 7 optimizer steps per epoch.
    assert d.steps_per_epoch == 7
    assert d.total_steps == 21
    assert d.warmup_steps == 1  # ceil(0.03 * 21)
    assert derive(tr, world=4, records=None).total_steps is None


def test_settings_read_fsdp_config_checkpointing() -> None:
    preset = load_preset("vicuna-7b-4xa100-40g").model_copy(deep=True)
    preset.training.fsdp_config = {"activation_checkpointing": True}
    s = settings_from_preset(preset)
    assert s.fsdp_ac and s.checkpointing and s.shard_n == 4 and s.strategy == "full_shard"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args], cwd=ROOT, capture_output=True, text=True
    )


def test_cli_plan_shows_estimate_and_tune_diff() -> None:
    proc = _cli("plan", "vicuna-13b-v1.3-8xa100", "--gpu", "a100", "--tune")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "# memory per GPU" in out and "FITS" in out
    assert "# -  fsdp: full_shard auto_wrap offload" in out
    assert "# +  fsdp: full_shard auto_wrap" in out
    proc = _cli("plan", "vicuna-13b-v1.3-8xa100", "--gpu", "a100", "--tune", "--json")
    data = json.loads(proc.stdout)
    assert data["estimate"]["memory"]["fits"] is True
    tuned = yaml.safe_load(data["tune"]["preset_yaml"])
    assert tuned["training"]["fsdp"] == "full_shard auto_wrap"
    assert (
        data["tune"]["after"]["throughput"]["tokens_per_s"]
        > 10 * (data["estimate"]["throughput"]["tokens_per_s"])
    )


def test_cli_plan_bad_gpu_and_missing_shape(tmp_path: Path) -> None:
    proc = _cli("plan", "vicuna-7b-4xa100-40g", "--gpu", "voodoo")
    assert proc.returncode == 2 and "unknown model" in proc.stderr
    preset = yaml.safe_load((ROOT / "presets" / "vicuna-7b-4xa100-40g.yaml").read_text())
    preset["model"]["repo"] = "someone/unknown-model"
    preset["model"]["dir"] = str(tmp_path / "empty")
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(preset))
    proc = _cli("plan", str(path), "--gpu", "h200")
    assert proc.returncode == 0
    assert "--config" in proc.stdout
    config = tmp_path / "config.json"
    config.write_text((FIXTURES / "planner" / "llama-1.35b-config.json").read_text())
    proc = _cli("plan", str(path), "--gpu", "h200", "--config", str(config), "--json")
    assert json.loads(proc.stdout)["estimate"]["model"]["n_params"] == 1_345_423_360


def test_shape_for_preset_reads_the_model_dir_under_trainwiz_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backend.planner import shape_for_preset

    monkeypatch.setenv("TRAINWIZ_HOME", str(tmp_path))
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    (model / "config.json").write_text(
        (FIXTURES / "planner" / "llama-1.35b-config.json").read_text()
    )
    preset = load_preset("vicuna-7b-4xa100-40g").model_copy(deep=True)
    preset.model.dir = "@home/models/m"
    preset.model.repo = "someone/unlisted"
    shape = shape_for_preset(preset)
    assert shape is not None and shape.n_params == 1_345_423_360
    assert shape.source == str(model / "config.json")
