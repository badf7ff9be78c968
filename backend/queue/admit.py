"""When a queued item may start: its GPUs are free, or (on the CPU) a slot of ``max_parallel``.

A GPU is free for an item when no other training process is on it (NVML's compute processes,
or more memory in use than a driver holds when the process is in another container and NVML
cannot name it), no other queue item was started on it (its CUDA context may not exist yet),
and it has the memory the item's plan predicts per GPU. ``--share`` is the user saying two runs
may use one GPU: such an item ignores other processes and other sharing items, keeping only the
memory rule; a GPU given to an item that did not say ``--share`` is never shared.

An item whose preset runs through Slurm (``launch.scheduler: slurm``) meets neither rule: it is
handed to sbatch at once (``decide_slurm``), and Slurm queues it and assigns its nodes and GPUs;
nor does it hold a CPU slot while it runs (its training is on Slurm's nodes, not in this
machine's share of runs).

Pure functions over NVML's snapshot (``backend.nvml.snapshot``) and the items, so the rule is
tested without a GPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from backend import units
from backend.i18n import _
from backend.queue.db import Item

HIDDEN_USE = 2 << 30  # memory in use with no visible process: another namespace's job


@dataclass(frozen=True)
class Decision:
    """``gpus``: what to start the item on ([] on the CPU); None with ``why`` it waits."""

    gpus: list[int] | None
    why: str = ""

    @property
    def start(self) -> bool:
        return self.gpus is not None


def gpu_problem(gpu: dict[str, Any], item: Item, exclusive: set[int], shared: set[int]) -> str:
    """Why ``gpu`` cannot take ``item`` now ("" when it can)."""
    index = gpu["index"]
    free = int(gpu["memory_total"]) - int(gpu["memory_used"])
    if item.need_bytes is not None and free < item.need_bytes:
        return _("GPU {index} has {free} GiB free, the plan needs {need} GiB").format(
            index=index, free=units.gib(free, 1), need=units.gib(item.need_bytes, 1)
        )
    if index in exclusive:
        return _("GPU {index} runs another queue item").format(index=index)
    if item.share:
        return ""
    if index in shared:
        return _("GPU {index} runs a queue item started with --share").format(index=index)
    procs = gpu.get("processes") or []
    if procs:
        first = procs[0]
        return _("GPU {index} is busy: pid {pid} {owner}").format(
            index=index, pid=first.get("pid"), owner=first.get("owner", "")
        )
    if int(gpu["memory_used"]) > HIDDEN_USE:
        return _("GPU {index} has {used} GiB in use by a process not visible here").format(
            index=index, used=units.gib(int(gpu["memory_used"]), 1)
        )
    return ""


def decide_gpus(item: Item, snapshot: dict[str, Any], active: Iterable[Item]) -> Decision:
    """The GPUs ``item`` starts on now: the ones it named when all are free, else the first
    ``ngpus`` free ones; None with the first reason it waits."""
    if snapshot.get("error"):
        return Decision(None, _("NVML: {error}").format(error=snapshot["error"]))
    exclusive: set[int] = set()
    shared: set[int] = set()
    for other in active:
        for index in other.assigned or []:
            (shared if other.share else exclusive).add(index)
    gpus = {int(g["index"]): g for g in snapshot.get("gpus", [])}
    wanted = item.gpus if item.gpus is not None else sorted(gpus)
    missing = [i for i in wanted if i not in gpus]
    if missing:
        return Decision(
            None,
            _("GPU {index} is not on this machine ({count} GPUs seen)").format(
                index=missing[0], count=len(gpus)
            ),
        )
    picked, first_problem = [], ""
    for index in wanted:
        problem = gpu_problem(gpus[index], item, exclusive, shared)
        if problem:
            if item.gpus is not None:
                return Decision(None, problem)
            first_problem = first_problem or problem
            continue
        picked.append(index)
        if len(picked) == item.ngpus:
            return Decision(picked)
    return Decision(
        None,
        first_problem
        or _("{need} GPUs needed, {have} on this machine").format(need=item.ngpus, have=len(gpus)),
    )


def decide_slurm() -> Decision:
    """A Slurm item starts now: waiting here for free GPUs or a CPU slot would only hide it
    from Slurm's own queue (its priority, backfill, ``squeue``), which decides when it runs."""
    return Decision([])


def decide_cpu(active: Iterable[Item], limit: int) -> Decision:
    """A CPU item starts while fewer than ``limit`` CPU items run here (Slurm items run on
    Slurm's nodes and take no slot)."""
    running = sum(1 for o in active if o.device != "cuda" and o.scheduler != "slurm")
    if running >= limit:
        return Decision(
            None,
            _("{running} of --max-parallel {limit} CPU runs are running").format(
                running=running, limit=limit
            ),
        )
    return Decision([])
