"""A 2-rank gloo job (run under torchrun) that ends through the entry's ``ending.finish``.

``--mode``: ``ok`` (an allreduce, then return), ``ddp`` (a DistributedDataParallel step, then
``destroy_process_group`` as the old end did: DDP's C++ reducer keeps the group, and with it its
gloo threads, alive after the destroy and after a collection - measured here, torch 2.13),
``fail`` (an exception after the allreduce), ``exit3`` (SystemExit(3), as the loss guard),
``stop`` (SIGTERM after the allreduce, as a stop). Each rank prints the collective threads it
runs after its own destroy (``THREADS rank R: ...``), so the test sees what ``finish`` met.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal

import torch
import torch.distributed as dist

from backend.entry.ending import collective_threads, finish, on_sigterm


def main(mode: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if mode == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
        model(torch.randn(4, 8)).sum().backward()  # a real allreduce through the reducer
        del model
        dist.destroy_process_group()  # what the old end did, and all it did
        gc.collect()
        print(f"THREADS rank {rank} after destroy: {collective_threads()}", flush=True)
        return
    total = torch.ones(4)
    dist.all_reduce(total)
    assert total.tolist() == [2.0] * 4
    if mode == "fail":
        raise ValueError("a failure after training")
    if mode == "exit3":
        raise SystemExit(3)
    if mode == "stop":
        os.kill(os.getpid(), signal.SIGTERM)
        dist.barrier()  # never reached: the handler raises first


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", required=True)
    args = parser.parse_args()
    on_sigterm()
    finish(lambda: main(args.mode), torch, int(os.environ.get("RANK", "0")))
