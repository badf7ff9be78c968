"""LoRA, QLoRA and ZeRO (docs/lora.md): preset fields, the rendered flags, the DeepSpeed config,
the entry's gating, and the planner's memory for every method."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from backend.entry import ENTRY_DIR
from backend.errors import BadInput
from backend.plan import build_plan
from backend.plan.deepspeed import write_config, zero_config
from backend.planner import TrainSettings, gpu_spec, plan_memory
from backend.planner.methods import (
    LLAMA_MODULES,
    MethodSettings,
    adapter_params,
    plan_method_memory,
    predict_method_throughput,
)
from backend.planner.shape import KNOWN_CONFIGS, shape_from_config
from backend.preset import load_preset, parse_preset_text

ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30
SHAPE_7B = shape_from_config(KNOWN_CONFIGS["lmsys/vicuna-7b-v1.3"])


def preset_text(training_extra: str, device: str = "cuda") -> str:
    return f"""\
schema: 1
name: m
model: {{source: local, dir: /data/m}}
launch: {{runner: host, device: {device}}}
training:
  data_path: /data/d.json
  output_dir: /data/out
{training_extra}"""


# ---------------------------------------------------------------- preset and plan


def test_lora_preset_renders_fastchat_train_lora_flags_exactly() -> None:
    train = build_plan(load_preset("vicuna-7b-lora-1x24g")).step("train")
    flags = train.argv[train.argv.index("--lazy_preprocess") + 2 :]
    assert flags == [
        "--lora_r", "8", "--lora_alpha", "16", "--lora_dropout", "0.05",
        "--lora_target_modules", "q_proj", "k_proj", "v_proj", "o_proj",
    ]  # fmt: skip
    assert "--deepspeed" not in train.argv and "--fsdp" not in train.argv
    assert train.title.startswith("Train (lora)")


def test_qlora_adds_q_lora_and_defaults_render_fastchat_defaults() -> None:
    preset = parse_preset_text(preset_text("  bf16: true\n  method: qlora\n"))
    argv = build_plan(preset).step("train").argv
    tail = argv[argv.index("--lora_r") :]
    assert tail == [
        "--lora_r",
        "8",
        "--lora_alpha",
        "16",
        "--lora_dropout",
        "0.05",
        "--q_lora",
        "True",
    ]


def test_fastchat_entry_runs_fastchats_train_lora_script() -> None:
    text = preset_text("  method: lora\n").replace(
        "runner: host,", "runner: host, entry: fastchat-train-mem,"
    )
    argv = build_plan(parse_preset_text(text)).step("train").argv
    assert "fastchat/train/train_lora.py" in argv


@pytest.mark.parametrize(
    ("extra", "device", "field", "fix"),
    [
        ("  method: qlora\n", "cpu", "training.method 'qlora'", "use method: lora"),
        ("  lora: {lora_r: 4}\n", "cuda", "training.lora is set", "method: lora"),
        ("  method: lora\n  lora: {lora_r: 0}\n", "cuda", "training.lora.lora_r", "greater"),
        ("  method: lora\n  lora: {lora_bias: some}\n", "cuda", "training.lora.lora_bias", "none"),
        (
            "  method: lora\n  lora: {lora_target_modules: ['-x']}\n",
            "cuda",
            "lora_target_modules",
            "q_proj",
        ),
        (
            "  fsdp: full_shard\n  zero: {stage: 3}\n",
            "cuda",
            "training.zero and training.fsdp",
            "choose one",
        ),
        ("  zero: {stage: 2, offload_param: true}\n", "cuda", "training.zero", "stage: 3"),
        ("  method: dora\n", "cuda", "training.method", "full"),
        ("  method: lora\n  fsdp: full_shard auto_wrap\n", "cuda", "training.fsdp", "remove fsdp"),
    ],
)
def test_bad_method_settings_name_the_field_and_the_fix(
    extra: str, device: str, field: str, fix: str
) -> None:
    with pytest.raises(BadInput) as caught:
        parse_preset_text(preset_text(extra, device), source="p.yaml")
    message = "\n".join(caught.value.problems)
    assert field in message and fix in message, message
    assert message.startswith("p.yaml:")


def test_zero_writes_a_deepspeed_config_and_passes_its_path(tmp_path: Path) -> None:
    text = preset_text("  bf16: true\n  zero: {stage: 3, offload_optimizer: true}\n")
    preset = parse_preset_text(text)
    train = build_plan(preset, run_dir=tmp_path).step("train")
    i = train.argv.index("--deepspeed")
    assert train.argv[i + 1] == str(tmp_path / "deepspeed.json")
    assert '"stage": 3' in train.note  # the plan shows the generated config
    script = build_plan(preset, run_dir=tmp_path).as_script()  # readable: one line each
    assert '\n#       "stage": 3,\n' in script and "\\n" not in script
    path = write_config(preset, tmp_path)
    assert path == tmp_path / "deepspeed.json"
    config = json.loads(path.read_text())
    zero = config["zero_optimization"]
    assert zero["stage"] == 3 and zero["offload_optimizer"]["device"] == "cpu"
    assert "offload_param" not in zero
    # ZeRO-Offload needs DeepSpeed's own (CPU) Adam: a torch AdamW from the Trainer is refused
    assert config["optimizer"]["type"] == "AdamW"
    assert set(config["optimizer"]["params"].values()) == {"auto"}
    assert zero["stage3_gather_16bit_weights_on_model_save"] is True
    assert config["bf16"] == {"enabled": "auto"} and "fp16" not in config
    assert config["train_micro_batch_size_per_gpu"] == "auto"  # the preset's flags decide
    assert write_config(parse_preset_text(preset_text("")), tmp_path / "none") is None


def test_zero_stage2_has_no_stage3_keys() -> None:
    preset = parse_preset_text(preset_text("  fp16: true\n  zero: {stage: 2}\n"))
    assert preset.training.zero is not None
    config = zero_config(preset.training.zero, preset.training)
    assert config["zero_optimization"]["stage"] == 2
    assert not any(k.startswith("stage3") for k in config["zero_optimization"])
    assert config["fp16"]["enabled"] == "auto"


# ---------------------------------------------------------------- entry (as torchrun runs it)


@pytest.fixture(scope="module")
def lora_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tw_entry_lora", ENTRY_DIR / "lora.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while being defined
    spec.loader.exec_module(module)
    return module


def test_entry_takes_the_lora_flags_out_and_leaves_the_rest(lora_module: ModuleType) -> None:
    argv = ["--data_path", "d.json", "--lora_r", "4", "--lora_target_modules", "q_proj", "o_proj",
            "--max_steps", "-1", "--q_lora", "False", "--output_dir", "o"]  # fmt: skip
    args = lora_module.pop_lora_args(argv)
    assert (args.lora_r, args.lora_target_modules, args.q_lora) == (4, ["q_proj", "o_proj"], False)
    assert args.lora_alpha == 16 and args.lora_dropout == 0.05  # FastChat's defaults
    assert argv == ["--data_path", "d.json", "--max_steps", "-1", "--output_dir", "o"]
    full = ["--data_path", "d.json"]
    assert lora_module.pop_lora_args(full) is None and full == ["--data_path", "d.json"]


def test_qlora_without_cuda_is_refused_before_loading(
    lora_module: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on this CPU machine
    args = lora_module.LoraArguments(q_lora=True)

    class Training:
        fp16 = bf16 = False
        fsdp = ""
        deepspeed = None

    with pytest.raises(SystemExit) as caught:
        lora_module.load_kwargs(args, Training())
    assert "training.method: lora" in str(caught.value) and "CUDA" in str(caught.value)


def test_qlora_without_bitsandbytes_says_how_to_install(
    lora_module: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # pretend, to reach the import
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # an import that fails
    with pytest.raises(SystemExit) as caught:
        lora_module.require_qlora()
    assert "pip install bitsandbytes" in str(caught.value)


def test_peft_state_keeps_adapters_and_the_biases_asked_for(lora_module: ModuleType) -> None:
    import torch

    named = [
        ("m.q_proj.lora_A.weight", torch.ones(2)),
        ("m.q_proj.bias", torch.ones(1)),
        ("m.k_proj.bias", torch.ones(1)),
        ("m.q_proj.weight", torch.ones(3)),
    ]
    assert set(lora_module.peft_state(named, "none")) == {"m.q_proj.lora_A.weight"}
    assert set(lora_module.peft_state(named, "all")) == {
        "m.q_proj.lora_A.weight", "m.q_proj.bias", "m.k_proj.bias"
    }  # fmt: skip
    assert set(lora_module.peft_state(named, "lora_only")) == {
        "m.q_proj.lora_A.weight", "m.q_proj.bias"
    }  # fmt: skip


# ---------------------------------------------------------------- planner


def test_adapter_count_matches_peft_for_llama_7b() -> None:
    # peft's print_trainable_parameters for Llama-7B, r 8 on q,v: 4,194,304
    assert adapter_params(SHAPE_7B, MethodSettings("lora")) == 4_194_304
    everything = MethodSettings("lora", lora_r=16, target_modules=LLAMA_MODULES)
    assert adapter_params(SHAPE_7B, everything) == 39_976_960


def test_lora_is_smaller_than_full_and_qlora_smaller_than_lora_on_24g() -> None:
    gpu = gpu_spec("4090")
    s = TrainSettings(micro_batch=1, grad_accum=16, seq=2048, trainer_gc=True)
    full = plan_memory(SHAPE_7B, s, gpu)
    lora = plan_method_memory(SHAPE_7B, s, MethodSettings("lora"), gpu)
    qlora = plan_method_memory(SHAPE_7B, s, MethodSettings("qlora"), gpu)
    assert not full.fits and lora.fits and qlora.fits
    assert qlora.total_per_gpu < lora.total_per_gpu < full.total_per_gpu
    # bf16 base 12.6 GiB + ~2.5 GiB; nf4 base ~3.3 GiB + fp32 embeddings ~1 GiB
    assert 13 * GIB < lora.total_per_gpu < 18 * GIB
    assert 4 * GIB < qlora.total_per_gpu < 9 * GIB
    lora_speed = predict_method_throughput(SHAPE_7B, s, MethodSettings("lora"), gpu)
    qlora_speed = predict_method_throughput(SHAPE_7B, s, MethodSettings("qlora"), gpu)
    assert qlora_speed.tokens_per_s < lora_speed.tokens_per_s


def test_zero3_shards_per_gpu_and_offload_moves_states_to_host() -> None:
    gpu = gpu_spec("h200")
    s8 = TrainSettings(micro_batch=1, grad_accum=4, seq=2048, trainer_gc=True, nproc=8)
    zero2 = plan_method_memory(SHAPE_7B, s8, MethodSettings("full", zero_stage=2), gpu)
    zero3 = plan_method_memory(SHAPE_7B, s8, MethodSettings("full", zero_stage=3), gpu)
    s4 = s8.with_(nproc=4)
    zero3_4 = plan_method_memory(SHAPE_7B, s4, MethodSettings("full", zero_stage=3), gpu)
    assert zero3.total_per_gpu < zero2.total_per_gpu  # stage 3 also divides the weights
    assert zero3.total_per_gpu < zero3_4.total_per_gpu  # more GPUs, smaller shards
    offload = MethodSettings("full", zero_stage=3, offload_optimizer=True, offload_param=True)
    moved = plan_method_memory(SHAPE_7B, s8, offload, gpu)
    assert moved.total_per_gpu < zero3.total_per_gpu
    assert moved.host_ram_offload >= 12 * SHAPE_7B.n_params  # fp32 master + Adam on the host
    slow = predict_method_throughput(SHAPE_7B, s8, offload, gpu)
    fast = predict_method_throughput(SHAPE_7B, s8, MethodSettings("full", zero_stage=3), gpu)
    assert slow.tokens_per_s < fast.tokens_per_s  # CPU-Adam and weight fetches cost time


def test_plan_estimate_of_a_lora_preset_uses_the_lora_model() -> None:
    from backend.planner.report import planner_report

    lines, _data = planner_report(load_preset("vicuna-7b-lora-1x24g"), "4090", None)
    assert "frozen base bf16" in "\n".join(lines)
    assert "FITS" in "\n".join(lines)


def test_zero_and_qlora_put_deepspeed_and_bitsandbytes_in_the_environment() -> None:
    from backend.images.plan import requirement_list
    from backend.plan.setup_steps import in_container_setup

    zero = parse_preset_text(preset_text("  zero: {stage: 2}\n"))
    qlora = parse_preset_text(preset_text("  method: qlora\n"))
    plain = parse_preset_text(preset_text("  method: lora\n"))
    assert "deepspeed" in requirement_list(zero) and "bitsandbytes" not in requirement_list(zero)
    assert "bitsandbytes" in requirement_list(qlora)
    assert not {"deepspeed", "bitsandbytes"} & set(requirement_list(plain))
    assert "peft" in requirement_list(plain)  # LoRA needs nothing beyond the base set
    extras = next(s for s in in_container_setup(zero) if s.id == "setup-extras")
    assert "deepspeed" in extras.argv


def test_plan_tune_of_a_full_preset_that_cannot_fit_switches_to_a_method_that_does() -> None:
    from backend.planner.report import planner_report

    preset = load_preset("vicuna-7b-4xa100-40g")
    preset.launch.nproc_per_node = 1
    lines, data = planner_report(preset, "4090", None, do_tune=True, host_ram=64 * GIB)
    text = "\n".join(lines)
    assert "no full fine-tune fits both" in text and "switched to lora" in text
    assert "training.method: 'full' -> 'lora'" in text
    assert "training.fsdp: 'full_shard auto_wrap' -> ''" in text  # LoRA runs without FSDP
    assert data["methods"][0]["changes"]["training.method"] == "qlora"  # the alternative
    assert "method: lora" in data["tune"]["preset_yaml"]


def test_tune_of_a_lora_preset_keeps_its_method_and_plans_it_with_the_lora_model() -> None:
    from backend.planner.report import planner_report

    _lines, data = planner_report(load_preset("vicuna-7b-lora-1x24g"), "4090", None, do_tune=True)
    assert "method: lora" in data["tune"]["preset_yaml"]
    assert "frozen base bf16" in str(data["tune"]["after"]["memory"]["breakdown"])
    assert not any(c["path"] == "training.method" for c in data["tune"]["changes"])
