"""The FSDP resume divergence (docs/checkpoints.md), reproduced on the CPU: a real FSDP (v1)
model on one gloo rank, its AdamW saved and loaded by accelerate's own ``save_fsdp_optimizer`` /
``load_fsdp_optimizer`` (SHARDED_STATE_DICT, through torch.distributed.checkpoint), exactly as
the Trainer calls them on resume.

accelerate's FullyShardedDataParallelPlugin refuses to be built without a GPU, so the plugin and
accelerator arguments are stand-ins carrying only the fields those two functions read (named
``plugin_stand_in``/``accelerator_stand_in``); the model, optimizer, checkpoint files and load are
real. On the H200 the same divergence was measured through `trainwiz resume` (docs/checkpoints.md).
"""

from __future__ import annotations

import copy
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest

from backend.entry import checkpoints
from tests.training_side import on_first_use

if TYPE_CHECKING:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

torch = on_first_use("torch")
dist = on_first_use("torch.distributed")
fsdp = on_first_use("torch.distributed.fsdp")
fsdp_utils = on_first_use("accelerate.utils.fsdp_utils")

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


@pytest.fixture(scope="module")
def gloo_rank():
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch without gloo")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    from accelerate import PartialState

    PartialState()  # accelerate's logging, used by the two functions, wants it
    yield
    dist.destroy_process_group()


def plugin_stand_in() -> SimpleNamespace:
    return SimpleNamespace(
        fsdp_version=1,
        state_dict_type=fsdp.StateDictType.SHARDED_STATE_DICT,
        state_dict_config=fsdp.ShardedStateDictConfig(offload_to_cpu=True),
        optim_state_dict_config=fsdp.ShardedOptimStateDictConfig(offload_to_cpu=True),
    )


def accelerator_stand_in() -> SimpleNamespace:
    return SimpleNamespace(wait_for_everyone=lambda: None, process_index=0)


def batches() -> list:
    return [torch.randn(8, 16, generator=torch.Generator().manual_seed(i)) for i in range(6)]


def wrap(module: torch.nn.Module) -> tuple[FSDP, torch.optim.Optimizer]:
    model = fsdp.FullyShardedDataParallel(
        module, device_id=torch.device("cpu"), use_orig_params=True
    )
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)


def train(model: FSDP, optim: torch.optim.Optimizer, batches: list) -> None:
    for x in batches:
        optim.zero_grad(set_to_none=True)
        (model(x) ** 2).mean().backward()
        optim.step()


def resumed(saved: dict, ckpt: Path, *, prime: bool) -> tuple[FSDP, torch.optim.Optimizer]:
    """What a resumed attempt has: the checkpoint's weights, a fresh optimizer, the load."""
    module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    module.load_state_dict(saved)
    model, optim = wrap(module)
    if prime:
        assert checkpoints.prime_optimizer_state(optim, torch) is True
    fsdp_utils.load_fsdp_optimizer(
        plugin_stand_in(), accelerator_stand_in(), optim, model, str(ckpt)
    )
    return model, optim


def flat(model: FSDP) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_a_resumed_fsdp_optimizer_continues_exactly(gloo_rank, tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    model, optim = wrap(module)
    train(model, optim, batches()[:3])  # steps 1-3, then the checkpoint
    saved = copy.deepcopy(module.state_dict())
    fsdp_utils.save_fsdp_optimizer(
        plugin_stand_in(), accelerator_stand_in(), optim, model, str(tmp_path)
    )
    assert (tmp_path / "optimizer_0").is_dir() and checkpoints.has_fsdp_optimizer(tmp_path)
    assert not checkpoints.has_fsdp_optimizer(tmp_path / "optimizer_0")
    train(model, optim, batches()[3:])  # the uninterrupted run: steps 4-6
    whole = flat(model)
    whole_steps = {float(s["step"]) for s in optim.state.values()}

    # Old code: the fresh optimizer's empty state is the load's template, so nothing comes back.
    lost_model, lost_optim = resumed(saved, tmp_path, prime=False)
    assert not lost_optim.state  # Adam's moments and step are gone: the divergence's mechanism
    train(lost_model, lost_optim, batches()[3:])
    assert float((flat(lost_model) - whole).abs().max()) > 1e-4  # and the run diverges

    # The fix: prime the state (weights untouched), then the same load restores it.
    model2, optim2 = resumed(saved, tmp_path, prime=True)
    assert torch.equal(flat(model2), torch.cat([t.reshape(-1) for t in saved.values()]))
    assert {float(s["step"]) for s in optim2.state.values()} == {3.0}
    train(model2, optim2, batches()[3:])
    assert {float(s["step"]) for s in optim2.state.values()} == whole_steps == {6.0}
    assert float((flat(model2) - whole).abs().max()) <= 1e-6


def test_priming_leaves_weights_and_a_stepped_optimizer_alone() -> None:
    torch.manual_seed(1)
    layer = torch.nn.Linear(4, 4)
    optim = torch.optim.AdamW(layer.parameters(), lr=0.5, weight_decay=0.5)
    before = [p.detach().clone() for p in layer.parameters()]
    assert checkpoints.prime_optimizer_state(optim, torch) is True
    assert all(torch.equal(a, b) for a, b in zip(before, layer.parameters()))
    assert all(p.grad is None for p in layer.parameters())
    assert optim.param_groups[0]["lr"] == 0.5  # restored for the load/scheduler
    assert checkpoints.prime_optimizer_state(optim, torch) is False  # state exists: no-op
