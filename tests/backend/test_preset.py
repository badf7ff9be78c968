"""Preset loading: every problem reported with file:line:col, round trips, shipped presets."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.errors import BadInput
from backend.preset import list_shipped, load_preset, parse_preset_text, preset_to_yaml, save_preset

BAD = """\
schema: 1
name: broken
model:
  source: hf
  repo: lmsys/vicuna-7b-v1.5
  dir: /data/m
training:
  data_path: /data/d.json
  output_dir: /data/out
  per_device_train_batchsize: 2
  num_train_epochs: three
  learning_rate: -0.0001
"""


def test_typo_wrong_type_and_negative_lr_are_all_named_with_lines(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    with pytest.raises(BadInput) as caught:
        load_preset(path)
    problems = caught.value.problems
    assert len(problems) == 3
    typo, wrong_type, negative = problems
    assert typo.startswith(f"{path}:10:3 training.per_device_train_batchsize: unknown key")
    assert "did you mean 'per_device_train_batch_size'" in typo
    assert wrong_type.startswith(f"{path}:11:21 training.num_train_epochs:")
    assert "'three'" in wrong_type
    assert negative.startswith(f"{path}:12:18 training.learning_rate:")
    assert "greater than 0" in negative


def test_cli_exits_2_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tui.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count(str(path)) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_yaml_syntax_error_names_the_line() -> None:
    with pytest.raises(BadInput) as caught:
        parse_preset_text("name: x\nmodel: [unclosed\n", source="p.yaml")
    assert caught.value.problems[0].startswith("p.yaml:")


def test_unsupported_schema_version() -> None:
    with pytest.raises(BadInput, match="schema: version 2 is not supported"):
        parse_preset_text("schema: 2\nname: x\n", source="p.yaml")


def test_missing_required_key_points_at_its_parent() -> None:
    with pytest.raises(BadInput) as caught:
        parse_preset_text(
            "schema: 1\nname: x\nmodel:\n  source: local\ntraining:\n  output_dir: o\n"
        )
    text = "\n".join(caught.value.problems)
    assert "model.dir: required key 'dir' is missing" in text
    assert "training.data_path: required key 'data_path' is missing" in text


@pytest.mark.parametrize("name", ["tiny-cpu", "vicuna-13b-v1.3-8xa100", "vicuna-7b-4xa100-40g"])
def test_shipped_presets_round_trip(name: str, tmp_path: Path) -> None:
    preset = load_preset(name)
    target = save_preset(preset, tmp_path / f"{name}.yaml")
    again = load_preset(target)
    assert again == preset
    assert again.model_fields_set == preset.model_fields_set
    assert preset_to_yaml(again) == preset_to_yaml(preset)


def test_save_refuses_nothing_half_written(tmp_path: Path) -> None:
    preset = load_preset("tiny-cpu")
    target = tmp_path / "sub" / "p.yaml"
    save_preset(preset, target)
    assert [p.name for p in target.parent.iterdir()] == ["p.yaml"]


def test_tokens_never_stored() -> None:
    fields = load_preset("vicuna-7b-4xa100-40g").model.model_dump()
    assert fields["token_env"] == "HF_TOKEN"
    assert not any("hf_" in str(v) for v in fields.values())


def test_list_shipped_has_descriptions() -> None:
    names = dict(list_shipped())
    assert set(names) == {
        "tiny-cpu",
        "tiny-cpu-lora",
        "vicuna-13b-v1.3-8xa100",
        "vicuna-7b-4xa100-40g",
        "vicuna-7b-lora-1x24g",
        "llama-3.1-8b-8x80g",
        "llama-3.1-8b-lora-1x24g",
        "qwen2.5-7b-8x80g",
        "qwen2.5-7b-lora-1x24g",
        "mistral-7b-v0.3-8x80g",
        "mistral-7b-v0.3-lora-1x24g",
        "gemma-2-9b-8x80g",
        "gemma-2-9b-lora-1x48g",
    }
    assert all(names.values())


def test_duplicate_keys_and_a_second_section_are_errors() -> None:
    text = (
        "schema: 1\nname: x\nname: y\nmodel: {source: local, dir: /m}\n"
        "training: {data_path: d, output_dir: o}\ntraining: {data_path: e, output_dir: o}\n"
    )
    with pytest.raises(BadInput) as caught:
        parse_preset_text(text, source="p.yaml")
    assert caught.value.problems == [
        "p.yaml:3:1 name: key 'name' appears again (first at line 2): keep one and merge them",
        "p.yaml:6:1 training: section 'training' appears again (first at line 5): "
        "keep one and merge them",
    ]


@pytest.mark.parametrize(
    "training",
    [
        "per_device_train_batch_size: 1e30",
        "num_train_epochs: .inf",
        "learning_rate: .nan",
        "max_steps: -100",
        "gradient_accumulation_steps: 100000000",
    ],
)
def test_numbers_are_bounded_and_finite(training: str) -> None:
    text = (
        "schema: 1\nname: x\nmodel: {source: local, dir: /m}\n"
        f"training:\n  data_path: d\n  output_dir: o\n  {training}\n"
    )
    with pytest.raises(BadInput, match=r"p.yaml:7:\d+ training\."):
        parse_preset_text(text, source="p.yaml")
