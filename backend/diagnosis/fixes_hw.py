"""Fixes for GPU hardware errors, CUDA kernel faults, fp16 AMP on fp16 weights, file-system
errors and unreachable hosts.

Same conventions as fixes.py: cheapest first; concrete preset changes only when a preset is
given and the preset holds the value to change (an environment variable for the diagnosis run,
the precision, the output folder, the mirrors); advice where the fix lies outside the preset (a
GPU to reset, a node to drain, a firewall, a mount).
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING, Any

from backend.diagnosis.explain_hw import mentions_nvlink
from backend.diagnosis.model import Fix, PresetChange
from backend.diagnosis.signatures_hw import network_target
from backend.i18n import _

if TYPE_CHECKING:
    from backend.preset.schema import Preset

# Hosts a run downloads from: the Hub (and its CDN), PyPI, PyTorch's index, Docker Hub.
_DOWNLOAD_HOSTS = re.compile(
    r"(?:^|\.)(?:huggingface\.co|hf\.co|hf-mirror\.com|pypi\.org|pythonhosted\.org"
    r"|download\.pytorch\.org|docker\.io|docker\.com|modelscope\.cn)$"
)


def _change(path: str, value: Any, reason: str) -> PresetChange:
    return PresetChange(path=path, value=value, reason=reason)


def _env(preset: Preset | None, key: str, value: str, reason: str) -> list[PresetChange]:
    """``launch.env`` with one variable set (as fixes.py's): advice only without a preset."""
    if preset is None:
        return []
    return [_change("launch.env", {**preset.launch.env, key: value}, reason)]


def _gpu_fixes(preset: Preset | None, every: str) -> list[Fix]:
    fixes = [
        Fix(
            _("Read the kernel log for the GPU's Xid events"),
            _(
                "`sudo dmesg -T | grep -iE 'xid|fallen off|nvrm'` names each event and the GPU's "
                "PCI address; `nvidia-smi --query-gpu=index,pci.bus_id,serial --format=csv` maps "
                "the address to a GPU"
            ),
        ),
        Fix(
            _("Check the GPU's ECC counters, retired pages and remapped rows"),
            _(
                "`nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER`: uncorrectable counts, "
                "'Retired Pages' (pending) and 'Remapped Rows' (pending, failure) of `nvidia-smi "
                "-q`; a pending remap is applied by a GPU reset"
            ),
        ),
        Fix(
            _("Reset the GPU, or reboot the node"),
            _(
                "with no process on it: `sudo nvidia-smi -r -i <index>` (clears Xid 48/94/95/119 "
                "states and applies pending remaps); a GPU off the bus (Xid 79), lost to NVML, "
                "or a reset that fails needs a reboot"
            ),
        ),
        Fix(
            _("Drain the node and contact the provider if it comes back"),
            _(
                "a repeated Xid 48/64/74/79/95, a row-remap failure or high single-bit ECC "
                "rates mean failing hardware; with Slurm: `scontrol update nodename=<host> "
                'state=drain reason="GPU Xid"`, and resume the run on other nodes'
            ),
        ),
    ]
    if mentions_nvlink(every):
        fixes.insert(
            2,
            Fix(
                _("Keep NCCL off NVLink while the link is checked"),
                _(
                    "`nvidia-smi nvlink -s` / `-e` show the links and their errors; "
                    "NCCL_P2P_DISABLE=1 sends GPU-to-GPU traffic through host memory (much "
                    "slower) until the link is repaired"
                ),
                _env(preset, "NCCL_P2P_DISABLE", "1", _("avoid the failing NVLink")),
            ),
        )
    if preset is not None and preset.training.save_minutes is None:
        fixes.append(
            Fix(
                _("Save a checkpoint every 30 minutes"),
                _("a GPU that fails again then costs at most half an hour of training"),
                [_change("training.save_minutes", 30, _("time-based checkpoints"))],
            )
        )
    return fixes


def _kernel_fixes(preset: Preset | None, every: str) -> list[Fix]:
    fixes = []
    if re.search(r"srcSelect|n_classes|index out of bounds", every):
        fixes.append(
            Fix(
                _("Check the tokenizer against the model's vocabulary"),
                _(
                    "`len(tokenizer)` must not exceed the model's `config.vocab_size`: after "
                    "adding tokens (a pad token, chat tokens) call "
                    "`model.resize_token_embeddings(len(tokenizer))`; labels must be below the "
                    "vocabulary size or -100"
                ),
            )
        )
    fixes.append(
        Fix(
            _("Rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel"),
            _(
                "kernels then run one at a time, so the traceback names the call that faulted "
                "(slower: for the diagnosis run only)"
            ),
            _env(preset, "CUDA_LAUNCH_BLOCKING", "1", _("synchronous kernels for the traceback")),
        )
    )
    title = _("Turn off fused and compiled kernels to find the faulty one")
    reason = _("flash-attn, Liger's Triton kernels and torch.compile, one at a time")
    if preset is None:
        fixes.append(Fix(title, reason))
    else:
        t = preset.training
        changes = []
        if t.attn_implementation in ("auto", "flash_attention_2"):
            changes.append(_change("training.attn_implementation", "sdpa", _("no flash-attn")))
        if t.use_liger_kernel:
            changes.append(_change("training.use_liger_kernel", False, _("no Liger kernels")))
        if t.torch_compile:
            changes.append(_change("training.torch_compile", False, _("no compiled graph")))
        if t.compile_layers:
            changes.append(_change("training.compile_layers", False, _("no compiled layers")))
        if changes:
            fixes.append(Fix(title, reason, changes))
    fixes.append(
        Fix(
            _("Run a few steps under compute-sanitizer"),
            _(
                "`compute-sanitizer --tool memcheck python …` names the kernel, the address and "
                "the thread of an illegal access (very slow: a tiny run)"
            ),
        )
    )
    return fixes


def _amp_fixes(preset: Preset | None) -> list[Fix]:
    bf16 = Fix(
        _("Train in bf16 instead of fp16 (Ampere or newer)"),
        _("bf16 mixed precision needs no gradient scaler, so fp16 weights are no problem"),
        [
            _change("training.bf16", True, _("no gradient scaler")),
            _change("training.fp16", False, _("replaced by bf16")),
        ]
        if preset is not None and preset.training.fp16
        else [],
    )
    fp32 = Fix(
        _("Keep fp16 AMP but load the weights in fp32"),
        _(
            "AMP casts to fp16 itself and keeps fp32 master weights: load with "
            "torch_dtype=torch.float32 (newer transformers load the checkpoint's own dtype), "
            "and keep LoRA adapters in fp32; the way on GPUs older than Ampere (V100, T4)"
        ),
    )
    if preset is not None and not preset.training.fp16:
        return [fp32]  # the preset does not ask for fp16: the code that runs does
    return [bf16, fp32]


def _io_fixes(preset: Preset | None, every: str, path: str | None) -> list[Fix]:
    where = shlex.quote(path) if path else "<path>"
    fixes = [
        Fix(
            _("Check the file system behind {path}").format(path=path or _("the failing path")),
            _(
                "`df -hT {path}` names the mount and its type; for NFS/Lustre/GPFS look for server "
                "or network errors (`dmesg -T | grep -iE 'nfs|lustre|i/o error'`); a stale handle "
                "means the file changed on the server while open (reopen or remount); read-only "
                "means a read-only mount (a `:ro` volume) or a disk the kernel remounted after "
                "errors"
            ).format(path=where),
        ),
        Fix(
            _("Check the disk's health"),
            _(
                "`dmesg -T | grep -iE 'I/O error|EXT4-fs error'`, `sudo smartctl -a /dev/<disk>` "
                "(or `nvme smart-log`): a failing disk keeps failing"
            ),
        ),
    ]
    if preset is not None:
        out = preset.training.output_dir
        writing = "write()" in every or "checkpoint" in (path or "") or path is None
        inside = path is not None and out.startswith("/") and path.startswith(out.rstrip("/"))
        if not (out == "@run" or out.startswith("@run/")) and (writing or inside):
            fixes.insert(
                1,
                Fix(
                    _("Write checkpoints into the run's own folder"),
                    _(
                        "training.output_dir {old} -> @run/output: the run directory under "
                        "TRAINWIZ_HOME, on that machine's disk (local unless TRAINWIZ_HOME is a "
                        "network mount too); copy the model elsewhere afterwards"
                    ).format(old=out),
                    [_change("training.output_dir", "@run/output", _("off the failing mount"))],
                ),
            )
    space = Fix(
        _("Check free space and quota"),
        _(
            "`df -h {path}` and `quota -s`: some network file systems answer a full disk or quota "
            "with an I/O error instead of 'No space left on device'"
        ).format(path=where),
    )
    if re.search(r"(?i)space|quota|full\b", every):
        fixes.insert(0, space)
    else:
        fixes.append(space)
    return fixes


def _network_fixes(preset: Preset | None, every: str) -> list[Fix]:
    target = network_target(every)
    host, port = target if target is not None else (None, None)
    hub = "couldn't connect to" in every or "requested files in the" in every
    download = hub or (host is not None and _DOWNLOAD_HOSTS.search(host) is not None)
    fixes: list[Fix] = []
    if host is not None:
        where = f"{host} {port}" if port else f"{host} 443"
        fixes.append(
            Fix(
                _("Check that {host} answers from every node").format(host=host),
                _(
                    "`nc -zv {where}` (or `curl -v`) on each node: a timeout or 'No route to "
                    "host' there is the network, not the training"
                ).format(where=where),
            )
        )
    if download:
        mirror = preset is not None and preset.mirrors.profile == "none"
        fixes.append(
            Fix(
                _("Download through a mirror that answers"),
                _(
                    "mirrors: auto probes the official endpoints and the mirrors (hf-mirror.com "
                    "for the Hub, PyPI mirrors) and takes one that answers; without a preset, "
                    "HF_ENDPOINT=https://hf-mirror.com"
                ),
                [_change("mirrors.profile", "auto", _("use an endpoint that answers"))]
                if mirror
                else [],
            )
        )
        fixes.append(
            Fix(
                _("Or download once where there is network"),
                _(
                    "`huggingface-cli download REPO --local-dir DIR` on a machine with access, "
                    "then model.source: local and model.dir: DIR (HF_HUB_OFFLINE=1 in the run)"
                ),
            )
        )
    else:
        master = (
            f"{preset.launch.master_addr}:{preset.launch.master_port}"
            if preset is not None and preset.launch.master_addr
            else "MASTER_ADDR:MASTER_PORT"
        )
        fixes.append(
            Fix(
                _("Open the firewall (security group) between the nodes"),
                _(
                    "every node must reach {master} (the rendezvous) and the other nodes on any "
                    "TCP port (NCCL and gloo pick their ports at random)"
                ).format(master=master),
            )
        )
        fixes.append(
            Fix(
                _("Use the network interface the nodes share"),
                _(
                    "`ip -br addr` on each node; set NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME in "
                    "launch.env to the interface on their common subnet (e.g. eth0, ib0): "
                    "otherwise a docker bridge or VPN interface may be picked"
                ),
            )
        )
    fixes.append(
        Fix(
            _("Check the proxy settings"),
            _(
                "downloads may need HTTPS_PROXY (launch.env); connections between nodes must not "
                "go through it: put the nodes' addresses in NO_PROXY"
            ),
        )
    )
    return fixes


def hw_fixes(category: str, preset: Preset | None, every: str, groups: dict[str, Any]) -> (
    list[Fix] | None
):  # fmt: skip
    """Fixes of the categories of signatures_hw.py; None for any other category."""
    if category == "gpu_hardware":
        return _gpu_fixes(preset, every)
    if category == "illegal_memory_access":
        return _kernel_fixes(preset, every)
    if category == "fp16_unscale":
        return _amp_fixes(preset)
    if category == "io_error":
        return _io_fixes(preset, every, groups.get("path") or groups.get("path2"))
    if category == "network_unreachable":
        return _network_fixes(preset, every)
    return None
