"""Fixes computed against real presets, applied, validated and shown as a diff."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from backend.diagnosis import (
    Fix,
    PresetChange,
    apply_fixes,
    diagnose_file,
    diagnose_text,
    preset_diff,
)
from backend.errors import BadInput
from backend.preset.loader import load_preset, parse_preset_text, preset_to_yaml
from backend.preset.schema import Preset

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "logcorpus"


@pytest.fixture()
def vicuna() -> Preset:
    return load_preset("vicuna-7b-4xa100-40g")


def _paths(fix: Fix) -> dict[str, object]:
    return {c.path: c.value for c in fix.changes}


def test_oom_fixes_keep_global_batch_and_apply(vicuna: Preset) -> None:
    top = diagnose_file(CORPUS / "cuda_oom/fastchat-1781-vicuna7b-a100-40g.log", preset=vicuna).top
    assert top is not None
    batch_fix = next(f for f in top.fixes if "training.per_device_train_batch_size" in _paths(f))
    new = apply_fixes(vicuna, batch_fix)
    t_old, t_new = vicuna.training, new.training
    assert t_new.per_device_train_batch_size < t_old.per_device_train_batch_size
    assert (
        t_new.per_device_train_batch_size * t_new.gradient_accumulation_steps
        == t_old.per_device_train_batch_size * t_old.gradient_accumulation_steps
    )
    diff = preset_diff(vicuna, new)
    assert any(line.startswith("-  per_device_train_batch_size") for line in diff)
    assert any(line.startswith("+  gradient_accumulation_steps") for line in diff)
    # The fixed preset round-trips through YAML like any saved preset.
    assert parse_preset_text(preset_to_yaml(new)) == new
    assert vicuna.training.per_device_train_batch_size == t_old.per_device_train_batch_size


def test_oom_fixes_are_ordered_by_cost_and_skip_what_is_already_set(vicuna: Preset) -> None:
    top = diagnose_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n", preset=vicuna
    ).top
    assert top is not None
    paths = [next(iter(_paths(f))) for f in top.fixes]
    # gradient_checkpointing is already on in this preset: not proposed again.
    assert "training.gradient_checkpointing" not in paths
    assert paths.index("training.per_device_train_batch_size") < paths.index(
        "training.model_max_length"
    )
    for fix in top.fixes:
        apply_fixes(vicuna, fix)  # every proposed fix yields a valid preset


def test_port_fix_is_a_port_that_binds(vicuna: Preset) -> None:
    top = diagnose_file(
        CORPUS / "port_in_use/deepspeed-3916-master-port-29600-wrapped.log", preset=vicuna
    ).top
    assert top is not None
    port = _paths(top.fixes[0])["launch.master_port"]
    assert isinstance(port, int) and port != vicuna.launch.master_port
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", port))


def test_memlock_refused_drops_that_ulimit_only(vicuna: Preset) -> None:
    data = vicuna.model_dump(mode="json", exclude_unset=True)
    data["container"]["ulimits"] = [
        {"name": "memlock", "value": "-1"},
        {"name": "stack", "value": "67108864"},
    ]
    data["container"]["privileged"] = True
    preset = Preset.model_validate(data)
    top = diagnose_file(
        CORPUS / "container_permission/sandbox-docker-run-memlock-privileged.log", preset=preset
    ).top
    assert top is not None and top.category == "container_permission"
    fixed = preset
    for fix in top.fixes:
        fixed = apply_fixes(fixed, fix)
    assert [u.name for u in fixed.container.ulimits] == ["stack"]
    assert fixed.container.privileged is False


def test_flash_build_without_torch_proposes_no_build_isolation(vicuna: Preset) -> None:
    data = vicuna.model_dump(mode="json", exclude_unset=True)
    data["environment"]["flash_attn"] = {"no_build_isolation": False}
    preset = Preset.model_validate(data)
    text = "Collecting flash-attn\n  Getting requirements to build wheel\n  ModuleNotFoundError: No module named 'torch'\n"
    top = diagnose_text(text, preset=preset).top
    assert top is not None and top.category == "flash_attn_build"
    assert _paths(top.fixes[0]) == {"environment.flash_attn.no_build_isolation": True}
    sdpa = next(f for f in top.fixes if "training.attn_implementation" in _paths(f))
    assert _paths(sdpa)["environment.flash_attn.install"] == "never"


def test_runtime_image_gets_devel_image_fix(vicuna: Preset) -> None:
    data = vicuna.model_dump(mode="json", exclude_unset=True)
    data["environment"]["image"] = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
    preset = Preset.model_validate(data)
    top = diagnose_text(
        "UserWarning: flash_attn was requested, but nvcc was not found.\n", preset=preset
    ).top
    assert top is not None
    assert _paths(top.fixes[0]) == {
        "environment.image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel"
    }


def test_shm_fix_uses_ipc_host_or_shm_size() -> None:
    data = load_preset("vicuna-7b-4xa100-40g").model_dump(mode="json", exclude_unset=True)
    data["container"]["ipc"] = None
    data["training"]["dataloader_num_workers"] = 4
    preset = Preset.model_validate(data)
    top = diagnose_file(
        CORPUS / "shm_bus_error/pipedream-28-unexpected-bus-error-dataloader.log", preset=preset
    ).top
    assert top is not None and top.category == "shm"
    proposed = [_paths(f) for f in top.fixes]
    assert proposed[0] == {"container.ipc": "host"}
    assert any(p.get("container.shm_size") == "16g" for p in proposed)
    assert {"training.dataloader_num_workers": 0} in proposed


def test_save_oom_fixes(vicuna: Preset) -> None:
    data = vicuna.model_dump(mode="json", exclude_unset=True)
    data["launch"]["entry"] = "fastchat-train-mem"
    preset = Preset.model_validate(data)
    top = diagnose_file(
        CORPUS / "cuda_oom/fastchat-256-fsdp-save-state-dict-clone-oom-after-training.log",
        preset=preset,
    ).top
    assert top is not None and top.category == "fsdp_save_oom"
    assert _paths(top.fixes[0]) == {"launch.entry": "trainwiz"}
    assert any(_paths(f) == {"environment.fsdp_state_dict_patch": True} for f in top.fixes)


def test_hf_args_old_flag_rejected_targets_newer_transformers(vicuna: Preset) -> None:
    data = vicuna.model_dump(mode="json", exclude_unset=True)
    data["environment"]["transformers"] = "4.31.0"
    preset = Preset.model_validate(data)
    line = (
        "ValueError: Some specified arguments are not used by the HfArgumentParser: "
        "['--evaluation_strategy', 'steps']\n"
    )
    top = diagnose_text(line, preset=preset).top
    assert top is not None and top.category == "hf_args"
    assert "eval_strategy" in top.fixes[0].title
    new = apply_fixes(preset, top.fixes[0])
    from backend.plan.hf_flags import flag_name, version_tuple

    assert (
        flag_name("eval_strategy", version_tuple(new.environment.transformers)) == "eval_strategy"
    )


def test_generic_fixes_without_preset() -> None:
    top = diagnose_text("RuntimeError: CUDA error: out of memory\n").top
    assert top is not None and top.fixes and all(not f.changes for f in top.fixes)


def test_invalid_fix_is_bad_input(vicuna: Preset) -> None:
    bad = Fix("bad", "test", [PresetChange("training.per_device_train_batch_size", 0, "invalid")])
    with pytest.raises(BadInput, match="per_device_train_batch_size"):
        apply_fixes(vicuna, bad)


@pytest.mark.parametrize(
    ("line", "current", "expected_flag"),
    [
        (
            "ValueError: Some specified arguments are not used by the HfArgumentParser: "
            "['--fsdp_transformer_layer_cls_to_wrap', 'LlamaDecoderLayer']",
            "4.57.6",
            "fsdp_config",
        ),
        (
            "TypeError: TrainingArguments.__init__() got an unexpected keyword argument 'eval_strategy'",
            "4.57.6",
            "evaluation_strategy",
        ),
    ],
)
def test_hf_args_names_flags_for_the_installed_version(
    vicuna: Preset, line: str, current: str, expected_flag: str
) -> None:
    from backend.plan.hf_flags import training_flags

    data = vicuna.model_dump(mode="json", exclude_unset=True)
    data["environment"]["transformers"] = current
    data["training"]["fsdp_transformer_layer_cls_to_wrap"] = "LlamaDecoderLayer"
    data["training"]["eval_strategy"] = "steps"
    preset = Preset.model_validate(data)
    top = diagnose_text(line + "\n", preset=preset).top
    assert top is not None and top.category == "hf_args"
    fixed = apply_fixes(preset, top.fixes[0])
    flags = training_flags(
        fixed.training,
        model_path="/m",
        target_transformers=fixed.environment.transformers,
        trainwiz_entry=True,
    )
    assert f"--{expected_flag}" in flags


def test_refused_option_the_preset_does_not_set_gives_advice_not_a_noop(vicuna: Preset) -> None:
    assert not vicuna.container.privileged and not vicuna.container.ulimits
    top = diagnose_file(
        CORPUS / "container_permission/sandbox-docker-run-memlock-privileged.log", preset=vicuna
    ).top
    assert top is not None
    assert [f.changes for f in top.fixes] == [[], []]
    assert "memlock" in top.fixes[0].title
