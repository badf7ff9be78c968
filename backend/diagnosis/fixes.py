"""What each failure means and which preset changes get past it.

Fixes are computed against the preset when one is given (concrete values, ordered by cost: the
first one changes the least about the training); without a preset they are advice only.
"""

from __future__ import annotations

import difflib
import re
import socket
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from backend.diagnosis.model import Fix, PresetChange
from backend.errors import BadInput

if TYPE_CHECKING:
    from backend.preset.schema import Preset

_EXPLAIN: dict[str, str] = {
    "cuda_oom": "A GPU ran out of memory: weights, gradients, optimizer state and activations of "
    "one step did not fit. Activations grow with per-device batch x sequence length.",
    "fsdp_save_oom": "Training finished (or reached a checkpoint) and FSDP gathered the full "
    "state dict on the GPU to save it; the gathered copy did not fit. torch 2.0.x clones it on "
    "the GPU even with offload_to_cpu (the seed patched _state_dict_utils.py with .cpu()).",
    "flash_attn_build": "pip compiled flash-attn (or another torch CUDA extension) from source and "
    "the build failed: no nvcc in a -runtime image, no torch inside pip's isolated build "
    "environment, too many parallel nvcc jobs for the RAM, or CUDA/torch versions that differ.",
    "flash_attn_runtime": "flash-attn is installed but cannot run here: it was built against "
    "another torch (undefined symbol), the GPU is older than Ampere (sm80), or CUDA is too old.",
    "nccl": "An NCCL collective failed or hung. This is usually a symptom: another rank died or "
    "stalled (OOM, a crash, a full /dev/shm), or the network between GPUs/nodes misbehaves.",
    "shm": "Shared memory (/dev/shm) is too small: docker gives containers 64 MB by default, and "
    "DataLoader workers and NCCL's intra-node transport need far more (bus error, SIGBUS, exit -7).",
    "port_in_use": "torchrun's rendezvous (TCPStore) could not bind its port: another run, a "
    "stale process or another service holds it.",
    "host_oom": "A process got SIGKILL (-9 / 137). Unless someone killed it, that is the kernel's "
    "OOM killer: host RAM ran out (each rank loads the model on CPU; CPU offload and "
    "DataLoader workers add more).",
    "docker_gpu": "Docker has no NVIDIA runtime to give GPUs to the container: the NVIDIA "
    "Container Toolkit is missing or not configured for this daemon.",
    "driver_mismatch": "The NVIDIA kernel driver and the user-space libraries differ (driver "
    "upgraded without reboot), or the driver is too old for the CUDA in the image.",
    "container_permission": "The host refused a docker run option: raising a resource limit "
    "(e.g. memlock) or granting capabilities/--privileged is not allowed here (rootless docker, "
    "a sandbox, or a restricted daemon).",
    "tokenization_mismatch": "FastChat computed a different token count when masking a "
    "conversation than when tokenizing it, and masked the WHOLE sample: it trains on nothing. "
    "When every sample mismatches the loss is 0. Cause: the tokenizer differs from what the "
    "vicuna template masking assumes (Llama-2/3 tokenizers, transformers >= 5 ignoring use_fast).",
    "disk_full": "A write failed because the disk (or a quota) is full; checkpoints of a 7B model "
    "with optimizer state take tens of GB each.",
    "hf_args": "The installed transformers does not accept a training argument in the command: "
    "the name changed between versions (evaluation_strategy -> eval_strategy, removed in 4.51; "
    "fsdp_transformer_layer_cls_to_wrap -> fsdp_config in 5.0).",
}

_RLIMITS = [
    "cpu",
    "fsize",
    "data",
    "stack",
    "core",
    "rss",
    "nproc",
    "nofile",
    "memlock",
    "as",
    "locks",
    "sigpending",
    "msgqueue",
    "nice",
    "rtprio",
    "rttime",
]  # Linux RLIMIT_* order
# (old flag, new flag, first transformers version with the new name, last accepting the old one)
_RENAMES = [("evaluation_strategy", "eval_strategy", "4.41.0", "4.50.3")]


