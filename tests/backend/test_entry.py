"""The training entry's own logic: flag handling, attention choice, FLOPs, peaks, metrics lines.

The entry is loaded from its file as torchrun would run it (it imports torch, transformers and
fastchat, which the test process may do; the wizard process never does).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from backend.entry import ENTRY_SOURCE, copy_entry, entry_modules


@pytest.fixture(scope="module")
def entry() -> ModuleType:

    # torchrun puts the script's folder first on sys.path: the siblings import as top-level.
    if str(ENTRY_SOURCE.parent) not in sys.path:
        sys.path.insert(0, str(ENTRY_SOURCE.parent))
    spec = importlib.util.spec_from_file_location("tw_train_entry", ENTRY_SOURCE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("module", entry_modules(), ids=lambda p: p.name)
def test_entry_imports_only_stdlib_torch_transformers_fastchat(module: Path) -> None:
    """Each file of the entry imports the standard library, the training stack, or a sibling."""
    import ast

    tree = ast.parse(module.read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots.add(node.module.split(".")[0])
    siblings = {p.stem for p in entry_modules()}
    allowed = {"torch", "transformers", "fastchat", "flash_attn", "liger_kernel", "__future__"}
    allowed |= {"peft", "deepspeed", "bitsandbytes", "safetensors"}  # LoRA/QLoRA/ZeRO (lora.py)
    allowed |= {"pynvml"}  # gpusampler.py, only when it imports (nvidia-smi otherwise)
    assert roots - allowed - siblings <= set(sys.stdlib_module_names)


def test_copy_entry_puts_it_in_the_run_dir(tmp_path: Path) -> None:
    target = copy_entry(tmp_path)
    assert target == tmp_path / "entry" / "train_entry.py"
    assert target.read_bytes() == ENTRY_SOURCE.read_bytes()
    assert sorted(p.name for p in target.parent.iterdir()) == [p.name for p in entry_modules()]


def test_pop_option_both_spellings(entry: ModuleType) -> None:
    argv = ["--a", "1", "--attn_implementation", "sdpa", "--b=2"]
    assert entry.pop_option(argv, "attn_implementation") == "sdpa"
    assert argv == ["--a", "1", "--b=2"]
    argv = ["--attn_implementation=eager", "--x"]
    assert entry.pop_option(argv, "attn_implementation") == "eager"
    assert argv == ["--x"]
    assert entry.pop_option(argv, "missing") is None


def test_adapt_argv_renames_eval_strategy_for_the_installed_transformers(entry: ModuleType) -> None:
    argv = ["--evaluation_strategy", "no", "--output_dir", "o"]
    entry.adapt_argv(argv)
    parser = entry.transformers.HfArgumentParser(entry.TrainingArguments)
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    assert (
        str(
            args.eval_strategy.value if hasattr(args.eval_strategy, "value") else args.eval_strategy
        )
        == "no"
    )


def test_adapt_argv_writes_fsdp_config_json_to_a_file(entry: ModuleType) -> None:
    argv = ["--fsdp_config", json.dumps({"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]})]
    entry.adapt_argv(argv)
    assert argv[0] == "--fsdp_config"
    config = json.loads(Path(argv[1]).read_text())
    assert config == {"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}


def test_attention_choice_on_cpu(entry: ModuleType) -> None:
    assert entry.choose_attention("auto") == "sdpa"  # no GPU here: never flash
    assert entry.choose_attention("eager") == "eager"
    with pytest.raises(SystemExit):
        entry.choose_attention("fast")
    assert entry.attention_kwargs("sdpa") == {"attn_implementation": "sdpa"}


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H200", 989e12),
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA A100-PCIE-40GB", 312e12),
        ("Tesla V100-SXM2-32GB", None),
    ],
)
def test_peak_flops_from_gpu_name(entry: ModuleType, name: str, peak: float | None) -> None:
    assert entry.peak_flops_for(name) == peak


def test_flops_per_token_matches_the_formula(entry: ModuleType) -> None:
    cfg = entry.transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        vocab_size=512,
    )
    model = entry.transformers.LlamaForCausalLM(cfg)
    n_params, flops = entry.count_flops_per_token(model, cfg, 256)
    assert n_params == sum(p.numel() for p in model.parameters())
    n_without_embedding = n_params - 512 * 64
    assert flops == 6 * n_without_embedding + 12 * 2 * 64 * 256


def test_flops_count_the_model_s_parameters_under_zero3_and_4bit(entry: ModuleType) -> None:
    """On the H200, ZeRO-3 reported 0 parameters (partitioned numel) and QLoRA 3.5 of 6.7 B
    (two 4-bit values a byte). DeepSpeed keeps the full count in ``ds_numel``, bitsandbytes the
    shape in ``quant_state.shape``; both emptied/packed the same way here (no GPU, no DeepSpeed)."""
    cfg = entry.transformers.LlamaConfig(
        hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
        vocab_size=512,
    )  # fmt: skip
    torch = entry.torch
    model = entry.transformers.LlamaForCausalLM(cfg)
    expected = entry.count_flops_per_token(model, cfg, 256)
    partitioned = entry.transformers.LlamaForCausalLM(cfg)
    for param in partitioned.parameters():  # what deepspeed.zero.Init leaves on one rank
        param.ds_numel = param.numel()
        param.data = torch.empty(0)
    assert entry.count_flops_per_token(partitioned, cfg, 256) == expected
    packed = entry.transformers.LlamaForCausalLM(cfg)
    proj = packed.model.layers[0].mlp.down_proj
    shape = proj.weight.shape
    proj.weight = torch.nn.Parameter(torch.empty(shape.numel() // 2, 1, dtype=torch.uint8),
                                     requires_grad=False)  # fmt: skip
    proj.weight.quant_state = type("QuantState", (), {"shape": shape})()
    assert entry.count_flops_per_token(packed, cfg, 256) == expected


def test_metrics_callback_writes_step_lines_with_loss(entry: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    counter = entry.TokenCounter()
    info = {"flops_per_token": 100, "peak_flops": None}
    cb = entry.MetricsCallback(str(path), counter, info)
    state = entry.transformers.TrainerState()
    state.max_steps = 2
    torch = entry.torch
    cb.on_train_begin(None, state, None)
    for step, loss in ((1, 2.5), (2, 2.0)):
        cb.on_step_begin(None, state, None)
        counter.add(
            {"input_ids": torch.ones(2, 8), "attention_mask": torch.tensor([[1] * 5 + [0] * 3] * 2)}
        )
        state.global_step = step
        state.epoch = step / 2
        cb.on_step_end(None, state, None)
        cb.on_log(None, state, None, logs={"loss": loss, "learning_rate": 1e-3, "grad_norm": 0.5})
    cb.end(train_runtime=1.0, saved_to="x", ok=True)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["start", "step", "step", "end"]
    steps = lines[1:3]
    assert [s["step"] for s in steps] == [1, 2]
    assert [s["loss"] for s in steps] == [2.5, 2.0]
    assert all(s["tokens"] == 16 and s["tokens_nonpad"] == 10 and s["samples"] == 2 for s in steps)
    assert all(s["mfu"] is None and s["peak_mem_gib"] is None for s in steps)
    assert steps[0]["tokens_per_s"] == pytest.approx(16 / steps[0]["step_time_s"])


def test_step_without_log_is_written_at_the_next_step(entry: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    counter = entry.TokenCounter()
    cb = entry.MetricsCallback(str(path), counter, {"flops_per_token": 1, "peak_flops": None})
    state = entry.transformers.TrainerState()
    state.global_step = 1
    cb.on_step_end(None, state, None)
    assert not path.exists()  # waiting for a possible log event of this step
    cb.on_step_begin(None, state, None)
    (line,) = [json.loads(x) for x in path.read_text().splitlines()]
    assert line["step"] == 1 and line["loss"] is None
