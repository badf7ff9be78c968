"""LoRA/QLoRA candidates with the full fine-tune's speed tools (docs/lora.md "Tune across
methods", docs/planner.md "Methods"): packed rows, Liger, fused AdamW, selective recompute and
regional compile join the padded micro-batch x recompute grid; compile is picked on a
prediction only once a probe of the same method measured it on that GPU kind; a method that
cannot run here (QLoRA without bitsandbytes) is reported with the reason, never launched.

The 6.74B figures are one H100 80 GB's (the lead's measurement, by hand through `trainwiz
launch`: a random-weight Llama in the Vicuna-7B shape, ShareGPT-like conversations as the
planner's default lengths, LoRA r 8 on q/k/v/o): packed rows of 4096 tokens x 2 per micro-step
with Liger and fused AdamW 17,138 real tokens/s, the same with regional compile 18,048 (first
step 15.9 s), tune's padded micro-batch 4 pick 4,926 real (11,875 computed). The LoRA time
constants were fitted on these and the H200's LoRA rows (backend/planner/methods.py), so the
checks below are in-sample: they hold the fit and the search that uses it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from backend.planner.gpu import GIB, gpu_spec
from backend.planner.learned import record
from backend.planner.method_search import search_methods
from backend.planner.methods import MethodSettings, estimate_method
from backend.planner.settings import TrainSettings
from backend.planner.shape import KNOWN_CONFIGS, shape_from_config
from backend.planner.tune import tune
from backend.preset import load_preset
from backend.preset.loader import parse_preset_text

SHAPE_7B = shape_from_config(KNOWN_CONFIGS["lmsys/vicuna-7b-v1.5"])
H100 = gpu_spec("h100")
HOST = 64 * GIB
QKVO = MethodSettings("lora", lora_r=8, lora_dropout=0.05,
                      target_modules=("q_proj", "k_proj", "v_proj", "o_proj"))  # fmt: skip
MEASURED_PACKED = 17_138  # rows of 4096 x 2, Liger, fused AdamW
MEASURED_COMPILED = 18_048  # the same with regional compile
MEASURED_PADDED = 4_926  # b4, padded to 2048, FastChat's padding


def lora_preset_one_gpu() -> Any:
    preset = load_preset("vicuna-7b-lora-1x24g")  # the shipped LoRA recipe, r 8 on q/k/v/o
    assert preset.launch.nproc_per_node == 1 and preset.training.method == "lora"
    return preset


def lora_of(candidates: list[Any]) -> Any:
    return next(c for c in candidates if c.method.method == "lora")


def test_lora_candidates_carry_packing_liger_fused_adamw_and_compile() -> None:
    candidates, notes = search_methods(lora_preset_one_gpu(), H100, SHAPE_7B, host_ram=HOST,
                                       calibration=[], packed_attn="flex_attention")  # fmt: skip
    pool = [e.settings for e in lora_of(candidates).pool]
    assert any(s.packing and s.liger and s.optim == "adamw_torch_fused" for s in pool)
    assert any(s.packing and not s.liger for s in pool)  # Liger on and off, as for full
    assert any(s.compile_layers for s in pool) and any(s.checkpointing for s in pool)
    assert any(not s.packing for s in pool)  # the padded grid stays
    assert {s.attn for s in pool if s.packing} == {"flex_attention"}  # no flash_attn here
    best = lora_of(candidates).estimate.settings
    assert best.packing and not best.compile_layers  # compile not measured on an H100 yet
    assert any("regional torch.compile" in n and "not measured" in n for n in notes)
    qlora = next(c for c in candidates if c.method.method == "qlora")
    assert qlora.estimate.settings.packing  # QLoRA gets the same tools


def test_a_measured_compiled_lora_row_lets_the_prediction_pick_compile(
    _trainwiz_home: Path,
) -> None:
    preset = lora_preset_one_gpu()
    s = TrainSettings(micro_batch=2, grad_accum=2, packing=True, pack_tokens=4096, liger=True,
                      optim="adamw_torch_fused", attn="flex_attention", compile_layers=True)  # fmt: skip
    est = estimate_method(SHAPE_7B, s, QKVO, H100)
    # a full fine-tune's compiled row does not count for LoRA: its layers are PEFT's
    record(H100.name, SHAPE_7B, s, method="full", predicted_real_tokens_per_s=1.0,
           predicted_peak_gib=1.0, measured_real_tokens_per_s=1.0, measured_peak_gib=1.0,
           startup_s=1.0, lengths={})  # fmt: skip
    from backend.planner.learned import load_rows

    candidates, _ = search_methods(preset, H100, SHAPE_7B, host_ram=HOST,
                                   calibration=load_rows(H100.name))  # fmt: skip
    assert not lora_of(candidates).estimate.settings.compile_layers
    rate = est.throughput.real_tokens_per_s
    record(H100.name, SHAPE_7B, s, method="lora", predicted_real_tokens_per_s=rate,
           predicted_peak_gib=50.0, measured_real_tokens_per_s=rate, measured_peak_gib=50.0,
           startup_s=16.0, lengths={})  # fmt: skip
    candidates, _ = search_methods(preset, H100, SHAPE_7B, host_ram=HOST,
                                   calibration=load_rows(H100.name))  # fmt: skip
    assert lora_of(candidates).estimate.settings.compile_layers


def test_the_7b_lora_pick_on_an_h100_is_packed_and_predicted_near_the_measured_rate() -> None:
    """tune of the shipped LoRA preset on one H100 with 64 GiB of host RAM: packed rows (the
    measured micro-step of 8,192 tokens), predicted within 10 % of the hand-set run's 17,138
    real tokens/s (both figures: this module's docstring)."""
    result = tune(lora_preset_one_gpu(), H100, SHAPE_7B, host_ram=HOST, calibration=[],
                  packed_attn="flex_attention")  # fmt: skip
    after = result.after.settings
    assert result.preset.training.method == "lora" and after.packing and after.liger
    assert after.tokens_micro == 2 * 4096 and after.optim == "adamw_torch_fused"
    assert result.after.memory.fits and not result.after.memory.tight
    rate = result.after.throughput.real_tokens_per_s
    assert rate == pytest.approx(MEASURED_PACKED, rel=0.10), rate
    tr = result.preset.training
    assert tr.packing and tr.use_liger_kernel and tr.optim == "adamw_torch_fused"
    assert "liger-kernel" in result.preset.environment.extra_packages
    assert not tr.gradient_checkpointing  # activations fit: no recompute pass


def test_the_measured_h100_configurations_are_predicted_within_ten_percent() -> None:
    packed = TrainSettings(micro_batch=2, grad_accum=2, packing=True, pack_tokens=4096,
                           liger=True, optim="adamw_torch_fused", attn="flex_attention")  # fmt: skip
    rows = [
        (packed, MEASURED_PACKED),
        (packed.with_(compile_layers=True), MEASURED_COMPILED),
        (TrainSettings(micro_batch=4, grad_accum=2), MEASURED_PADDED),
    ]
    for s, measured in rows:
        got = estimate_method(SHAPE_7B, s, QKVO, H100).throughput.real_tokens_per_s
        assert got == pytest.approx(measured, rel=0.10), (s.label(), got)


def test_a_full_fine_tune_switched_to_lora_writes_packed_rows() -> None:
    preset = load_preset("vicuna-7b-4xa100-40g")
    preset.launch.nproc_per_node = 1
    result = tune(preset, H100, SHAPE_7B, host_ram=HOST, calibration=[])
    assert result.preset.training.method == "lora" and result.after.settings.packing
    rate = result.after.throughput.real_tokens_per_s
    assert rate == pytest.approx(MEASURED_PACKED, rel=0.10), rate


def test_lora_on_lm_head_gets_no_liger_candidate() -> None:
    preset = lora_preset_one_gpu()
    preset.training.lora.lora_target_modules = ["q_proj", "v_proj", "lm_head"]
    candidates, _ = search_methods(preset, H100, SHAPE_7B, host_ram=HOST, calibration=[])
    pool = lora_of(candidates).pool
    assert any(e.settings.packing for e in pool)
    assert not any(e.settings.liger for e in pool)  # the entry keeps Liger off there too


def test_a_cpu_preset_keeps_the_padded_lora_grid() -> None:
    root = Path(__file__).resolve().parents[2]
    preset = load_preset(root / "presets" / "tiny-cpu-lora.yaml")
    candidates, _ = search_methods(preset, gpu_spec("4090"), SHAPE_7B, calibration=[])
    assert not any(e.settings.packing for c in candidates for e in c.pool)


HOST_PRESET = """\
schema: 1
name: lora-host
model: {source: local, dir: /data/m7b}
launch: {runner: host, entry: trainwiz, device: cuda, nproc_per_node: 1}
training:
  data_path: /data/d.json
  output_dir: "@run/output"
  bf16: true
  per_device_train_batch_size: 1
  gradient_accumulation_steps: 16
  learning_rate: 2.0e-4
  model_max_length: 2048
  gradient_checkpointing: true
  method: lora
  lora: {lora_r: 8, lora_alpha: 16, lora_dropout: 0.05, lora_target_modules: [q_proj, k_proj, v_proj, o_proj]}
"""


@pytest.mark.skipif(
    importlib.util.find_spec("bitsandbytes") is not None, reason="bitsandbytes installed here"
)
def test_tune_json_keeps_qlora_with_why_it_was_not_probed(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`trainwiz tune --probe --json` on a host-runner LoRA preset where the training Python
    has no bitsandbytes: the LoRA configurations are measured (a named fake launcher stands
    in for the GPU), QLoRA is a skipped row saying why, and no QLoRA run is launched."""
    import backend.runs.probe as probe_module
    from tests.backend.test_tune_probe import FakeLauncher
    from tui.cli import main

    fake = FakeLauncher(tmp_path / "runs", ["ok 17000 50", "ok 16500 48"])
    monkeypatch.setattr(probe_module, "launch_run", fake.launch)
    monkeypatch.setattr(probe_module, "refresh_run", fake.refresh)
    monkeypatch.setattr(probe_module, "stop_candidate", fake.stop_run)
    source = tmp_path / "lora-host.yaml"
    source.write_text(HOST_PRESET)
    assert parse_preset_text(HOST_PRESET).launch.runner == "host"
    config = tmp_path / "config.json"
    config.write_text(json.dumps(KNOWN_CONFIGS["lmsys/vicuna-7b-v1.5"]))
    code = main(["tune", str(source), "--gpu", "h100", "--config", str(config), "--host-ram",
                 "64", "--probe", "--top", "2", "--steps", "4", "--write",
                 str(tmp_path / "tuned.yaml"), "--json"])  # fmt: skip
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    rows = report["probe"]
    skipped = [r for r in rows if r["source"] == "skipped"]
    assert [r["label"].split()[0] for r in skipped] == ["qlora"]
    assert "bitsandbytes" in skipped[0]["skipped"] and not skipped[0]["run_id"]
    measured = [r for r in rows if r["source"] == "measured"]
    assert len(measured) == 2 and all(r["label"].startswith("lora r8") for r in measured)
    assert all("packed" in r["label"] for r in measured)
    assert len(fake.launched) == 2
    assert all(p.training.method == "lora" for p in fake.launched)
    assert report["winner"] == measured[0]["label"]


def test_a_qlora_preset_probes_qlora_first() -> None:
    """tune keeps a QLoRA preset's method wherever it fits, so its probe measures QLoRA first,
    not the LoRA configurations predicted faster; a LoRA preset still probes LoRA first."""
    from backend.planner.method_search import probe_order

    qlora = lora_preset_one_gpu().model_copy(deep=True)
    qlora.training.method = "qlora"
    for preset, first in ((qlora, "qlora"), (lora_preset_one_gpu(), "lora")):
        candidates, _notes = search_methods(preset, H100, SHAPE_7B, host_ram=HOST,
                                            calibration=[], packed_attn="flex_attention")  # fmt: skip
        order = probe_order(preset, candidates)
        assert order[0].method.method == first
        rates = [c.estimate.throughput.real_tokens_per_s for c in order]
        assert max(rates) > rates[0] if first == "qlora" else True  # LoRA ranks above QLoRA
