"""Can this machine run this image for this preset? Driver, GPU architecture, flash-attn, pins.

Every rule is a table a reader can check against NVIDIA's and Hugging Face's own numbers:
the minimum Linux driver of each CUDA toolkit (CUDA release notes, table 3), the CUDA that first
compiles for each compute capability, and the torch floor each transformers release declares in
its ``dependency_versions_table.py``. Each image gets ``compatible``, ``warning`` or
``incompatible`` with one reason per check, so the screen can say why, not just what.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from backend.i18n import _
from backend.images.catalog import ImageInfo
from backend.images.cuda_tables import (
    FLASH_ATTN_MIN_CUDA,
    FLASH_ATTN_MIN_SM,
    MINOR_COMPAT_DRIVER,
    TRANSFORMERS_PYTHON_FLOOR,
    TRANSFORMERS_TORCH_FLOOR,
    arch_for_sm,
    driver_for_cuda,
    max_cuda_for_driver,
    pinned_version,
    version_text,
    version_tuple,
)
from backend.images.host import HostGpus
from backend.preset.schema import Preset

Verdict = Literal["compatible", "warning", "incompatible"]
Level = Literal["ok", "warning", "incompatible"]
_RANK: dict[str, int] = {"ok": 0, "compatible": 0, "warning": 1, "incompatible": 2}


@dataclass(frozen=True)
class Reason:
    check: str
    level: Level
    text: str


@dataclass
class Compatibility:
    ref: str
    verdict: Verdict
    reasons: list[Reason] = field(default_factory=list)
    flash_attn_install: bool = False


def wants_flash_attn(image: ImageInfo, host: HostGpus, preset: Preset) -> bool:
    """Whether the environment build installs flash-attn (the Dockerfile uses the same rule)."""
    policy = preset.environment.flash_attn.install
    if policy == "never" or image.flash_attn:
        return False
    if policy == "always":
        return True
    sm = host.min_sm
    return (
        preset.launch.device == "cuda"
        and sm is not None
        and sm >= FLASH_ATTN_MIN_SM
        and image.flavor == "devel"
    )


def _torch_version(image: ImageInfo, preset: Preset) -> tuple[str | None, str]:
    spec = preset.environment.torch_spec
    if spec:
        return pinned_version(spec), f"torch_spec {spec}"
    return image.torch, "the image"


def _check_driver(image: ImageInfo, host: HostGpus, preset: Preset) -> list[Reason]:
    cuda = version_tuple(image.cuda)
    if not cuda:
        if preset.launch.device == "cuda" and not preset.environment.torch_spec:
            level: Level = "incompatible" if image.torch else "warning"
            return [Reason("driver", level, _("image has no CUDA but the preset trains on cuda"))]
        return [Reason("driver", "ok", _("no CUDA in the image (CPU training)"))]
    if host.driver_version is None:
        if preset.launch.device == "cpu":
            return [
                Reason(
                    "driver",
                    "ok",
                    _("CUDA {cuda} image, CPU training: no driver needed").format(cuda=image.cuda),
                )
            ]
        return [Reason("driver", "warning", _("no NVIDIA driver found here: CUDA not checked"))]
    max_cuda = version_tuple(host.cuda_driver) or version_tuple(
        max_cuda_for_driver(host.driver_version)
    )
    where = _("driver {version} (CUDA ≤ {cuda})").format(
        version=host.driver_version, cuda=version_text(max_cuda) or "?"
    )
    if not max_cuda:
        return [
            Reason(
                "driver",
                "incompatible",
                _("driver {driver_version} predates CUDA 10.2").format(
                    driver_version=host.driver_version
                ),
            )
        ]
    if cuda[:2] <= max_cuda[:2]:
        return [
            Reason(
                "driver", "ok", _("{where} runs CUDA {cuda}").format(where=where, cuda=image.cuda)
            )
        ]
    floor = MINOR_COMPAT_DRIVER.get(cuda[0])
    if (
        cuda[0] == max_cuda[0]
        and floor
        and version_tuple(host.driver_version) >= version_tuple(floor)
    ):
        return [
            Reason(
                "driver",
                "warning",
                _(
                    "{where} runs CUDA {cuda} only through minor-version compatibility (no PTX JIT); "
                    "prefer an image with CUDA ≤ {fmt} or a driver ≥ {value}"
                ).format(
                    where=where,
                    cuda=image.cuda,
                    fmt=version_text(max_cuda[:2]),
                    value=driver_for_cuda(cuda) or "?",
                ),
            )
        ]
    return [
        Reason(
            "driver",
            "incompatible",
            _(
                "{where} cannot run CUDA {cuda}: upgrade the driver to ≥ {value} or pick an "
                "image with CUDA ≤ {fmt}"
            ).format(
                where=where,
                cuda=image.cuda,
                value=driver_for_cuda(cuda) or "?",
                fmt=version_text(max_cuda[:2]),
            ),
        )
    ]


def _check_arch(image: ImageInfo, host: HostGpus) -> list[Reason]:
    cuda = version_tuple(image.cuda)
    if not cuda or not host.gpus:
        return []
    reasons: list[Reason] = []
    for sm in sorted({g.sm for g in host.gpus}):
        arch = arch_for_sm(sm)
        cc = f"sm{sm}"
        if arch is None:
            reasons.append(
                Reason(
                    "arch", "warning", _("{cc}: architecture not in trainwiz's table").format(cc=cc)
                )
            )
            continue
        name, first, last = arch
        if cuda[:2] < first:
            reasons.append(
                Reason(
                    "arch",
                    "incompatible",
                    _("{name} ({cc}) needs CUDA ≥ {fmt}; image has {cuda}").format(
                        name=name, cc=cc, fmt=version_text(first), cuda=image.cuda
                    ),
                )
            )
        elif last is not None and cuda[:2] > last:
            reasons.append(
                Reason(
                    "arch",
                    "incompatible",
                    _("CUDA {cuda} dropped {name} ({cc}); last supporting is {fmt}").format(
                        cuda=image.cuda, name=name, cc=cc, fmt=version_text(last)
                    ),
                )
            )
        else:
            reasons.append(
                Reason(
                    "arch",
                    "ok",
                    _("{name} ({cc}) supported by CUDA {cuda}").format(
                        name=name, cc=cc, cuda=image.cuda
                    ),
                )
            )
    return reasons


def _check_flash_attn(image: ImageInfo, host: HostGpus, preset: Preset) -> list[Reason]:
    policy = preset.environment.flash_attn.install
    if policy == "never":
        return [Reason("flash_attn", "ok", _("flash-attn not wanted (install: never)"))]
    if image.flash_attn:
        return [Reason("flash_attn", "ok", _("flash-attn ships in the image"))]
    sm = host.min_sm
    old_gpu = sm is not None and sm < FLASH_ATTN_MIN_SM
    cuda = version_tuple(image.cuda)
    if policy == "always":
        if old_gpu:
            return [
                Reason(
                    "flash_attn",
                    "incompatible",
                    _("flash-attn 2 needs sm80+; GPUs are sm{sm}").format(sm=sm),
                )
            ]
        if image.flavor != "devel":
            return [
                Reason(
                    "flash_attn",
                    "incompatible",
                    _(
                        "flash-attn must be built but this is not a -devel image (no nvcc): pick the "
                        "-devel tag or set flash_attn.install: never"
                    ),
                )
            ]
        if cuda and cuda[:2] < FLASH_ATTN_MIN_CUDA:
            return [
                Reason(
                    "flash_attn",
                    "incompatible",
                    _("flash-attn needs CUDA ≥ 11.7; image has {cuda}").format(cuda=image.cuda),
                )
            ]
        return [Reason("flash_attn", "ok", _("flash-attn will be built (devel image has nvcc)"))]
    # auto
    if preset.launch.device != "cuda" or sm is None:
        return [Reason("flash_attn", "ok", _("flash-attn skipped: no sm80+ GPU here (SDPA)"))]
    if old_gpu:
        return [
            Reason(
                "flash_attn",
                "ok",
                _("flash-attn skipped: GPUs are sm{sm} (< sm80), SDPA used").format(sm=sm),
            )
        ]
    if image.flavor != "devel":
        level: Level = "warning"
        text = _("flash-attn skipped: runtime image has no nvcc to build it (SDPA used)")
        if preset.launch.entry == "fastchat-train-mem":
            level, text = "incompatible", text + _("; FastChat's train_mem.py needs flash-attn")
        return [Reason("flash_attn", level, text)]
    if cuda and cuda[:2] < FLASH_ATTN_MIN_CUDA:
        return [
            Reason(
                "flash_attn",
                "warning",
                _("flash-attn skipped: needs CUDA ≥ 11.7, image has {cuda}").format(
                    cuda=image.cuda
                ),
            )
        ]
    return [Reason("flash_attn", "ok", _("flash-attn will be built (devel image has nvcc)"))]


def _floor(
    table: list[tuple[tuple[int, int], tuple[int, int]]], ver: tuple[int, ...]
) -> tuple[int, int] | None:
    for release, floor in table:
        if ver[:2] >= release:
            return floor
    return None


def _check_pins(image: ImageInfo, preset: Preset) -> list[Reason]:
    pin = preset.environment.transformers
    tf = version_tuple(pin)
    reasons: list[Reason] = []
    torch, source = _torch_version(image, preset)
    floor = _floor(TRANSFORMERS_TORCH_FLOOR, tf)
    if torch is None:
        level: Level = "ok" if preset.environment.torch_spec else "warning"
        reasons.append(
            Reason(
                "torch",
                level,
                _("torch version of {source} unknown: not checked").format(source=source),
            )
        )
    elif floor and version_tuple(torch)[:2] < floor:
        reasons.append(
            Reason(
                "torch",
                "incompatible",
                _(
                    "transformers {pin} needs torch ≥ {fmt}; {source} has {torch}: pick a newer "
                    "image or pin an older transformers (the seed's 4.31.0)"
                ).format(pin=pin, fmt=version_text(floor), source=source, torch=torch),
            )
        )
    else:
        reasons.append(
            Reason(
                "torch",
                "ok",
                _("torch {torch} ({source}) meets transformers {pin}").format(
                    torch=torch, source=source, pin=pin
                ),
            )
        )
    py_floor = _floor(TRANSFORMERS_PYTHON_FLOOR, tf)
    if image.python and py_floor and version_tuple(image.python)[:2] < py_floor:
        reasons.append(
            Reason(
                "python",
                "incompatible",
                _("transformers {pin} needs Python ≥ {fmt}; image has {python}").format(
                    pin=pin, fmt=version_text(py_floor), python=image.python
                ),
            )
        )
    if preset.environment.fsdp_state_dict_patch and torch and not torch.startswith("2.0."):
        reasons.append(
            Reason(
                "torch",
                "ok",
                _("FSDP state-dict patch skipped: torch {torch} is not 2.0.x").format(torch=torch),
            )
        )
    return reasons


def check_image(image: ImageInfo, host: HostGpus, preset: Preset) -> Compatibility:
    """All checks for one image; the verdict is the worst reason."""
    reasons = (
        _check_driver(image, host, preset)
        + _check_arch(image, host)
        + _check_flash_attn(image, host, preset)
        + _check_pins(image, preset)
    )
    worst = max((_RANK[r.level] for r in reasons), default=0)
    verdict: Verdict = ("compatible", "warning", "incompatible")[worst]  # type: ignore[assignment]
    return Compatibility(image.ref, verdict, reasons, wants_flash_attn(image, host, preset))


def newest_key(image: ImageInfo) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """Sort key: newest torch, then newest CUDA, then devel before runtime."""
    return (
        version_tuple(image.torch),
        version_tuple(image.cuda),
        1 if image.flavor == "devel" else 0,
    )


def suggest(
    images: list[ImageInfo], results: list[Compatibility], cpu_only: bool = False
) -> str | None:
    """The newest compatible image (None when nothing is compatible).

    For CPU training an image without CUDA wins over a multi-GB CUDA one.
    """
    by_ref = {r.ref: r for r in results}
    ok = [i for i in images if by_ref.get(i.ref) and by_ref[i.ref].verdict == "compatible"]
    if not ok:
        return None
    if cpu_only and any(i.cuda is None for i in ok):
        ok = [i for i in ok if i.cuda is None]
    return max(ok, key=newest_key).ref
