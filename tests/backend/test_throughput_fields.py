"""The throughput fields of a preset: validated, rendered as passed, gated by the entry."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from backend.entry import ENTRY_DIR
from backend.errors import BadInput
from backend.plan.hf_flags import training_flags
from backend.preset.loader import parse_preset_text

BASE = """schema: 1
name: t
model: {source: local, dir: /m}
launch: {runner: host, entry: ENTRY, device: cuda}
training:
  data_path: /d.json
  output_dir: /o
  model_max_length: 2048
"""


def preset(extra: str, entry: str = "trainwiz"):
    return parse_preset_text(BASE.replace("ENTRY", entry) + extra, "p.yaml")


def test_seed_like_preset_renders_no_throughput_flags() -> None:
    flags = training_flags(
        preset("").training, model_path="/m", target_transformers="4.57.6", trainwiz_entry=True
    )
    assert not {"--packing", "--pack_tokens", "--use_liger_kernel", "--torch_compile"} & set(flags)


def test_throughput_flags_render_exactly_as_set() -> None:
    p = preset(
        "  packing: true\n  pack_tokens: 8192\n  use_liger_kernel: true\n"
        "  optim: adamw_torch_fused\n  torch_compile: true\n"
    )
    flags = training_flags(p.training, model_path="/m", target_transformers="4.57.6",
                           trainwiz_entry=True)  # fmt: skip
    pairs = dict(zip(flags[::2], flags[1::2], strict=True))
    assert pairs["--packing"] == "True" and pairs["--pack_tokens"] == "8192"
    assert pairs["--use_liger_kernel"] == "True" and pairs["--optim"] == "adamw_torch_fused"
    assert pairs["--torch_compile"] == "True"


def test_pack_tokens_below_max_length_names_the_field() -> None:
    with pytest.raises(BadInput, match="pack_tokens 1024 is below model_max_length 2048"):
        preset("  packing: true\n  pack_tokens: 1024\n")


def test_packing_needs_the_trainwiz_entry() -> None:
    with pytest.raises(BadInput, match=r"packing needs launch\.entry 'trainwiz'"):
        preset("  packing: true\n", entry="fastchat-train-mem")


@pytest.fixture(scope="module")
def kernels():
    spec = importlib.util.spec_from_file_location("kernels", ENTRY_DIR / "kernels.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_entry_gates_kernels_on_what_is_installed(kernels, capsys) -> None:
    torch = pytest.importorskip("torch")
    entry_spec = importlib.util.spec_from_file_location("tw_entry_k", ENTRY_DIR / "train_entry.py")
    assert entry_spec and entry_spec.loader
    sys.path.insert(0, str(ENTRY_DIR))
    try:
        entry = importlib.util.module_from_spec(entry_spec)
        entry_spec.loader.exec_module(entry)
    finally:
        sys.path.remove(str(ENTRY_DIR))
    argv = ["--use_liger_kernel", "True", "--optim", "adamw_torch_fused", "--torch_compile",
            "True", "--output_dir", "o"]  # fmt: skip
    active = kernels.gate(argv, entry.pop_option, entry.TrainingArguments, torch)
    # Here (CPU, no liger-kernel): Liger is dropped with a line, fused AdamW and compile stay.
    assert "--use_liger_kernel" not in argv
    assert "use_liger_kernel" in capsys.readouterr().out
    assert active == {"torch_compile": True, "optim": "adamw_torch_fused"}
    assert argv[argv.index("--optim") + 1] == "adamw_torch_fused"
