"""Write a real FSDP SHARDED_STATE_DICT checkpoint on CPU (run under torchrun, gloo, 2 ranks).

Why not the Trainer: with transformers 4.57.6 + accelerate 1.15 + torch 2.13 (CPU build),
``--fsdp "full_shard auto_wrap"`` on CPU does not shard. Without ``use_cpu`` accelerate's
FullyShardedDataParallelPlugin needs an accelerator device (``sync_module_states``) and the Trainer
refuses ("Using fsdp only works in distributed training"); with ``ACCELERATE_USE_CPU`` the state is
MULTI_CPU, which accelerate never turns into DistributedType.FSDP (only the accelerator device
types are), so the Trainer silently trains with DDP and saves full weights (checked by hand: the
checkpoint holds model.safetensors, no ``pytorch_model_fsdp_0``).

So this script does what the Trainer's ``_save_checkpoint`` does under FSDP, with the same calls:
torch's own FullyShardedDataParallel (FULL_SHARD, transformer-layer auto wrap, use_orig_params, as
the Trainer configures it) over a real tiny trained model on 2 gloo ranks, two real AdamW steps,
then accelerate's ``save_fsdp_model`` / ``save_fsdp_optimizer`` with a SHARDED_STATE_DICT plugin
(DCP: ``pytorch_model_fsdp_0/``, ``optimizer_0/``), ``trainer_state.json`` and trainwiz's marker
(``backend.entry.checkpoints.write_marker``). The same parameters, gathered with FULL_STATE_DICT,
are saved with ``save_pretrained`` into ``--reference``: what a consolidation must give back.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
import transformers
from accelerate import Accelerator
from accelerate.utils import FullyShardedDataParallelPlugin
from accelerate.utils.fsdp_utils import save_fsdp_model, save_fsdp_optimizer
from torch.distributed.fsdp import FullStateDictConfig, ShardingStrategy, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

from backend.entry.checkpoints import write_marker
from backend.entry.ending import finish


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="the trained model to shard")
    parser.add_argument("--checkpoint", required=True, help="output_dir/checkpoint-N to write")
    parser.add_argument("--reference", required=True, help="full weights of the same parameters")
    parser.add_argument("--step", type=int, required=True)
    args = parser.parse_args()

    accelerator = Accelerator(cpu=True)  # initialises the gloo process group (torchrun's env)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    wrap = functools.partial(
        transformer_auto_wrap_policy, transformer_layer_cls={LlamaDecoderLayer}
    )
    fsdp = FSDP(
        model,
        auto_wrap_policy=wrap,
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        use_orig_params=True,
        device_id=torch.device("cpu"),
    )
    optimizer = torch.optim.AdamW(fsdp.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(100 + rank)
    for _ in range(2):  # real updates: the shards differ from the model that was loaded
        ids = torch.randint(3, model.config.vocab_size, (2, 32), generator=generator)
        loss = fsdp(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    plugin = FullyShardedDataParallelPlugin(
        state_dict_type="SHARDED_STATE_DICT", sync_module_states=False, use_orig_params=True
    )
    out = Path(args.checkpoint)
    save_fsdp_model(plugin, accelerator, fsdp, str(out))
    save_fsdp_optimizer(plugin, accelerator, optimizer, fsdp, str(out))

    gather = FullStateDictConfig(offload_to_cpu=False, rank0_only=False)
    with FSDP.state_dict_type(fsdp, StateDictType.FULL_STATE_DICT, gather):
        full = fsdp.state_dict()
    dist.barrier()
    if rank == 0:
        reference = transformers.AutoModelForCausalLM.from_pretrained(args.model)
        reference.load_state_dict(full)
        reference.save_pretrained(args.reference, safe_serialization=True)
        for name in os.listdir(args.model):
            if name.startswith("tokenizer") or name == "special_tokens_map.json":
                shutil.copy(Path(args.model) / name, Path(args.reference) / name)
        state = {"global_step": args.step, "max_steps": args.step, "log_history": []}
        (out / "trainer_state.json").write_text(json.dumps(state))
        record = {"step": args.step, "world_size": world, "state_dict_type": "SHARDED_STATE_DICT"}
        write_marker(out, record)
    dist.barrier()


if __name__ == "__main__":
    # The entry's own ending (backend/entry/ending.py): the group destroyed, its gloo threads
    # joined once main's frame (FSDP, its hooks, the optimizer) is gone, no interpreter teardown.
    finish(main, torch, int(os.environ.get("RANK", "0")))
