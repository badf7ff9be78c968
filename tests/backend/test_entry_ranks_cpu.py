"""The entry's CPU device arguments: no FSDP flags on a machine without CUDA (accelerate builds
its FSDP plugin only for an accelerator device; the plan says the run trains as plain DDP)."""

from __future__ import annotations

from backend.entry import ranks
from tests.training_side import on_first_use

torch = on_first_use("torch")


def test_fsdp_flags_are_removed_on_the_cpu_in_both_spellings() -> None:
    assert not torch.cuda.is_available()  # this machine: the CPU path
    argv = ["--model_name_or_path", "m", "--fsdp", "full_shard auto_wrap",
            "--fsdp_transformer_layer_cls_to_wrap", "LlamaDecoderLayer",
            '--fsdp_config={"x": 1}', "--bf16", "False"]  # fmt: skip
    removed = ranks.without_fsdp_on_cpu(argv, torch)
    assert argv == ["--model_name_or_path", "m", "--bf16", "False"]
    assert removed == ["--fsdp", "full_shard auto_wrap", "--fsdp_transformer_layer_cls_to_wrap",
                       "LlamaDecoderLayer", '--fsdp_config={"x": 1}']  # fmt: skip


def test_nothing_is_removed_without_fsdp_flags() -> None:
    argv = ["--fsdp_state_dict_patch_is_not_a_flag_here", "--output_dir", "o"]
    assert ranks.without_fsdp_on_cpu(argv, torch) == []
    assert argv == ["--fsdp_state_dict_patch_is_not_a_flag_here", "--output_dir", "o"]
