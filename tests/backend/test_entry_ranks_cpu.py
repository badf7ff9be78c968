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


class FakeDistributed:
    """A stand-in for ``torch.distributed``: the race it guards (one rank still inside
    ``init_process_group`` while another exits) cannot be staged on cue with real processes."""

    def __init__(self, backend: str, world: int, initialized: bool = True) -> None:
        self.backend, self.world, self.initialized = backend, world, initialized
        self.barriers: list[float] = []

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return self.initialized

    def get_world_size(self) -> int:
        return self.world

    def get_backend(self) -> str:
        return self.backend

    def monitored_barrier(self, timeout: object) -> None:
        self.barriers.append(timeout.total_seconds())  # type: ignore[attr-defined]


class FakeTorch:
    def __init__(self, dist: FakeDistributed) -> None:
        self.distributed = dist


def test_a_refusing_rank_waits_for_the_others_on_gloo() -> None:
    dist = FakeDistributed("gloo", 2)
    assert ranks.meet_before_refusing(FakeTorch(dist), seconds=7) is True
    assert dist.barriers == [7.0]


def test_no_barrier_alone_uninitialized_or_on_nccl() -> None:
    for dist in (FakeDistributed("gloo", 1), FakeDistributed("gloo", 2, initialized=False),
                 FakeDistributed("nccl", 2)):  # fmt: skip
        assert ranks.meet_before_refusing(FakeTorch(dist)) is False
        assert dist.barriers == []