def _gib(value: str, unit: str) -> float:
    return float(value) * {"KiB": 1 / 1048576, "MiB": 1 / 1024, "GiB": 1.0, "TiB": 1024.0}.get(
        unit, 1.0
    )


def explain(category: str, groups: dict[str, Any], count: int) -> str:
    text = _EXPLAIN.get(category, "")
    match = str(groups.get("match", ""))
    if category in ("cuda_oom", "fsdp_save_oom"):
        tried = re.search(r"Tried to allocate ([\d.]+) ([KMGT]iB)", match)
        total = re.search(r"([\d.]+) ([KMGT]iB) total capacity", match)
        if tried and total:
            text += (
                f" It asked for {_gib(*tried.groups()):.2f} GiB more on a "
                f"{_gib(*total.groups()):.1f} GiB GPU."
            )
    if category == "tokenization_mismatch":
        text += f" Seen {count} time(s)."
    if count > 1 and category not in ("tokenization_mismatch",):
        text += f" ({count} matching lines.)"
    return text


def free_port() -> int:
    """A port the kernel says is free now (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def _change(path: str, value: Any, reason: str) -> PresetChange:
    return PresetChange(path=path, value=value, reason=reason)


def _oom_fixes(preset: Preset | None, match: str) -> list[Fix]:
    fixes: list[Fix] = []
    if re.search(r"reserved (?:by PyTorch )?but unallocated|reserved memory is >>", match):
        unalloc = re.search(r"([\d.]+) ([KMGT]iB) is reserved by PyTorch but unallocated", match)
        if unalloc is None or _gib(*unalloc.groups()) > 0.5:
            env = dict(preset.launch.env) if preset else {}
            env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
            fixes.append(
                Fix(
                    "Let the allocator expand segments",
                    "free but fragmented memory becomes usable; nothing else changes",
                    [_change("launch.env", env, "allocator setting for fragmentation")]
                    if preset
                    else [],
                )
            )
    if preset is None:
        return fixes + [
            Fix(
                "Halve the per-device batch, double gradient accumulation",
                "same global batch and results, less activation memory, a little slower",
            ),
            Fix(
                "Turn on gradient checkpointing",
                "recomputes activations: ~30% slower, far less memory",
            ),
            Fix(
                "Offload FSDP parameters to CPU",
                "fsdp 'full_shard auto_wrap offload': slower, needs host RAM",
            ),
            Fix("Lower model_max_length", "shorter sequences: truncates long conversations"),
        ]
    t = preset.training
    batch, accum = t.per_device_train_batch_size, t.gradient_accumulation_steps
    if batch > 1:
        new_batch = next(d for d in range(batch // 2, 0, -1) if batch % d == 0)
        new_accum = accum * batch // new_batch
        fixes.append(
            Fix(
                f"per-device batch {batch} -> {new_batch}, accumulation {accum} -> {new_accum}",
                f"global batch stays {batch * accum} per GPU step set; activations shrink ~{batch // new_batch}x",
                [
                    _change(
                        "training.per_device_train_batch_size", new_batch, "less activation memory"
                    ),
                    _change(
                        "training.gradient_accumulation_steps", new_accum, "keeps the global batch"
                    ),
                ],
            )
        )
    if not t.gradient_checkpointing:
        fixes.append(
            Fix(
                "Turn on gradient checkpointing",
                "recomputes activations in backward: ~30% slower",
                [_change("training.gradient_checkpointing", True, "far less activation memory")],
            )
        )
    if "offload" not in t.fsdp.split():
        changes = [
            _change(
                "training.fsdp",
                "full_shard auto_wrap offload",
                "parameters and optimizer state live in host RAM between uses",
            )
        ]
        if not t.fsdp_transformer_layer_cls_to_wrap:
            changes.append(
                _change(
                    "training.fsdp_transformer_layer_cls_to_wrap",
                    "LlamaDecoderLayer",
                    "auto_wrap needs the layer class (Llama/Vicuna)",
                )
            )
        fixes.append(Fix("Offload FSDP to CPU", "slower steps and more host RAM", changes))
    if t.model_max_length > 512:
        new_len = max(512, t.model_max_length // 2)
        fixes.append(
            Fix(
                f"model_max_length {t.model_max_length} -> {new_len}",
                "activations scale with length; longer conversations get truncated",
                [_change("training.model_max_length", new_len, "shorter sequences")],
            )
        )
    return fixes


def _save_oom_fixes(preset: Preset | None) -> list[Fix]:
    fixes: list[Fix] = []
    if preset is None or preset.launch.entry != "trainwiz":
        fixes.append(
            Fix(
                "Save with the trainwiz entry",
                "it gathers the full state dict with offload_to_cpu and rank0_only",
                [_change("launch.entry", "trainwiz", "CPU-offloaded full-state-dict save")]
                if preset
                else [],
            )
        )
    if preset is None or not preset.environment.fsdp_state_dict_patch:
        fixes.append(
            Fix(
                "Patch torch 2.0.x's FSDP state-dict clone to CPU (the seed's patch)",
                "only for torch 2.0.x images: they clone on the GPU even with offload_to_cpu",
                [_change("environment.fsdp_state_dict_patch", True, "clone to CPU while saving")]
                if preset
                else [],
            )
        )
    return fixes


def _flash_fixes(preset: Preset | None, match: str, runtime: bool) -> list[Fix]:
    env = preset.environment if preset else None
    no_iso = Fix(
        "Build flash-attn with --no-build-isolation",
        "pip's isolated build environment has no torch ('No module named torch')",
        [_change("environment.flash_attn.no_build_isolation", True, "build sees the image's torch")]
        if env
        else [],
    )
    devel = None
    if env is None or "devel" not in env.image:
        new_image = (
            env.image.replace("runtime", "devel") if env and "runtime" in env.image else None
        )
        devel = Fix(
            "Use a -devel image (it has nvcc and CUDA headers)",
            "-runtime images have no compiler",
            [_change("environment.image", new_image, "same torch/CUDA, with nvcc")]
            if new_image
            else [],
        )
    jobs = Fix(
        "Limit parallel nvcc jobs (MAX_JOBS=2)",
        "each nvcc job can take several GB of RAM",
        [_change("environment.flash_attn.max_jobs", 2, "fewer compilers at once")] if env else [],
    )
    sdpa = Fix(
        "Train with PyTorch SDPA attention, without flash-attn",
        "no compilation; SDPA is fast on recent torch, a little more memory",
        [
            _change("training.attn_implementation", "sdpa", "no flash-attn needed"),
            _change("environment.flash_attn.install", "never", "skip the build"),
        ]
        if env
        else [],
    )
    rebuild = Fix(
        "Rebuild flash-attn against this image's torch",
        "the wheel was built for another torch ABI",
        [
            _change("environment.flash_attn.install", "always", "build here"),
            _change("environment.flash_attn.no_build_isolation", True, "use the image's torch"),
        ]
        if env
        else [],
    )
    if runtime:
        order = [rebuild, sdpa] if "undefined symbol" in match else [sdpa, rebuild]
    elif re.search(r"No module named", match):
        order = [no_iso, sdpa]
    elif re.search(r"nvcc|CUDA_HOME|No CUDA runtime", match):
        order = [devel, sdpa] if devel else [sdpa]
    elif "Killed" in match:
        order = [jobs, sdpa]
    else:
        order = [no_iso, devel, jobs, sdpa] if devel else [no_iso, jobs, sdpa]
    return [f for f in order if f is not None and (f.changes or preset is None)]


def _container_fixes(preset: Preset | None, match: str) -> list[Fix]:
    rlimit = re.search(r"rlimit type (\d+)", match)
    name = (
        _RLIMITS[int(rlimit.group(1))] if rlimit and int(rlimit.group(1)) < len(_RLIMITS) else None
    )
    fixes: list[Fix] = []
    if rlimit or "ulimit" in match:
        keep = (
            [u.model_dump() for u in preset.container.ulimits if u.name != name]
            if preset and name
            else None
        )
        changes = (
            [_change("container.ulimits", keep, f"drop --ulimit {name}")]
            if keep is not None
            else []
        )
        fixes.append(
            Fix(
                f"Drop the {name or 'raised'} ulimit",
                "this host does not allow raising it",
                changes,
            )
        )
    if re.search(r"(?i)caps|capabilit|privileged", match) or not fixes:
        changes = (
            [
                _change("container.privileged", False, "no extra capabilities"),
                _change("container.cap_add", [], "no extra capabilities"),
            ]
            if preset
            else []
        )
        fixes.append(
            Fix(
                "Run without --privileged / --cap-add",
                "the host refuses extra capabilities",
                changes,
            )
        )
    return fixes


def _hf_fixes(preset: Preset | None, groups: dict[str, Any]) -> list[Fix]:
    flags = " ".join(str(groups.get(k, "")) for k in ("args", "kw", "unrec"))
    fixes: list[Fix] = []
    for old, new, first_new, last_old in _RENAMES:
        if re.search(rf"\b{old}\b", flags):
            fixes.append(
                Fix(
                    f"Use --{new} (the installed transformers >= {first_new})",
                    f"--{old} was renamed; trainwiz writes the name of environment.transformers",
                    [
                        _change(
                            "environment.transformers", "4.57.6", f"flags named for >= {first_new}"
                        )
                    ]
                    if preset
                    else [],
                )
            )
        elif re.search(rf"\b{new}\b", flags):
            fixes.append(
                Fix(
                    f"Use --{old} (the installed transformers is older than {first_new})",
                    f"--{new} does not exist before {first_new}; set the version the image has",
                    [
                        _change(
                            "environment.transformers",
                            last_old if last_old < first_new else "4.40.2",
                            "flags named for the older version",
                        )
                    ]
                    if preset
                    else [],
                )
            )
    if not fixes:
        fixes.append(
            Fix(
                "Set environment.transformers to the version the image has",
                "trainwiz names flags for that version",
            )
        )
    return fixes


def fixes_for(category: str, groups: dict[str, Any], preset: Preset | None) -> list[Fix]:
    """Fixes for one finding, cheapest first."""
    match = str(groups.get("match", ""))
    if category == "cuda_oom":
        return _oom_fixes(preset, match)
    if category == "fsdp_save_oom":
        return _save_oom_fixes(preset) + _oom_fixes(preset, match)[-1:]
    if category in ("flash_attn_build", "flash_attn_runtime"):
        return _flash_fixes(preset, match, category == "flash_attn_runtime")
    if category == "port_in_use":
        port = free_port()
        return [
            Fix(
                f"Use free port {port} for the rendezvous",
                "the kernel reported it free just now",
                [_change("launch.master_port", port, "the old port is taken")] if preset else [],
            )
        ]
    if category in ("shm", "nccl"):
        fixes = []
        if preset is None or preset.container.ipc != "host":
            fixes.append(
                Fix(
                    "Share the host's IPC namespace (--ipc=host)",
                    "/dev/shm as large as the host's",
                    [_change("container.ipc", "host", "large /dev/shm")] if preset else [],
                )
            )
            fixes.append(
                Fix(
                    "Give the container a larger /dev/shm (--shm-size 16g)",
                    "when --ipc=host is not allowed",
                    [
                        _change("container.ipc", None, "use --shm-size instead"),
                        _change(
                            "container.shm_size", "16g", "room for NCCL and DataLoader workers"
                        ),
                    ]
                    if preset
                    else [],
                )
            )
        if category == "nccl":
            env = dict(preset.launch.env) if preset else {}
            env["NCCL_DEBUG"] = "INFO"
            fixes.append(
                Fix(
                    "Rerun with NCCL_DEBUG=INFO",
                    "NCCL then prints the failing call",
                    [_change("launch.env", env, "NCCL diagnostics")] if preset else [],
                )
            )
            if "timeout" in match and preset is not None:
                fixes.append(
                    Fix(
                        "Raise the collective timeout",
                        "slow saves or evaluation on one rank can exceed it",
                        [
                            _change(
                                "training.ddp_timeout",
                                preset.training.ddp_timeout * 2,
                                "longer timeout",
                            )
                        ],
                    )
                )
        return fixes
    if category == "host_oom":
        fixes = [Fix("Check the kernel log", "`dmesg -T | grep -i oom` names the killed process")]
        if preset is not None:
            if not preset.training.lazy_preprocess:
                fixes.append(
                    Fix(
                        "Tokenize lazily",
                        "the whole dataset is not held tokenized in RAM per rank",
                        [_change("training.lazy_preprocess", True, "less host RAM")],
                    )
                )
            if "offload" in preset.training.fsdp.split():
                fsdp = " ".join(w for w in preset.training.fsdp.split() if w != "offload")
                fixes.append(
                    Fix(
                        "Stop offloading to CPU",
                        "offload keeps parameters and optimizer in host RAM",
                        [_change("training.fsdp", fsdp, "less host RAM, more GPU memory")],
                    )
                )
        return fixes
    if category == "docker_gpu":
        return [
            Fix(
                "Install and configure the NVIDIA Container Toolkit",
                "`sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker`",
            ),
            Fix(
                "Run on the host instead of in docker",
                "the host runner needs no container runtime",
                [_change("launch.runner", "host", "no docker GPU runtime needed")]
                if preset
                else [],
            ),
        ]
    if category == "driver_mismatch":
        return [
            Fix(
                "Reboot (or reload the nvidia kernel module)",
                "after a driver upgrade the loaded module is still the old one",
            ),
            Fix(
                "Pick an image whose CUDA the driver supports",
                "`nvidia-smi` shows the highest CUDA it supports",
            ),
        ]
    if category == "container_permission":
        return _container_fixes(preset, match)
    if category == "disk_full":
        fixes = [
            Fix(
                "Free space or move output_dir to a larger disk",
                "`df -h` shows which mount is full",
            )
        ]
        if preset is not None and (preset.training.save_total_limit or 99) > 1:
            fixes.insert(
                0,
                Fix(
                    "Keep only the newest checkpoint",
                    "older checkpoints are deleted as new ones land",
                    [_change("training.save_total_limit", 1, "less disk")],
                ),
            )
        return fixes
    if category == "hf_args":
        return _hf_fixes(preset, groups)
    if category == "tokenization_mismatch":
        fixes = [
            Fix(
                "Check the data against the vicuna template",
                "`trainwiz data check` shows mismatching samples",
            )
        ]
        if preset is not None and preset.environment.transformers.split(".")[0] >= "5":
            fixes.insert(
                0,
                Fix(
                    "Pin transformers 4.x",
                    "5.x ignores slow tokenizers FastChat's masking relies on",
                    [_change("environment.transformers", "4.57.6", "slow-tokenizer masking")],
                ),
            )
        return fixes
    return []


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    node = data
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[keys[-1]] = value


def apply_fixes(preset: Preset, fix: Fix) -> Preset:
    """A new preset with the fix's changes, validated like a loaded one."""
    from backend.preset.schema import Preset as PresetModel

    data = preset.model_dump(mode="json", exclude_unset=True)
    for change in fix.changes:
        _set_path(data, change.path, change.value)
    try:
        return PresetModel.model_validate(data)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise BadInput(
            [f"fix '{fix.title}' makes an invalid preset: {p}" for p in problems]
        ) from exc


def preset_diff(old: Preset, new: Preset) -> list[str]:
    """Unified diff of the two presets' YAML, for review before applying."""
    from backend.preset.loader import preset_to_yaml

    return list(
        difflib.unified_diff(
            preset_to_yaml(old).splitlines(),
            preset_to_yaml(new).splitlines(),
            "preset.yaml",
            "preset.yaml (fixed)",
            lineterm="",
        )
    )
