"""What each failure means and which preset changes get past it.

Fixes are computed against the preset when one is given (concrete values, ordered by cost: the
first one changes the least about the training); without a preset they are advice only.
"""

from __future__ import annotations

import re
import socket
from typing import TYPE_CHECKING, Any

from backend.diagnosis.explain import gib_from_text
from backend.diagnosis.fixes_cluster import cluster_fixes
from backend.diagnosis.fixes_env import container_fixes, flash_fixes, hf_fixes
from backend.diagnosis.fixes_hw import hw_fixes
from backend.diagnosis.fixes_methods import method_fixes
from backend.diagnosis.fixes_train import arch_fixes, hub_fixes, nan_fixes, template_fixes
from backend.diagnosis.model import Fix, PresetChange
from backend.i18n import _

if TYPE_CHECKING:
    from backend.preset.schema import Preset


def free_port() -> int:
    """A port the kernel says is free now (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def _change(path: str, value: Any, reason: str) -> PresetChange:
    return PresetChange(path=path, value=value, reason=reason)


def _env_changes(preset: Preset | None, key: str, value: str, reason: str) -> list[PresetChange]:
    """``launch.env`` with one variable set, as a preset change (advice only without a preset)."""
    if preset is None:
        return []
    return [_change("launch.env", {**preset.launch.env, key: value}, reason)]


def _unallocated_gib(match: str) -> float | None:
    """Memory PyTorch holds but has not handed out, from either message format."""
    new = re.search(r"([\d.]+) ([KMGT]iB) is reserved by PyTorch but unallocated", match)
    if new:
        return gib_from_text(*new.groups())
    alloc = re.search(r"([\d.]+) ([KMGT]iB) already allocated", match)
    reserved = re.search(r"([\d.]+) ([KMGT]iB) reserved in total by PyTorch", match)
    if alloc and reserved:
        return gib_from_text(*reserved.groups()) - gib_from_text(*alloc.groups())
    return None


def _oom_fixes(preset: Preset | None, match: str) -> list[Fix]:
    fixes: list[Fix] = []
    unalloc = _unallocated_gib(match)
    tried = re.search(r"Tried to allocate ([\d.]+) ([KMGT]iB)", match)
    if unalloc is not None and tried is not None and unalloc >= gib_from_text(*tried.groups()):
        # Reserved-but-free memory would have covered the request: fragmentation.
        fixes.append(
            Fix(
                _("Let the allocator expand segments"),
                _("free but fragmented memory becomes usable; nothing else changes"),
                _env_changes(
                    preset,
                    "PYTORCH_CUDA_ALLOC_CONF",
                    "expandable_segments:True",
                    _("allocator setting for fragmentation"),
                ),
            )
        )
    if preset is None:
        return [
            *fixes,
            Fix(
                _("Halve the per-device batch, double gradient accumulation"),
                _("same global batch and results, less activation memory, a little slower"),
            ),
            Fix(
                _("Turn on gradient checkpointing"),
                _("recomputes activations: ~30% slower, far less memory"),
            ),
            Fix(
                _("Offload FSDP parameters to CPU"),
                _("fsdp 'full_shard auto_wrap offload': slower, needs host RAM"),
            ),
            Fix(_("Lower model_max_length"), _("shorter sequences: truncates long conversations")),
        ]
    t = preset.training
    batch, accum = t.per_device_train_batch_size, t.gradient_accumulation_steps
    if batch > 1:
        new_batch = next(d for d in range(batch // 2, 0, -1) if batch % d == 0)
        new_accum = accum * batch // new_batch
        fixes.append(
            Fix(
                _(
                    "per-device batch {batch} -> {new_batch}, accumulation {accum} -> {new_accum}"
                ).format(batch=batch, new_batch=new_batch, accum=accum, new_accum=new_accum),
                _(
                    "the global batch stays {global_batch} sequences; activations shrink ~{factor}x"
                ).format(
                    global_batch=batch
                    * accum
                    * preset.launch.nproc_per_node
                    * preset.launch.nnodes,
                    factor=batch // new_batch,
                ),
                [
                    _change(
                        "training.per_device_train_batch_size",
                        new_batch,
                        _("less activation memory"),
                    ),
                    _change(
                        "training.gradient_accumulation_steps",
                        new_accum,
                        _("keeps the global batch"),
                    ),
                ],
            )
        )
    if not t.gradient_checkpointing:
        fixes.append(
            Fix(
                _("Turn on gradient checkpointing"),
                _("recomputes activations in backward: ~30% slower"),
                [_change("training.gradient_checkpointing", True, _("far less activation memory"))],
            )
        )
    if "offload" not in t.fsdp.split():
        changes = [
            _change(
                "training.fsdp",
                "full_shard auto_wrap offload",
                _("parameters and optimizer state live in host RAM between uses"),
            )
        ]
        # No layer class needed: auto_wrap without one wraps the model's own _no_split_modules
        # (accelerate), i.e. whatever decoder layer this family has, never a Llama name.
        fixes.append(Fix(_("Offload FSDP to CPU"), _("slower steps and more host RAM"), changes))
    if t.model_max_length > 512:
        new_len = max(512, t.model_max_length // 2)
        fixes.append(
            Fix(
                _("model_max_length {old} -> {new}").format(old=t.model_max_length, new=new_len),
                _("activations scale with length; longer conversations get truncated"),
                [_change("training.model_max_length", new_len, _("shorter sequences"))],
            )
        )
    return fixes


def _save_oom_fixes(preset: Preset | None) -> list[Fix]:
    fixes: list[Fix] = []
    if preset is None or preset.launch.entry != "trainwiz":
        fixes.append(
            Fix(
                _("Save with the trainwiz entry"),
                _("it gathers the full state dict with offload_to_cpu and rank0_only"),
                [_change("launch.entry", "trainwiz", _("CPU-offloaded full-state-dict save"))]
                if preset
                else [],
            )
        )
    if preset is None or not preset.environment.fsdp_state_dict_patch:
        fixes.append(
            Fix(
                _("Patch torch 2.0.x's FSDP state-dict clone to CPU (the seed's patch)"),
                _("only for torch 2.0.x images: they clone on the GPU even with offload_to_cpu"),
                [_change("environment.fsdp_state_dict_patch", True, _("clone to CPU while saving"))]
                if preset
                else [],
            )
        )
    return fixes


def _current(preset: Preset, path: str) -> Any:
    node: Any = preset.model_dump(mode="json")
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return _MISSING
        node = node[key]
    return node


_MISSING = object()


def fixes_for(category: str, groups: dict[str, Any], preset: Preset | None) -> list[Fix]:
    """Fixes for one finding, cheapest first; with a preset, changes that change nothing are
    dropped, and so is a fix left with nothing to change."""
    fixes = _fixes_for(category, groups, preset)
    if preset is None:
        return fixes
    kept = []
    for fix in fixes:
        if not fix.changes:
            kept.append(fix)
            continue
        fix.changes = [c for c in fix.changes if _current(preset, c.path) != c.value]
        if fix.changes:
            kept.append(fix)
    return kept


def _fixes_for(category: str, groups: dict[str, Any], preset: Preset | None) -> list[Fix]:
    match = str(groups.get("match", ""))
    every = str(groups.get("all", match))
    if category == "cuda_oom":
        return _oom_fixes(preset, match)
    if category == "fsdp_save_oom":
        return _save_oom_fixes(preset) + _oom_fixes(preset, match)[-1:]
    if category in ("flash_attn_build", "flash_attn_runtime"):
        return flash_fixes(preset, match, category == "flash_attn_runtime")
    methods = method_fixes(category, preset, every)  # bitsandbytes, DeepSpeed ops (docs/lora.md)
    if methods is not None:
        return methods
    cluster = cluster_fixes(category, preset, every, groups)  # Slurm, nodes, DeepSpeed config…
    if cluster is not None:
        return cluster
    hardware = hw_fixes(category, preset, every, groups)  # GPU, kernels, AMP, storage, network
    if hardware is not None:
        return hardware
    if category == "port_in_use":
        port = free_port()
        return [
            Fix(
                _("Use free port {port} for the rendezvous").format(port=port),
                _("the kernel reported it free just now"),
                [_change("launch.master_port", port, _("the old port is taken"))] if preset else [],
            )
        ]
    if category == "rendezvous_timeout":
        wait = preset.launch.rdzv_timeout * 2 if preset else 1200
        return [
            Fix(
                _("Check the nodes from node 0"),
                _("`trainwiz check --preset PRESET`: ssh to each node, the rendezvous port, GPUs"),
            ),
            Fix(
                _("Give slow nodes {seconds} s to join").format(seconds=wait),
                _("when a node's agent starts late (a busy login, a slow file system)"),
                [_change("launch.rdzv_timeout", wait, _("more time to join"))] if preset else [],
            ),
        ]
    if category in ("shm", "nccl"):
        fixes = []
        if preset is None or preset.container.ipc != "host":
            fixes.append(
                Fix(
                    _("Share the host's IPC namespace (--ipc=host)"),
                    _("/dev/shm as large as the host's"),
                    [_change("container.ipc", "host", _("large /dev/shm"))] if preset else [],
                )
            )
            fixes.append(
                Fix(
                    _("Give the container a larger /dev/shm (--shm-size 16g)"),
                    _("when --ipc=host is not allowed"),
                    [
                        _change("container.ipc", None, _("use --shm-size instead")),
                        _change(
                            "container.shm_size", "16g", _("room for NCCL and DataLoader workers")
                        ),
                    ]
                    if preset
                    else [],
                )
            )
        if category == "shm":
            fixes.append(
                Fix(
                    _("Check the host's /dev/shm"),
                    _("`df -h /dev/shm`: with --ipc=host or the host runner it is the host's size"),
                )
            )
            if preset is not None and preset.training.dataloader_num_workers > 0:
                fixes.append(
                    Fix(
                        _("Load data in the main process"),
                        _("DataLoader workers pass batches through /dev/shm"),
                        [
                            _change(
                                "training.dataloader_num_workers", 0, _("no shared-memory batches")
                            )
                        ],
                    )
                )
        if category == "nccl" and re.search(r"NET/IB\S* ?: Got completion|ibv_", every):
            fixes.insert(
                0,
                Fix(
                    _("Run NCCL over TCP sockets while the InfiniBand link is checked"),
                    _("slower between nodes, but no IB completion errors; `ibstat` on each node"),
                    _env_changes(preset, "NCCL_IB_DISABLE", "1", _("InfiniBand failed")),
                ),
            )
        if category == "nccl":
            fixes.append(
                Fix(
                    _("Rerun with NCCL_DEBUG=INFO"),
                    _("NCCL then prints the failing call"),
                    _env_changes(preset, "NCCL_DEBUG", "INFO", _("NCCL diagnostics")),
                )
            )
            if "timeout" in match and preset is not None:
                fixes.append(
                    Fix(
                        _("Raise the collective timeout"),
                        _("slow saves or evaluation on one rank can exceed it"),
                        [
                            _change(
                                "training.ddp_timeout",
                                preset.training.ddp_timeout * 2,
                                _("longer timeout"),
                            )
                        ],
                    )
                )
        return fixes
    if category == "host_oom":
        fixes = [
            Fix(_("Check the kernel log"), _("`dmesg -T | grep -i oom` names the killed process"))
        ]
        if preset is not None:
            if not preset.training.lazy_preprocess:
                fixes.append(
                    Fix(
                        _("Tokenize lazily"),
                        _("the whole dataset is not held tokenized in RAM per rank"),
                        [_change("training.lazy_preprocess", True, _("less host RAM"))],
                    )
                )
            if "offload" in preset.training.fsdp.split():
                fsdp = " ".join(w for w in preset.training.fsdp.split() if w != "offload")
                fixes.append(
                    Fix(
                        _("Stop offloading to CPU"),
                        _("offload keeps parameters and optimizer in host RAM"),
                        [_change("training.fsdp", fsdp, _("less host RAM, more GPU memory"))],
                    )
                )
        return fixes
    if category == "docker_gpu":
        return [
            Fix(
                _("Install and configure the NVIDIA Container Toolkit"),
                _(
                    "`sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker`"
                ),
            ),
            Fix(
                _("Run on the host instead of in docker"),
                _("the host runner needs no container runtime"),
                [_change("launch.runner", "host", _("no docker GPU runtime needed"))]
                if preset
                else [],
            ),
        ]
    if category == "driver_mismatch":
        return [
            Fix(
                _("Reboot (or reload the nvidia kernel module)"),
                _("after a driver upgrade the loaded module is still the old one"),
            ),
            Fix(
                _("Pick an image whose CUDA the driver supports"),
                _("`nvidia-smi` shows the highest CUDA it supports"),
            ),
        ]
    if category == "container_permission":
        return container_fixes(preset, every, groups.get("path") or groups.get("path2"))
    if category == "disk_full":
        fixes = [
            Fix(
                _("Free space or move output_dir to a larger disk"),
                _("`df -h` shows which mount is full"),
            )
        ]
        if preset is not None and (preset.training.save_total_limit or 99) > 1:
            fixes.insert(
                0,
                Fix(
                    _("Keep only the newest checkpoint"),
                    _("older checkpoints are deleted as new ones land"),
                    [_change("training.save_total_limit", 1, _("less disk"))],
                ),
            )
        return fixes
    if category == "hf_args":
        return hf_fixes(preset, groups)
    if category == "hub_auth":
        return hub_fixes(preset, every)
    if category == "cuda_arch":
        return arch_fixes(preset, every)
    if category == "loss_nan":
        return nan_fixes(preset, every)
    if category == "chat_template_mask":
        return template_fixes(preset, category)
    if category == "tokenization_mismatch":
        fixes = [
            *template_fixes(preset, category),
            Fix(
                _("Check the data against the vicuna template"),
                _("`trainwiz data check` shows mismatching samples"),
            ),
        ]
        if preset is not None and preset.environment.transformers.split(".")[0] >= "5":
            fixes.insert(
                0,
                Fix(
                    _("Pin transformers 4.x"),
                    _("5.x ignores slow tokenizers FastChat's masking relies on"),
                    [_change("environment.transformers", "4.57.6", _("slow-tokenizer masking"))],
                ),
            )
        return fixes
    return []
