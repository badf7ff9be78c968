"""Fixes for the LoRA/QLoRA/ZeRO stacks (docs/lora.md): bitsandbytes' CUDA setup, DeepSpeed's op
builds. Same conventions as fixes.py: cheapest first, concrete preset changes only when a preset
is given, advice (no changes) where the fix lies outside the preset."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from backend.diagnosis.model import Fix, PresetChange
from backend.i18n import _

if TYPE_CHECKING:
    from backend.preset.schema import Preset

# bitsandbytes 0.43 dropped the libcudart search (cuda_setup): its wheel carries the CUDA
# binaries and loads the runtime torch loaded.
BNB_SPEC = "bitsandbytes>=0.43"
CUDA_ROOT = "/usr/local/cuda"  # where the CUDA images (-devel, -runtime) put the toolkit


def _change(path: str, value: Any, reason: str) -> PresetChange:
    return PresetChange(path=path, value=value, reason=reason)


def _with_package(preset: Preset, spec: str) -> list[str]:
    """environment.extra_packages with ``spec`` instead of any entry for the same package."""
    name = re.split(r"[<>=!~\[ ]", spec, maxsplit=1)[0].lower()
    kept = [p for p in preset.environment.extra_packages if not p.lower().startswith(name)]
    return [*kept, spec]


def _devel_image(preset: Preset | None) -> Fix | None:
    env = preset.environment if preset else None
    if env is not None and "devel" in env.image:
        return None
    new = env.image.replace("runtime", "devel") if env and "runtime" in env.image else None
    return Fix(
        _("Use a -devel image (nvcc, CUDA headers and CUDA_HOME)"),
        _("DeepSpeed compiles its ops on first use; -runtime images have no compiler"),
        [
            _change("environment.image", new, _("same torch/CUDA, with the toolkit")),
            _change("launch.env", {**preset.launch.env, "CUDA_HOME": CUDA_ROOT}, _("where it is")),
        ]
        if new and preset is not None
        else [],
    )


def bitsandbytes_fixes(preset: Preset | None, every: str) -> list[Fix]:
    fixes = [
        Fix(
            _("Install a current bitsandbytes ({spec})").format(spec=BNB_SPEC),
            _(
                "since 0.43 the wheel carries its CUDA binaries and uses the CUDA runtime torch "
                "loaded: no libcudart.so search, no fallback to the CPU library"
            ),
            [
                _change(
                    "environment.extra_packages",
                    _with_package(preset, BNB_SPEC),
                    _("a bitsandbytes with CUDA binaries"),
                )
            ]
            if preset is not None
            else [],
        )
    ]
    if re.search(r"libcudart|runtime library", every) and preset is not None:
        path = f"{CUDA_ROOT}/lib64"
        current = preset.launch.env.get("LD_LIBRARY_PATH")
        fixes.append(
            Fix(
                _("Put the CUDA runtime on LD_LIBRARY_PATH"),
                _("bitsandbytes looked for libcudart.so on the library path and found none"),
                [
                    _change(
                        "launch.env",
                        {
                            **preset.launch.env,
                            "LD_LIBRARY_PATH": f"{path}:{current}" if current else path,
                        },
                        _("where CUDA images keep libcudart.so"),
                    )
                ],
            )
        )
    if preset is None or preset.training.method == "qlora":
        fixes.append(
            Fix(
                _("Train LoRA on a bf16 base instead (no bitsandbytes)"),
                _(
                    "LoRA needs no 4-bit weights but more GPU memory for the frozen base: "
                    "check it fits with trainwiz plan --tune"
                ),
                [_change("training.method", "lora", _("no 4-bit base"))] if preset else [],
            )
        )
    return fixes


def deepspeed_fixes(preset: Preset | None, every: str) -> list[Fix]:
    fixes: list[Fix | None] = []  # each kept when it changes the preset (or there is none)
    if "Ninja is required" in every:
        fixes.append(
            Fix(
                _("Install ninja in the training environment"),
                _("torch builds DeepSpeed's ops with ninja, which is not installed"),
                [
                    _change(
                        "environment.extra_packages",
                        _with_package(preset, "ninja"),
                        _("the build tool DeepSpeed's JIT needs"),
                    )
                ]
                if preset is not None
                else [],
            )
        )
    if re.search(
        r"CUDA_HOME|nvcc|\.h: No such|FAILED: |build stopped|Error (?:build|compil)", every
    ):
        fixes.append(_devel_image(preset))
    zero = preset.training.zero if preset is not None else None
    if re.search(r"cpu_adam|ds_opt_adam|CPUAdam", every) or (zero and zero.offload_optimizer):
        fixes.append(
            Fix(
                _("Turn ZeRO optimizer offload off (no CPU-Adam to build)"),
                _(
                    "offload_optimizer runs Adam on the host with DeepSpeed's cpu_adam op; "
                    "without it the GPU holds the optimizer states: check it fits with "
                    "trainwiz plan --tune"
                ),
                [_change("training.zero.offload_optimizer", False, _("GPU Adam, nothing to build"))]
                if zero is not None and zero.offload_optimizer
                else [],
            )
        )
    kept = [f for f in fixes if f is not None and (f.changes or preset is None)]
    kept.append(  # advice: outside the preset
        Fix(
            _("Prebuild DeepSpeed's ops when installing it"),
            _(
                "DS_BUILD_CPU_ADAM=1 DS_BUILD_FUSED_ADAM=1 pip install deepspeed (in a -devel "
                "image) compiles them once, so no run builds them at start"
            ),
        )
    )
    return kept


def method_fixes(category: str, preset: Preset | None, every: str) -> list[Fix] | None:
    """Fixes for the two method categories; None for any other category."""
    if category == "bitsandbytes_cuda":
        return bitsandbytes_fixes(preset, every)
    if category == "deepspeed_op_build":
        return deepspeed_fixes(preset, every)
    return None
