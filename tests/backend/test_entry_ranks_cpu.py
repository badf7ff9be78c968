"""The entry's CPU device arguments: no FSDP flags on a machine without CUDA (accelerate builds
its FSDP plugin only for an accelerator device; the plan says the run trains as plain DDP)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from backend.entry import ranks
from backend.ports import any_free_port
from tests.training_side import on_first_use

torch = on_first_use("torch")
ROOT = Path(__file__).resolve().parents[2]


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
    """A stand-in for ``torch.distributed`` for the cases that never meet: alone, without a
    group."""

    def __init__(self, backend: str, world: int, initialized: bool = True) -> None:
        self.backend, self.world, self.initialized = backend, world, initialized

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return self.initialized

    def get_world_size(self) -> int:
        return self.world

    def get_backend(self) -> str:
        return self.backend


class FakeTorch:
    def __init__(self, dist: FakeDistributed) -> None:
        self.distributed = dist


def test_no_meeting_alone_or_uninitialized() -> None:
    for dist in (FakeDistributed("gloo", 1), FakeDistributed("gloo", 2, initialized=False)):
        # the stand-in has no store: a meeting would fail, not return False before trying
        assert ranks.meet_before_refusing(FakeTorch(dist)) is False


MEET = """
import json, sys, time
import torch, torch.distributed as dist
from backend.entry import ranks
from backend.ports import any_free_port
rank, port, late = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
# no backend named, as accelerate makes the group of a trainer told it is not on the CPU
dist.init_process_group(init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
if rank == 0:
    time.sleep(late)
arrived = time.time()
met = ranks.meet_before_refusing(torch, seconds=60)
print(json.dumps({"rank": rank, "met": met, "arrived": arrived, "left": time.time(),
                  "backend": dist.get_backend()}))
"""


@pytest.mark.slow
def test_a_refusing_rank_waits_for_a_late_rank_on_the_groups_store() -> None:
    """Two real ranks in a group without a named backend (what the refusing trainer has: an
    earlier version met on "gloo" groups only, so these left at once): rank 1 refuses first and
    leaves only once rank 0 has arrived."""
    port = any_free_port()  # for rank 0's store
    procs = [
        subprocess.Popen([sys.executable, "-c", MEET, str(r), str(port), "1.5"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in (0, 1)
    ]  # fmt: skip
    out = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in out]
    first, second = (json.loads(o[0].strip().splitlines()[-1]) for o in out)
    assert first["backend"] == "undefined"  # the group the refusal really has
    assert first["met"] and second["met"]
    assert second["left"] >= first["arrived"]  # rank 1 waited for rank 0
