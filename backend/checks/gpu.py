"""The NVIDIA driver and each GPU, read through NVML (never by parsing nvidia-smi's text).

One NVML snapshot per run is shared by the driver and GPU checks. What a GPU implies is spelled
out against the preset: bf16, tf32 and FlashAttention-2 need compute capability 8.0 (Ampere)
or newer, MIG slices cannot hold one FSDP job across the card, and memory held by someone
else's process is memory this run will not get.
"""

from __future__ import annotations

import os
import re
from typing import Any

from backend.checks.context import CheckContext
from backend.checks.model import CheckResult, finding
from backend.checks.sizing import human
from backend.i18n import _
from backend.nvml import snapshot as snapshot  # the checks and the planner read one


def _os_tag() -> str:
    """NVIDIA's repo name for this distribution, e.g. ubuntu2204, debian12."""
    values: dict[str, str] = {}
    try:
        with open("/etc/os-release", encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.strip().partition("=")
                values[key] = value.strip('"')
    except OSError:
        pass
    distro, version = values.get("ID", "ubuntu"), values.get("VERSION_ID", "22.04")
    return f"{distro}{version.replace('.', '')}" if distro in ("ubuntu", "debian") else "ubuntu2204"


def driver_fix() -> str:
    tag = _os_tag()
    return (
        f"wget https://developer.download.nvidia.com/compute/cuda/repos/{tag}/x86_64/cuda-keyring_1.1-1_all.deb\n"
        "sudo dpkg -i cuda-keyring_1.1-1_all.deb && sudo apt-get update\n"
        "sudo apt-get install -y cuda-drivers && sudo reboot\n"
        + _("(the driver is all the host needs: the CUDA toolkit comes with the image)")
    )


def nvml(ctx: CheckContext) -> dict[str, Any]:
    result: dict[str, Any] = ctx.memo("nvml", snapshot)
    return result


def image_cuda(image: str | None) -> tuple[int, int] | None:
    """CUDA version an image tag names: 'pytorch/pytorch:2.5.1-cuda12.4-...', 'nvidia/cuda:12.4.1-...'."""
    if not image:
        return None
    match = re.search(r"cuda[-_]?(\d+)\.(\d+)", image) or re.search(
        r"nvidia/cuda:(\d+)\.(\d+)", image
    )
    if match:
        return int(match.group(1)), int(match.group(2))
    match = re.search(r"cu(\d{2,3})(\d)\b", image)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _needs_gpu(ctx: CheckContext) -> bool:
    return not ctx.judged or ctx.needs.device == "cuda"


def check_driver(ctx: CheckContext) -> CheckResult:
    snap = nvml(ctx)
    why = _(
        "Every CUDA program talks to the GPU through the driver; it caps the CUDA version an image may use."
    )
    if "error" in snap:
        detail = f"NVML: {snap['error']} ({snap['error_type']})"
        if not _needs_gpu(ctx):
            return finding(
                "skip",
                _("no NVIDIA driver; not needed (launch.device: cpu)"),
                detail=detail,
                why=why,
            )
        return finding(
            ctx.severity("fail"),
            _("no NVIDIA driver found"),
            detail=detail,
            why=why,
            fix=driver_fix(),
            blocks=["launch"],
            data={"error": snap["error"]},
        )
    data = {"driver": snap["driver"], "cuda": snap["cuda"], "gpu_count": len(snap["gpus"])}
    summary = _("driver {driver}, supports CUDA ≤ {cuda}").format(
        driver=snap["driver"], cuda=snap["cuda"]
    )
    want = image_cuda(ctx.needs.image) if ctx.judged and ctx.needs.runner == "docker" else None
    if want and _needs_gpu(ctx):
        have = tuple(int(x) for x in snap["cuda"].split("."))
        data["image_cuda"] = f"{want[0]}.{want[1]}"
        wanted = f"{want[0]}.{want[1]}"
        fix = (
            _(
                "choose an image built for CUDA ≤ {cuda} (environment.image), or update the driver:"
            ).format(cuda=snap["cuda"])
            + "\n"
            + driver_fix()
        )
        if want[0] > have[0]:
            return finding(
                "fail",
                summary + _("; image needs CUDA {cuda}").format(cuda=wanted),
                why=why,
                fix=fix,
                blocks=["launch"],
                data=data,
            )
        if want > have:
            return finding(
                "warn",
                summary
                + _(
                    "; image CUDA {cuda} runs only through minor-version compatibility "
                    "(PTX JIT kernels may fail)"
                ).format(cuda=wanted),
                why=why,
                fix=fix,
                data=data,
            )
        summary += _("; image CUDA {cuda} fits").format(cuda=wanted)
    return finding("ok", summary, why=why, data=data)


def check_gpus(ctx: CheckContext) -> CheckResult:
    snap = nvml(ctx)
    why = _(
        "bf16, tf32 and FlashAttention-2 need compute capability ≥ 8.0; each process needs its own GPU."
    )
    if "error" in snap:
        if not _needs_gpu(ctx):
            return finding("skip", _("no GPUs; not needed (launch.device: cpu)"), why=why)
        return finding(
            ctx.severity("fail"),
            _("no GPUs visible (no NVIDIA driver: see nvidia_driver)"),
            why=why,
            fix=_("install the driver (see nvidia_driver's fix)"),
            blocks=["launch"],
        )
    gpus = snap["gpus"]
    needs = ctx.needs
    lines = []
    for gpu in gpus:
        lines.append(
            f"GPU {gpu['index']}: {gpu['name']}, {human(gpu['memory_total'])}, "
            f"sm{gpu['sm']} (cc {gpu['compute_capability']}), "
            + _("{used} used").format(used=human(gpu["memory_used"]))
            + (_(", MIG on") if gpu["mig"] else "")
        )
        for proc in gpu["processes"]:
            lines.append(f"    pid {proc['pid']}: {human(proc['used'])} — {proc['owner']}")
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        lines.append(
            f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']} "
            + _("(NVML lists all GPUs)")
        )
    data = {"gpus": gpus}
    names = sorted({g["name"] for g in gpus})
    summary = f"{len(gpus)} × {' / '.join(names)}" if gpus else _("0 GPUs")
    if gpus:
        summary += f", sm{min(g['sm'] for g in gpus)}"
    detail = "\n".join(lines)
    if not _needs_gpu(ctx):
        return finding(
            "skip",
            summary + _(" (not used: launch.device: cpu)"),
            detail=detail,
            why=why,
            data=data,
        )
    problems: list[str] = []
    fixes: list[str] = []
    used = gpus[: needs.nproc] if ctx.judged else gpus
    if not gpus:
        problems.append(_("no GPU visible"))
    if ctx.judged and needs.nproc > len(gpus):
        problems.append(
            _("launch.nproc_per_node is {nproc} but {count} GPU(s)").format(
                nproc=needs.nproc, count=len(gpus)
            )
        )
        fixes.append(f"set launch.nproc_per_node: {max(len(gpus), 1)}")
    old = [g for g in used if g["sm"] < 80]
    if old and ctx.judged:
        if needs.bf16:
            problems.append(_("bf16 needs sm80+"))
            fixes.append("training.bf16: false and training.fp16: true")
        if needs.tf32:
            problems.append(_("tf32 needs sm80+"))
            fixes.append("training.tf32: false")
        if needs.flash_attn == "always":
            problems.append(_("FlashAttention-2 needs sm80+"))
            fixes.append(_("environment.flash_attn.install: never (SDPA is used instead)"))
    if problems:
        return finding(
            ctx.severity("fail"),
            f"{summary}: {'; '.join(problems)}",
            detail=detail,
            why=why,
            fix="\n".join(fixes),
            blocks=["launch"],
            data=data,
        )
    warnings = []
    if any(g["mig"] for g in used):
        warnings.append(_("MIG is on: one FSDP job cannot span MIG slices"))
        fixes.append(_("sudo nvidia-smi -mig 0 (needs no running jobs; may need a GPU reset)"))
    busy = [g for g in used if g["processes"] or g["memory_used"] > 2 * 1024**3]
    if busy:
        busy_ids = ", ".join(str(g["index"]) for g in busy)
        warnings.append(_("GPU {ids} already in use").format(ids=busy_ids))
        fixes.append(_("wait for those jobs, or pick free GPUs with CUDA_VISIBLE_DEVICES"))
    if len(names) > 1:
        warnings.append(_("mixed GPU models: the slowest sets the pace"))
    if warnings:
        return finding(
            "warn",
            f"{summary}: {'; '.join(warnings)}",
            detail=detail,
            why=why,
            fix="\n".join(fixes),
            data=data,
        )
    implied = (
        _("bf16, tf32 and FlashAttention-2 available")
        if gpus and min(g["sm"] for g in gpus) >= 80
        else _("no bf16/tf32/FlashAttention-2 (needs sm80+)")
    )
    return finding("ok", f"{summary}: {implied}", detail=detail, why=why, data=data)
