"""Regional torch.compile of the decoder layers and selective recompute, from the preset to
tune's candidates: the fields are validated and passed to the entry as written, the planner
prices them, tune proposes compile within the compile budget (dropped with the reason past
it) and selective recompute only where the same rows without recompute do not fit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backend.errors import BadInput
from backend.plan.hf_flags import training_flags
from backend.planner import gpu_spec
from backend.planner.gpu import GIB
from backend.planner.learned import weight
from backend.planner.memory import plan_memory
from backend.planner.perfrows import row_shape
from backend.planner.realdata import dist_from_report
from backend.planner.rowsearch import packed_candidates, recompute_options
from backend.planner.settings import TrainSettings, settings_from_preset
from backend.planner.throughput import predict_throughput
from backend.planner.tune import tune
from backend.preset.loader import parse_preset_text, preset_to_yaml

ROOT = Path(__file__).resolve().parents[2]
PERF = ROOT / "tests" / "fixtures" / "perf"
DIST = dist_from_report(PERF / "lengths-sharegpt-1500.json")
H200 = gpu_spec("h200")
BASE = (PERF / "3b-base.yaml").read_text()


def _preset(extra: str = "", base: str = BASE) -> Any:
    return parse_preset_text(base + extra, "p.yaml")


def _error(extra: str, base: str = BASE) -> str:
    with pytest.raises(BadInput) as info:  # the loader's one line: file:line:col, field, fix
        _preset(extra, base)
    return str(info.value)


# ---------------------------------------------------------------- preset fields


def test_layer_fields_render_as_the_entry_reads_them() -> None:
    p = _preset("  compile_layers: true\n").model_copy(deep=True)
    p.training.gradient_checkpointing = False
    p.training.recompute_layers = 8
    argv = training_flags(p.training, model_path="/m", target_transformers="4.57.6",
                          trainwiz_entry=True)  # fmt: skip
    assert argv[argv.index("--compile_layers") + 1] == "True"
    assert argv[argv.index("--recompute_layers") + 1] == "8"
    s = settings_from_preset(p)
    assert s.compile_layers and s.recompute_layers == 8 and s.checkpointing
    assert "rc8" in s.label() and "compile-layers" in s.label()


def test_contradictions_and_bad_values_name_the_field() -> None:
    assert "compile_layers and training.torch_compile" in _error(
        "  compile_layers: true\n  torch_compile: true\n"
    )
    # the base has gradient_checkpointing: true, which recomputes every layer already
    assert "recompute_layers and training.gradient_checkpointing" in _error(
        "  recompute_layers: 4\n"
    )
    no_gc = BASE.replace("gradient_checkpointing: true", "gradient_checkpointing: false")
    assert "recompute_layers" in _error("  recompute_layers: 0\n", no_gc)
    assert "recompute_layers" in _error("  recompute_layers: many\n", no_gc)
    fsdp_ac = no_gc + "  fsdp_config: {activation_checkpointing: true}\n"
    assert "fsdp_config.activation_checkpointing" in _error("  recompute_layers: 4\n", fsdp_ac)
    fastchat = no_gc.replace("entry: trainwiz", "entry: fastchat-train-mem")
    assert "training.compile_layers needs launch.entry 'trainwiz'" in _error(
        "  compile_layers: true\n", fastchat
    )


# ---------------------------------------------------------------- the planner's prices


def test_selective_recompute_costs_between_none_and_all() -> None:
    shape = row_shape({"model": "6.74b"})
    row = dict(packing=True, pack_tokens=8192, liger=True, optim="adamw_torch_fused",
               attn="flex_attention")  # fmt: skip
    none, some, every = (TrainSettings(**row), TrainSettings(**row, recompute_layers=16),
                         TrainSettings(**row, trainer_gc=True))  # fmt: skip
    mem = [plan_memory(shape, s, H200).peak_allocated for s in (none, some, every)]
    rate = [predict_throughput(shape, s, H200, DIST).real_tokens_per_s for s in (none, some, every)]
    assert mem[0] > mem[1] >= mem[2]  # the end of backward (every gradient) bounds both
    assert rate[0] > rate[1] > rate[2]
    assert TrainSettings(**row, recompute_layers=99).recomputed(shape.layers) == shape.layers


def test_regional_compile_is_priced_faster_with_a_startup() -> None:
    shape = row_shape({"model": "3.37b"})
    plain = TrainSettings(packing=True, pack_tokens=4096, liger=True, attn="flex_attention")
    eager, compiled = (predict_throughput(shape, s, H200, DIST)
                       for s in (plain, plain.with_(compile_layers=True)))  # fmt: skip
    assert compiled.real_tokens_per_s > eager.real_tokens_per_s
    assert compiled.startup_s >= eager.startup_s  # flex compiles inside the layer graph
    padded = TrainSettings(micro_batch=4, liger=True)  # SDPA: the layer graph is the compile
    eager, compiled = (predict_throughput(shape, s, H200, DIST)
                       for s in (padded, padded.with_(compile_layers=True)))  # fmt: skip
    assert compiled.startup_s > eager.startup_s


def test_regional_compile_over_packed_flex_rows_is_flex_startup_not_a_sum() -> None:
    # Cold first steps measured on fresh H100s, 6.74B LoRA, 8,192-token micro-steps, regional
    # compile: 47.6, 57.5, 51.7 s (Liger's loss only), 70.0 s (every Liger kernel); the
    # H200's 6.74B full fine-tune 73 s. Flex's compile plus a layer compile predicted 90 s.
    shape = row_shape({"model": "6.74b"})
    s = TrainSettings(packing=True, pack_tokens=8192, grad_accum=2, liger=True,
                      optim="adamw_torch_fused", attn="flex_attention", compile_layers=True)  # fmt: skip
    startup = predict_throughput(shape, s, gpu_spec("h100"), DIST).startup_s
    measured = [47.6, 57.5, 51.7, 70.0, 73.0]
    assert min(measured) <= startup <= max(measured)
    assert startup == pytest.approx(sum(measured) / len(measured), rel=0.10)


def test_a_compiled_row_counts_less_for_an_eager_prediction() -> None:
    shape = row_shape({"model": "3.37b"})
    s = TrainSettings(packing=True, pack_tokens=8192, liger=True)
    row = {"settings": {**vars(s), "compile_layers": True}, "shape": {"n_params": shape.n_params}}
    assert weight(row, shape, s.with_(compile_layers=True)) == pytest.approx(1.0)
    assert weight(row, shape, s) < 0.25


# ---------------------------------------------------------------- candidates


def test_candidates_carry_compile_and_selective_counts_on_one_gpu_only() -> None:
    one = settings_from_preset(_preset())
    assert recompute_options(32) == [(False, 0), (False, 8), (False, 16), (False, 24), (True, 0)]
    pool = packed_candidates(one, DIST, layers=32, compile_layers=True)
    assert {s.compile_layers for s in pool} == {True, False}
    assert {s.recompute_layers for s in pool} == {0, 8, 16, 24}
    assert not any(s.recompute_layers and s.trainer_gc for s in pool)
    two = one.with_(nproc=2)
    pool2 = packed_candidates(two, DIST, layers=32, compile_layers=True)
    assert not any(s.compile_layers or s.recompute_layers for s in pool2)  # FSDP's own only
    assert not any(s.compile_layers for s in packed_candidates(one, DIST, layers=32))


def _compiled_row(model: str = "3.37b") -> dict[str, Any]:
    """A probe row of a compiled run as the probe writes it (measured = predicted: the
    correction is 1, only the fact that compile ran on this GPU kind counts)."""
    from dataclasses import asdict

    s = TrainSettings(packing=True, pack_tokens=8192, liger=True, optim="adamw_torch_fused",
                      attn="flex_attention", compile_layers=True)  # fmt: skip
    shape = row_shape({"model": model})
    rate = predict_throughput(shape, s, H200, DIST).real_tokens_per_s
    return {"settings": asdict(s), "shape": {"n_params": shape.n_params},
            "predicted_real_tokens_per_s": rate, "measured_real_tokens_per_s": rate}  # fmt: skip


def test_unmeasured_compile_is_left_to_the_probe_and_said() -> None:
    from backend.runs.probe import probe_choice

    result = tune(_preset(), H200, row_shape({"model": "3.37b"}), dist=DIST, host_ram=128 * GIB,
                  calibration=[], packed_attn="flex_attention")  # fmt: skip
    assert not result.after.settings.compile_layers  # a prediction alone does not pick it
    assert not any(e.settings.compile_layers for e in result.ranked)  # nor an OOM fallback
    note = next(n for n in result.notes if "compile_layers" in n)
    assert "not measured on NVIDIA H200 yet" in note and "probe" in note
    assert result.probe_pool[0].settings.compile_layers  # the probe measures it first
    assert any(e.settings.compile_layers for e in probe_choice(result, 2))


def test_tune_proposes_regional_compile_once_measured_and_says_why() -> None:
    result = tune(_preset(), H200, row_shape({"model": "3.37b"}), dist=DIST, host_ram=128 * GIB,
                  calibration=[_compiled_row()], packed_attn="flex_attention")  # fmt: skip
    assert result.after.settings.compile_layers
    change = next(c for c in result.changes if c.path == "training.compile_layers")
    assert change.new is True and "regional torch.compile" in change.reason
    assert "budget" in change.reason
    # the tuned preset is a valid preset that launches what was planned
    again = parse_preset_text(preset_to_yaml(result.preset), "tuned.yaml")
    assert again.training.compile_layers and not again.training.torch_compile


def test_compile_over_the_budget_is_dropped_with_the_reason() -> None:
    result = tune(_preset(), H200, row_shape({"model": "3.37b"}), dist=DIST, host_ram=128 * GIB,
                  calibration=[_compiled_row()], packed_attn="flex_attention", compile_budget_s=20)  # fmt: skip
    assert not result.after.settings.compile_layers  # padded regional compile: 30 s
    assert any(e.settings.compile_layers for e, _why in result.dropped)
    assert all("> budget 20 s" in why for _e, why in result.dropped)
    note = next(n for n in result.notes if "dropped" in n)
    assert "with torch.compile" in note and "--compile-budget" in note


def test_selective_recompute_only_where_no_recompute_does_not_fit() -> None:
    for model in ("3.37b", "6.74b"):
        result = tune(_preset(), H200, row_shape({"model": model}), dist=DIST,
                      host_ram=128 * GIB, calibration=[], packed_attn="flex_attention")  # fmt: skip
        plain = {e.settings: e for e in result.ranked if not e.settings.checkpointing}
        for est in result.ranked:
            if est.settings.recompute_layers:
                twin = plain.get(est.settings.with_(recompute_layers=0))
                assert twin is None or twin.memory.tight
        selective = [e for e in result.ranked if e.settings.recompute_layers]
        assert bool(selective) == (model == "6.74b")  # 3.37B fits every row without recompute
    # 6.74B on 8,192-token rows is tight without recompute: tune's answer checkpoints a few
    s = result.after.settings
    assert s.recompute_layers and not s.trainer_gc
    change = next(c for c in result.changes if c.path == "training.recompute_layers")
    assert change.new == s.recompute_layers and "do not fit" in change.reason
    again = parse_preset_text(preset_to_yaml(result.preset), "tuned.yaml")
    assert again.training.recompute_layers == s.recompute_layers
    assert not again.training.gradient_checkpointing
