"""The form's backend: every training argument is in a group with help, values parse and are
checked by the preset schema itself, and cross-field rules say what to fix."""

from __future__ import annotations

import json
from pathlib import Path

from backend.planner import gpu_spec, shape_for_preset
from backend.planner.fields import apply, cross_checks, display_value, form_fields, parse
from backend.planner.gpu import spec_from_snapshot
from backend.preset import load_preset
from backend.preset.loader import parse_preset_text, preset_to_yaml
from backend.preset.schema import TrainingArgs

FIELDS = {f.path: f for f in form_fields()}
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_every_training_argument_is_on_the_form_with_help() -> None:
    assert set(TrainingArgs.model_fields) <= set(FIELDS)
    assert "launch.nproc_per_node" in FIELDS
    assert all(f.help for f in FIELDS.values())
    assert len({f.group for f in FIELDS.values()}) == 6
    assert FIELDS["eval_strategy"].choices == ("no", "steps", "epoch")
    assert FIELDS["tf32"].kind == "optional_bool"
    assert FIELDS["fsdp_config"].kind == "json"


def test_parse_and_apply_use_the_schema_ranges() -> None:
    preset = load_preset("tiny-cpu")
    updated, error = apply(preset, FIELDS["per_device_train_batch_size"], "0")
    assert updated is None and error == "Input should be greater than or equal to 1"
    assert apply(preset, FIELDS["learning_rate"], "2e-5")[0].training.learning_rate == 2e-5
    assert apply(preset, FIELDS["num_train_epochs"], "-1")[1].startswith("Input should be greater")
    assert apply(preset, FIELDS["save_total_limit"], "")[0].training.save_total_limit is None
    assert "not a whole number" in apply(preset, FIELDS["max_steps"], "1.5")[1]
    assert "not valid JSON" in apply(preset, FIELDS["fsdp_config"], "{oops")[1]
    both, error = apply(load_preset("vicuna-7b-4xa100-40g"), FIELDS["fp16"], True)
    assert both is None and "bf16 and fp16 are both on" in error
    assert parse(FIELDS["tf32"], "") is None and parse(FIELDS["tf32"], "TRUE") is True
    # An accepted edit marks the field as set, so the saved preset carries it.
    edited, _ = apply(preset, FIELDS["adam_beta2"], "0.95")
    assert edited is not None
    assert parse_preset_text(preset_to_yaml(edited)).training.adam_beta2 == 0.95
    assert display_value(3.0) == "3" and display_value({"a": True}) == '{"a": true}'


def test_cross_checks_name_the_field_and_the_fix() -> None:
    preset = load_preset("vicuna-7b-4xa100-40g").model_copy(deep=True)
    shape = shape_for_preset(preset)
    v100 = gpu_spec("v100")
    issues = {(i.path, i.level): i.message for i in cross_checks(preset, v100, shape, 8)}
    assert "Tesla V100-SXM2-32GB is sm70" in issues[("bf16", "error")]
    assert ("tf32", "error") in issues
    preset.training.eval_strategy = "steps"
    preset.training.eval_data_path = None
    preset.training.model_max_length = 8192  # vicuna-7b-v1.5 has 4096 positions
    preset.training.fsdp_config = {"activation_checkpointing": True}
    machine = json.loads(
        (FIXTURES / "h200" / "nvml-trace-fastchat-1b-2gpu.jsonl").read_text().splitlines()[0]
    )
    h200 = spec_from_snapshot(
        {"gpus": [{"name": g["name"], "memory_total": g["mem_total"], "compute_capability": "9.0"}
                  for g in machine["gpus"]]}
    )  # fmt: skip
    assert h200 is not None
    issues = {i.path: i for i in cross_checks(preset, h200, shape, h200.count)}
    assert "set eval_data_path" in issues["eval_strategy"].message
    assert issues["eval_strategy"].level == "error"
    assert "RoPE scaling" in issues["model_max_length"].message
    assert "x2" in issues["model_max_length"].message
    assert issues["launch.nproc_per_node"].message == "4 processes but 2 GPU(s) visible"
    assert "HF refuses both" in issues["gradient_checkpointing"].message
    assert "bf16" not in issues  # sm90 is fine
    seed = load_preset("vicuna-13b-v1.3-8xa100")  # FastChat's own script: a warning, not a block
    seed_issues = {i.path: i for i in cross_checks(seed, None, None, None)}
    assert seed_issues["eval_strategy"].level == "warning"
